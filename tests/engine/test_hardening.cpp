// Hostile model files and arguments (issue 32): values that pass unchecked into garbage, a model whose
// shapes disagree with its hyper-parameters or vocabulary, and files that are not regular files all
// fail at load or parse time with an error naming the file and the key.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_util.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/session.h"

namespace minfer {
namespace {

using test::run_cli;

GgufValue f32(double v) {
    return GgufValue{GgufValueType::F32, v};
}
GgufValue u32(uint64_t v) {
    return GgufValue{GgufValueType::U32, v};
}

GgufValue tokens(int64_t n) {
    std::vector<GgufValue> items;
    for (int64_t i = 0; i < n; ++i)
        items.push_back(GgufValue{GgufValueType::STRING, "t" + std::to_string(i)});
    return GgufWriter::make_array(GgufValueType::STRING, std::move(items));
}

// Writes a small qwen2 model with `key` overridden, and expects Model::load to fail naming the file
// and every needle.
void expect_load_error(const SynthSpec& spec, const std::vector<std::string>& needles) {
    test::TempDir tmp;
    const std::string path = tmp.file("bad.gguf");
    write_synth_model(spec, path);
    try {
        Model::load(path);
        ADD_FAILURE() << "loaded without error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg;
    }
}

SynthSpec with_key(const std::string& key, GgufValue v) {
    SynthSpec s;
    s.extra_metadata.emplace_back(key, std::move(v));
    return s;
}

TEST(Hardening, ValidSynthModelLoads) {
    test::TempDir tmp;
    SynthSpec s = with_key("tokenizer.ggml.tokens", tokens(256));
    write_synth_model(s, tmp.file("ok.gguf"));
    const auto m = Model::load(tmp.file("ok.gguf"));
    EXPECT_EQ(m->hp.n_vocab, 256);
    EXPECT_EQ(m->hp.n_layer, 2);
}

TEST(Hardening, NonFiniteOrNonPositiveFloatsAreRejectedAtLoad) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (double bad : {nan, -1e-6, 0.0, std::numeric_limits<double>::infinity()})
        expect_load_error(with_key("qwen2.attention.layer_norm_rms_epsilon", f32(bad)),
                          {"qwen2.attention.layer_norm_rms_epsilon", "positive finite"});
    for (double bad : {nan, 0.0, -10000.0})
        expect_load_error(with_key("qwen2.rope.freq_base", f32(bad)),
                          {"qwen2.rope.freq_base", "positive finite"});
}

TEST(Hardening, ZeroDimensionsAndContextAreRejectedAtLoad) {
    expect_load_error(with_key("qwen2.context_length", u32(0)), {"qwen2.context_length is 0"});
    expect_load_error(with_key("qwen2.embedding_length", u32(0)), {"qwen2.embedding_length is 0"});
    expect_load_error(with_key("qwen2.feed_forward_length", u32(0)), {"qwen2.feed_forward_length is 0"});
    expect_load_error(with_key("qwen2.attention.head_count", u32(0)), {"qwen2.attention.head_count is 0"});
    expect_load_error(with_key("qwen2.attention.head_count_kv", u32(3)),
                      {"head_count_kv", "does not divide"});
    expect_load_error(with_key("qwen2.block_count", u32(0)), {"qwen2.block_count is 0"});
}

TEST(Hardening, EmbeddingRowsMustMatchTheVocabulary) {
    expect_load_error(with_key("tokenizer.ggml.tokens", tokens(255)),
                      {"token_embd.weight has 256 rows", "tokenizer.ggml.tokens) has 255 tokens"});
    expect_load_error(with_key("tokenizer.ggml.tokens", tokens(300)),
                      {"token_embd.weight has 256 rows", "has 300 tokens"});
}

TEST(Hardening, BlockCountMustMatchTheLayerTensors) {
    expect_load_error(with_key("qwen2.block_count", u32(1)), {"qwen2.block_count is 1", "blk.1"});
    expect_load_error(with_key("qwen2.block_count", u32(3)), {"missing tensor 'blk.2."});
}

TEST(Hardening, NanSamplingFlagsAreRejectedAtParseTime) {
    for (const char* flag :
         {"--temp", "--top-p", "--min-p", "--repeat-penalty", "--presence-penalty", "--frequency-penalty"}) {
        for (const char* bad : {"nan", "-nan", "inf", "1e999", "0.5x"}) {
            const auto r = run_cli({"run", "-p", "hi", "-n", "1", flag, bad}, std::chrono::seconds(30));
            EXPECT_TRUE(r.failed_cleanly()) << flag << " " << bad << ": " << r;
            EXPECT_NE(r.err.find(flag), std::string::npos) << r;
            EXPECT_NE(r.err.find("expected a finite number"), std::string::npos) << r;
        }
    }
    const auto chat = run_cli({"chat", "--temp", "nan"}, std::chrono::seconds(30));
    EXPECT_TRUE(chat.failed_cleanly()) << chat;
    const auto range = run_cli({"run", "-p", "hi", "--top-p", "1.5"}, std::chrono::seconds(30));
    EXPECT_TRUE(range.failed_cleanly()) << range;
    EXPECT_NE(range.err.find("must be between 0 and 1"), std::string::npos) << range;
}

TEST(Hardening, FifoAsModelFailsWithoutHanging) {
    test::TempDir tmp;
    const std::string fifo = tmp.file("fifo.gguf");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    for (const char* cmd : {"run", "info", "tokenize"}) {
        std::vector<std::string> args{cmd, "-m", fifo};
        if (std::string(cmd) != "info") args.insert(args.end(), {"-p", "hi"});
        const auto r = run_cli(args, std::chrono::seconds(20));
        EXPECT_TRUE(r.failed_cleanly()) << cmd << ": " << r;
        EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r;
    }
}

nlohmann::json info_json(const std::string& path) {
    const auto r = run_cli({"info", "-m", path, "--json"}, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 0) << r;
    return nlohmann::json::parse(r.out, nullptr, false);
}

TEST(Hardening, InfoDescribesAVocabularyOnlyFile) {
    test::TempDir tmp;
    GgufWriter w;
    w.set_str("general.architecture", "qwen2");
    w.set_str("general.name", "vocab-only");
    w.set_str("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.tokens", tokens(10));
    const std::string path = tmp.file("vocab.gguf");
    w.write(path);
    const nlohmann::json j = info_json(path);
    EXPECT_EQ(j["runnable"], false);
    EXPECT_EQ(j["architecture"], "qwen2");
    EXPECT_EQ(j["tensor_count"], 0);
    EXPECT_EQ(j["tokenizer"]["vocab_size"], 10);
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"], "[STRING x 10]");
    EXPECT_NE(j["not_runnable_because"].get<std::string>().find("vocabulary-only"), std::string::npos) << j;
    const auto human = run_cli({"info", "-m", path}, std::chrono::seconds(30));
    EXPECT_EQ(human.exit_code, 0) << human;
    EXPECT_NE(human.out.find("runnable:      no: no tensors, a vocabulary-only file"), std::string::npos)
        << human;
    EXPECT_NE(human.out.find("general.name"), std::string::npos) << human;
}

TEST(Hardening, InfoDescribesAnUnknownArchitecture) {
    test::TempDir tmp;
    SynthSpec s;
    s.arch = "gpt2";
    const std::string path = tmp.file("gpt2.gguf");
    write_synth_model(s, path);
    const nlohmann::json j = info_json(path);
    EXPECT_EQ(j["runnable"], false);
    EXPECT_EQ(j["architecture"], "gpt2");
    EXPECT_GT(j["tensor_count"].get<int>(), 0);
    EXPECT_EQ(j["metadata"]["gpt2.block_count"], 2);
    EXPECT_NE(j["not_runnable_because"].get<std::string>().find("unsupported architecture 'gpt2'"),
              std::string::npos)
        << j;
    const auto run = run_cli({"run", "-m", path, "-p", "hi"}, std::chrono::seconds(30));
    EXPECT_TRUE(run.failed_cleanly()) << run;
}

// A tensor of a type minfer cannot compute with (IQ2_XXS here: its blocks fit inside the F32 data they
// replace) fails at load naming the tensor and the type; so do the MoE keys out of range.
TEST(Hardening, UnsupportedTypeOrExpertKeysFailAtLoadNamingThem) {
    test::TempDir tmp;
    SynthSpec s;
    s.n_embd = 256;
    const std::string path = tmp.file("iq2.gguf");
    write_synth_model(s, path);
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string name = "blk.0.attn_q.weight";
    const size_t at = bytes.find(name);
    ASSERT_NE(at, std::string::npos);
    uint32_t n_dims = 0, type = uint32_t(GgmlType::IQ2_XXS);
    std::memcpy(&n_dims, bytes.data() + at + name.size(), 4);
    std::memcpy(bytes.data() + at + name.size() + 4 + 8 * n_dims, &type, 4);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
        Model::load(path);
        ADD_FAILURE() << "loaded without error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'blk.0.attn_q.weight' has type IQ2_XXS"), std::string::npos)
            << e.what();
    }
    SynthSpec moe;
    moe.arch = "qwen3moe";
    moe.n_expert_used = 9;  // of 8
    expect_load_error(moe, {"qwen3moe.expert_used_count", "is 9"});
}

