// Structured-output mask cost on the real Qwen vocabulary (151,669 tokens), single thread: fill_mask in
// the states a JSON generation spends its time in (inside a free string, after a key, inside a number,
// before a key, inside length-bounded and pattern strings, inside any-JSON), one accept, and schema
// compilation. The vocabulary comes from $MINFER_TEST_DATA/models/qwen-vocab.gguf (default
// ../shared/models); token bytes are mapped back from GPT-2 byte-level pieces by minfer_tokenizer.
//   cmake -B build -DMINFER_BENCH=ON && cmake --build build --target bench_grammar && build/bench_grammar
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace minfer::grammar;

std::string model_path(const std::string& file) {
    const char* dir = std::getenv("MINFER_TEST_DATA");
    return std::string(dir && *dir ? dir : "../shared") + "/models/" + file;
}

const std::shared_ptr<const Vocab>& qwen() {
    static const std::shared_ptr<const Vocab> v = [] {
        auto tok = minfer::Tokenizer::from_gguf(*minfer::GgufFile::open(model_path("qwen-vocab.gguf")));
        std::vector<std::string> bytes;
        std::vector<int32_t> eog;
        for (int32_t id = 0; id < tok->n_vocab(); ++id) {
            bytes.push_back(tok->is_special(id) ? std::string() : tok->token_to_bytes(id));
            if (tok->is_eog(id)) eog.push_back(id);
        }
        return std::make_shared<const Vocab>(std::move(bytes), std::move(eog));
    }();
    return v;
}

constexpr const char* kToolSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "score": {"type": "number"},
    "nickname": {"type": "string", "maxLength": 40},
    "slug": {"type": "string", "pattern": "^[a-z0-9]+(-[a-z0-9]+)*$"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city", "zip"], "additionalProperties": false}
  },
  "required": ["name", "age", "score", "nickname", "slug", "tags", "address"],
  "additionalProperties": false
})";

void fill_mask_after(benchmark::State& state, std::shared_ptr<const Grammar> g, const std::string& prefix) {
    Matcher m(std::move(g), qwen());
    if (!m.accept_bytes(prefix)) {
        state.SkipWithError("the prefix is not accepted");
        return;
    }
    std::vector<uint64_t> bits;
    for (auto _ : state) {
        m.fill_mask(bits);
        benchmark::DoNotOptimize(bits.data());
    }
    size_t allowed = 0;
    for (uint64_t w : bits) allowed += static_cast<size_t>(__builtin_popcountll(w));
    state.counters["allowed"] = static_cast<double>(allowed);
}

std::shared_ptr<const Grammar> tool() {
    static const auto g = compile_json_schema(nlohmann::ordered_json::parse(kToolSchema));
    return g;
}

void BM_MaskFreeString(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name": "Hello wor)");
}
void BM_MaskAfterKey(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name")");
}
void BM_MaskBeforeKey(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name": "x", )");
}
void BM_MaskBoundedInteger(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name": "x", "age": 1)");
}
void BM_MaskNumber(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name": "x", "age": 1, "score": 3.1)");
}
void BM_MaskMaxLengthString(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name": "x", "age": 1, "score": 3, "nickname": "Bob the)");
}
void BM_MaskPatternString(benchmark::State& s) {
    fill_mask_after(s, tool(), R"({"name": "x", "age": 1, "score": 3, "nickname": "", "slug": "my-sl)");
}
void BM_MaskArrayString(benchmark::State& s) {
    fill_mask_after(s, tool(),
                    R"({"name": "x", "age": 1, "score": 3, "nickname": "", "slug": "a", "tags": ["a", "b)");
}
void BM_MaskAnyObjectKey(benchmark::State& s) {
    fill_mask_after(s, any_json_object(), R"({"a": [1, {"ke)");
}
void BM_MaskAnyObjectValue(benchmark::State& s) {
    fill_mask_after(s, any_json_object(), R"({"a": )");
}

void BM_Accept(benchmark::State& state) {
    Matcher start(tool(), qwen());
    start.accept_bytes(R"({"name": "Hello)");
    for (auto _ : state) {
        Matcher m = start;
        benchmark::DoNotOptimize(m.accept_bytes(" world"));
    }
}

void BM_CompileToolSchema(benchmark::State& state) {
    const auto schema = nlohmann::ordered_json::parse(kToolSchema);
    for (auto _ : state) benchmark::DoNotOptimize(compile_json_schema(schema));
}

BENCHMARK(BM_MaskFreeString)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskAfterKey)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskBeforeKey)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskBoundedInteger)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskNumber)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskMaxLengthString)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskPatternString)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskArrayString)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskAnyObjectKey)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MaskAnyObjectValue)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Accept)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CompileToolSchema)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
