// Tokenizer throughput, single thread: one iteration encodes (or decodes) a ~1 MB deterministic corpus,
// half English-like prose and half code; bytes_per_second counts input text bytes. "Warm" re-encodes the
// same text, so every pre-token is in the BPE cache; "Fresh" encodes a newly generated corpus each
// iteration (common words and keywords still repeat, identifiers are mostly new). Also the vocabulary
// load time. Vocabularies come from $MINFER_TEST_DATA/models (default ../shared/models). Not in CMake yet:
//   g++ -O2 -std=c++20 -Isrc bench/bench_tokenizer.cpp build/libminfer_tokenizer.a build/libminfer_gguf.a
//       -lpcre2-8 -lutf8proc -lbenchmark -lpthread -o bench_tokenizer   (one line)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {

using minfer::Tokenizer;

std::string model_path(const std::string& file) {
    const char* dir = std::getenv("MINFER_TEST_DATA");
    return std::string(dir && *dir ? dir : "../shared") + "/models/" + file;
}

const Tokenizer& tokenizer(const std::string& file) {
    static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
    auto& slot = loaded[file];
    if (!slot) slot = Tokenizer::from_gguf(*minfer::GgufFile::open(model_path(file)));
    return *slot;
}

constexpr const char* kWords[] = {
    "the",     "of",      "and",     "to",      "a",          "in",        "is",      "it",        "that",
    "was",     "for",     "on",      "are",     "with",       "as",        "they",    "be",        "at",
    "one",     "have",    "this",    "from",    "by",         "not",       "but",     "what",      "all",
    "were",    "when",    "we",      "there",   "can",        "an",        "which",   "their",     "said",
    "if",      "do",      "will",    "each",    "about",      "how",       "up",      "out",       "them",
    "then",    "she",     "many",    "some",    "so",         "these",     "would",   "other",     "into",
    "has",     "more",    "her",     "two",     "like",       "him",       "see",     "time",      "could",
    "no",      "make",    "than",    "first",   "been",       "its",       "who",     "now",       "people",
    "my",      "made",    "over",    "did",     "down",       "only",      "way",     "find",      "use",
    "may",     "water",   "long",    "little",  "very",       "after",     "words",   "called",    "just",
    "where",   "most",    "know",    "model",   "inference",  "tokenizer", "memory",  "thread",    "kernel",
    "between", "because", "without", "during",  "important",  "question",  "however", "children",  "together",
    "company", "problem", "system",  "program", "government", "number",    "morning", "yesterday", "weather"};
constexpr const char* kSyllables[] = {"ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "pe", "qu",
                                      "st", "ar", "en", "ol", "ix", "um", "br", "ch", "sh", "tr"};
constexpr const char* kKeywords[] = {"return", "if",     "for",  "while",       "const",   "auto",
                                     "int",    "def",    "self", "std::vector", "nullptr", "static",
                                     "void",   "import", "else", "in"};

std::string identifier(std::mt19937& rng) {
    std::string id;
    const int parts = 2 + static_cast<int>(rng() % 4);
    for (int i = 0; i < parts; ++i) {
        if (i > 0 && rng() % 3 == 0) id += '_';
        std::string syl = kSyllables[rng() % std::size(kSyllables)];
        if (i > 0 && rng() % 4 == 0) syl[0] = static_cast<char>(syl[0] - 'a' + 'A');
        id += syl;
    }
    return id;
}

std::string prose_paragraph(std::mt19937& rng) {
    std::geometric_distribution<int> zipfish(0.04);
    std::string out;
    const int sentences = 3 + static_cast<int>(rng() % 5);
    for (int s = 0; s < sentences; ++s) {
        const int words = 6 + static_cast<int>(rng() % 14);
        for (int w = 0; w < words; ++w) {
            std::string word = kWords[std::min<size_t>(zipfish(rng), std::size(kWords) - 1)];
            if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
            out += word;
            out += w + 1 == words ? ". " : (rng() % 9 == 0 ? ", " : " ");
        }
    }
    out += "\n\n";
    return out;
}

std::string code_block(std::mt19937& rng) {
    std::string out = std::string(kKeywords[rng() % std::size(kKeywords)]) + " " + identifier(rng) + "(" +
                      identifier(rng) + ", " + identifier(rng) + ") {\n";
    const int lines = 3 + static_cast<int>(rng() % 8);
    for (int l = 0; l < lines; ++l) {
        out += std::string(4 * (1 + rng() % 3), ' ') + kKeywords[rng() % std::size(kKeywords)] + " " +
               identifier(rng) + " = " + identifier(rng) + "[" + std::to_string(rng() % 1000) + "] * " +
               std::to_string(rng() % 100) + ".5;  // " + kWords[rng() % std::size(kWords)] + "\n";
    }
    out += "}\n\n";
    return out;
}

std::string corpus(uint32_t seed) {
    std::mt19937 rng(seed);
    std::string out;
    while (out.size() < (1u << 20)) out += rng() % 2 ? prose_paragraph(rng) : code_block(rng);
    return out;
}

void BM_EncodeWarm(benchmark::State& state, const std::string& file) {
    const Tokenizer& tok = tokenizer(file);
    const std::string text = corpus(1);
    size_t n_ids = 0;
    for (auto _ : state) {
        const std::vector<int32_t> ids = tok.encode(text, false, false);
        n_ids = ids.size();
        benchmark::DoNotOptimize(ids.data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
    state.counters["bytes_per_token"] = static_cast<double>(text.size()) / static_cast<double>(n_ids);
}

void BM_EncodeFresh(benchmark::State& state, const std::string& file) {
    const Tokenizer& tok = tokenizer(file);
    uint32_t seed = 1000;
    int64_t bytes = 0;
    for (auto _ : state) {
        state.PauseTiming();
        const std::string text = corpus(seed++);
        state.ResumeTiming();
        benchmark::DoNotOptimize(tok.encode(text, false, false).data());
        bytes += static_cast<int64_t>(text.size());
    }
    state.SetBytesProcessed(bytes);
}

void BM_Decode(benchmark::State& state, const std::string& file) {
    const Tokenizer& tok = tokenizer(file);
    const std::string text = corpus(2);
    const std::vector<int32_t> ids = tok.encode(text, false, false);
    for (auto _ : state) benchmark::DoNotOptimize(tok.decode(ids).data());
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

void BM_Load(benchmark::State& state, const std::string& file) {
    for (auto _ : state) {
        const auto gguf = minfer::GgufFile::open(model_path(file));
        benchmark::DoNotOptimize(Tokenizer::from_gguf(*gguf).get());
    }
}

const bool registered = [] {
    for (const char* file : {"qwen-vocab.gguf", "llama3-vocab.gguf", "stories260K.gguf"}) {
        const std::string f = file;
        benchmark::RegisterBenchmark(("EncodeWarm/" + f).c_str(), BM_EncodeWarm, f)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("EncodeFresh/" + f).c_str(), BM_EncodeFresh, f)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("Decode/" + f).c_str(), BM_Decode, f)->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("Load/" + f).c_str(), BM_Load, f)->Unit(benchmark::kMillisecond);
    }
    return true;
}();

}  // namespace

BENCHMARK_MAIN();