// The new architectures' keys and tensors: a window or a YaRN factor out of range, or a wrongly typed
// scaling type, fail naming the key; a missing Gemma post-norm or gpt-oss sink tensor names the tensor.
TEST(Hardening, WindowYarnAndArchitectureTensorsFailAtLoadNamingThem) {
    SynthSpec gemma = with_key("gemma3.attention.sliding_window", GgufValue{GgufValueType::I32, int64_t(-4)});
    gemma.arch = "gemma3";
    expect_load_error(gemma, {"gemma3.attention.sliding_window", "is -4"});
    SynthSpec oss;
    oss.arch = "gpt-oss";
    oss.extra_metadata = {
        {"gpt-oss.rope.scaling.type", GgufValue{GgufValueType::STRING, std::string("yarn")}},
        {"gpt-oss.rope.scaling.factor", GgufValue{GgufValueType::F32, -2.0}}};
    expect_load_error(oss, {"gpt-oss.rope.scaling.factor", "positive"});
    SynthSpec typed = with_key("qwen2.rope.scaling.type", GgufValue{GgufValueType::U32, uint64_t(2)});
    expect_load_error(typed, {"qwen2.rope.scaling.type"});
    // The same files without one architecture tensor: the loader names what is missing.
    for (const auto& [arch, tensor] :
         {std::pair{"gemma3", "blk.1.post_ffw_norm.weight"}, std::pair{"gpt-oss", "blk.0.attn_sinks.weight"},
          std::pair{"gpt-oss", "blk.1.ffn_down_exps.bias"}}) {
        test::TempDir tmp;
        SynthSpec spec;
        spec.arch = arch;
        const std::string path = tmp.file("cut.gguf");
        write_synth_model(spec, path);
        std::string bytes;
        {
            std::ifstream in(path, std::ios::binary);
            bytes.assign(std::istreambuf_iterator<char>(in), {});
        }
        const size_t at = bytes.find(tensor);
        ASSERT_NE(at, std::string::npos) << tensor;
        bytes[at] = 'X';  // the tensor is now "Xlk.N...."
        std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
        try {
            Model::load(path);
            ADD_FAILURE() << arch << " loaded without " << tensor;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(std::string("missing tensor '") + tensor), std::string::npos)
                << e.what();
        }
    }
}

// Session::prepare does the first pass's set-up (its graph, the KV cache's memory) beforehand, so that
// the pass itself, which `run` times for its prompt rate, builds and allocates nothing.
TEST(Hardening, PrepareTakesTheFirstPassSetUp) {
    const auto model = Model::load(std::string(MINFER_SOURCE_DIR) + "/models/qwen2-mini-Q8_0.gguf");
    Session s(*model, {16384, 2});
    const std::vector<int32_t> prompt{785, 1140, 943};
    EXPECT_EQ(s.kv().bytes(), 0u);
    s.prepare(int64_t(prompt.size()));
    const uint64_t builds = s.graph_builds();
    const size_t bytes = s.kv().bytes();
    EXPECT_GT(bytes, 0u);
    s.forward(prompt, 1);
    EXPECT_EQ(s.graph_builds(), builds) << "the prepared pass built a graph";
    EXPECT_EQ(s.kv().bytes(), bytes) << "the prepared pass allocated KV memory";
}

// run's prompt rate leaves the set-up out: at -c 16384, allocating the KV cache (32 MiB a layer) took
// 30 times the 3-token prompt's own time and showed as a rate of 9 tok/s against 280 at -c 512.
TEST(Hardening, PromptRateLeavesTheSetUpOut) {
    const auto rate = [](const char* ctx) {
        const auto r = run_cli({"run", "-p", "Hi there", "-n", "1", "-c", ctx, "-t", "2", "--seed", "1"});
        EXPECT_EQ(r.exit_code, 0) << r;
        const size_t at = r.err.find(" tokens, ");
        return at == std::string::npos ? 0.0 : std::stod(r.err.substr(at + 9));
    };
    double small = 0, large = 0;
    for (int i = 0; i < 3; ++i) small = std::max(small, rate("512")), large = std::max(large, rate("16384"));
    EXPECT_GT(large, small / 5) << "prompt rate " << large << " tok/s at -c 16384, " << small << " at -c 512";
}

}  // namespace
}  // namespace minfer
