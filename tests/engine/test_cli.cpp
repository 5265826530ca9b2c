// The minfer command line, run as a child process: bad inputs end in one clear message on stderr and a
// non-zero exit (never a crash or a hang); `run --json` and `eval` reproduce the float64 reference; the
// graph dumps are well-formed and agree with each other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli_util.h"
#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"
#include "gguf/gguf_writer.h"
#include "models/synth.h"
#include "test_data.h"

namespace minfer::test {
namespace {

using nlohmann::json;

std::string join_ids(const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) {
        if (!s.empty()) s += ',';
        s += std::to_string(id);
    }
    return s;
}

std::vector<std::string> with_threads(std::vector<std::string> args) {
    args.insert(args.end(), {"-t", "2"});
    return args;
}

// Longest stderr line a person can take in at a glance, not counting the expected phrases (paths).
constexpr size_t kMaxMessageLine = 240;

size_t length_without(std::string line, const std::vector<std::string>& phrases) {
    for (const std::string& p : phrases)
        for (size_t at; !p.empty() && (at = line.find(p)) != std::string::npos;) line.erase(at, p.size());
    return line.size();
}

// The command must fail cleanly (non-zero exit, no signal, no timeout), print nothing on stdout, and
// explain itself on stderr in short lines holding every phrase.
testing::AssertionResult fails_with(const std::vector<std::string>& args,
                                    const std::vector<std::string>& phrases) {
    const CliResult r = run_cli(args);
    if (!r.failed_cleanly()) return testing::AssertionFailure() << "not a clean failure: " << r;
    if (!r.out.empty()) return testing::AssertionFailure() << "output on stdout: " << r;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
        if (length_without(line, phrases) > kMaxMessageLine)
            return testing::AssertionFailure() << "stderr line of " << line.size() << " characters: " << r;
    for (const std::string& p : phrases)
        if (r.err.find(p) == std::string::npos)
            return testing::AssertionFailure() << "stderr lacks '" << p << "': " << r;
    return testing::AssertionSuccess();
}

// Runs the command, expecting success, and parses its stdout as one JSON document.
json run_json(const std::vector<std::string>& args) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "expected one line: " << r;
    return json::parse(r.out, nullptr, false);
}

json load_json(const std::string& path) {
    std::ifstream f(path);
    return json::parse(f);
}

// ---- the harness itself: a hang or a crash must not pass for a clean failure ----

TEST(CliHarness, HangIsKilledAtTheDeadline) {
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r = run_process({"sleep", "60"}, std::chrono::seconds(1));
    EXPECT_TRUE(r.timed_out) << r;
    EXPECT_EQ(r.term_signal, SIGKILL);
    EXPECT_FALSE(r.failed_cleanly());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
}

TEST(CliHarness, CrashIsNotACleanFailure) {
    const CliResult r =
        run_process({"sh", "-c", "echo out; echo err >&2; kill -SEGV $$"}, std::chrono::seconds(30));
    EXPECT_EQ(r.term_signal, SIGSEGV) << r;
    EXPECT_FALSE(r.failed_cleanly());
    EXPECT_EQ(r.out, "out\n");
    EXPECT_EQ(r.err, "err\n");
    const CliResult exit3 = run_process({"sh", "-c", "exit 3"}, std::chrono::seconds(30));
    EXPECT_EQ(exit3.exit_code, 3);
    EXPECT_TRUE(exit3.failed_cleanly());
}

// ---- bad inputs ----

class CliBadInput : public testing::Test {
  protected:
    // `run` on `model`, which must fail with every phrase (the path among them).
    testing::AssertionResult run_fails(const std::string& model, std::vector<std::string> phrases) {
        phrases.push_back(model);
        return fails_with(with_threads({"run", "-m", model, "--prompt-ids", "1,2,3", "-n", "2"}), phrases);
    }

    // A small valid model written by write_synth_model, as bytes.
    std::vector<uint8_t> synth_bytes() {
        const std::string path = tmp_.file("synth.gguf");
        write_synth_model(SynthSpec{}, path);
        return read_bytes(path);
    }

    // File offset of the type field of the 1-D tensor `name` in the tensor table of `bytes`.
    static size_t type_field_of_1d_tensor(const std::vector<uint8_t>& bytes, std::string_view name) {
        const size_t p = find_unique(bytes, name);
        EXPECT_NE(p, std::string_view::npos) << name;
        return p + name.size() + 4 + 8;  // n_dims (1), one dim
    }

    std::string save(const std::string& name, const std::vector<uint8_t>& bytes, size_t n = SIZE_MAX) {
        const std::string path = tmp_.file(name);
        write_bytes(path, bytes, n);
        return path;
    }

    TempDir tmp_;
};

TEST_F(CliBadInput, TruncatedModelFile) {
    const std::string model = model_path("qwen2-mini-Q8_0.gguf");
    MINFER_REQUIRE_FILE(model);
    const std::vector<uint8_t> bytes = read_bytes(model);
    const uint64_t data = GgufFile::open(model)->data_offset();
    // Cuts in the header, metadata and tensor table read as truncated; cuts in the data section leave a
    // tensor that extends past the end of the file.
    for (const uint64_t cut : {uint64_t(2), uint64_t(20), uint64_t(5000), data - 64}) {
        const std::string path = save("cut" + std::to_string(cut) + ".gguf", bytes, cut);
        EXPECT_TRUE(run_fails(path, {"truncated at byte " + std::to_string(cut)})) << "cut at " << cut;
    }
    for (const uint64_t cut : {data + 1000, uint64_t(bytes.size() / 2), uint64_t(bytes.size() - 1)}) {
        const std::string path = save("cut" + std::to_string(cut) + ".gguf", bytes, cut);
        EXPECT_TRUE(run_fails(path, {"past end of file"})) << "cut at " << cut;
    }
}

TEST_F(CliBadInput, WrongMagic) {
    std::vector<uint8_t> bytes = synth_bytes();
    bytes[3] = 'X';
    EXPECT_TRUE(run_fails(save("magic.gguf", bytes), {"magic"}));
}

TEST_F(CliBadInput, TensorOffsetPastEndOfFile) {
    std::vector<uint8_t> bytes = synth_bytes();
    put(bytes, type_field_of_1d_tensor(bytes, "output_norm.weight") + 4, uint64_t(1) << 30);
    EXPECT_TRUE(run_fails(save("offset.gguf", bytes), {"'output_norm.weight'", "past end of file"}));
}

TEST_F(CliBadInput, UnknownTensorType) {
    std::vector<uint8_t> bytes = synth_bytes();
    put(bytes, type_field_of_1d_tensor(bytes, "output_norm.weight"), uint32_t(99));
    EXPECT_TRUE(run_fails(save("type.gguf", bytes), {"unknown tensor type 99", "'output_norm.weight'"}));
}

TEST_F(CliBadInput, TextFile) {
    const std::string path = tmp_.file("notes.txt");
    std::ofstream(path) << "These are notes, not a model.\n";
    EXPECT_TRUE(run_fails(path, {"not a GGUF file", "magic"}));
}

TEST_F(CliBadInput, MissingFile) {
    EXPECT_TRUE(run_fails(tmp_.file("absent.gguf"), {"cannot open"}));
}

TEST_F(CliBadInput, UnknownArchitectureIsNamedWithTheSupportedOnes) {
    GgufWriter w;
    w.set_str("general.architecture", "mamba");
    w.set_u32("mamba.block_count", 2);
    const std::vector<float> norm(64, 1.0f);
    w.add_tensor("output_norm.weight", GgmlType::F32, {64}, norm.data(), norm.size() * sizeof(float));
    const std::string path = tmp_.file("mamba.gguf");
    w.write(path);
    EXPECT_TRUE(run_fails(path, {"architecture 'mamba'", "qwen2", "qwen3", "llama"}));
}

// Failures that need a valid model: prompt problems.
class CliBadPrompt : public testing::Test {
  protected:
    void SetUp() override { MINFER_REQUIRE_FILE(model_); }
    std::vector<std::string> cmd(const std::string& sub, std::vector<std::string> extra) const {
        std::vector<std::string> args{sub, "-m", model_};
        args.insert(args.end(), extra.begin(), extra.end());
        return with_threads(args);
    }
    const std::string model_ = model_path("qwen2-mini-Q8_0.gguf");
};

TEST_F(CliBadPrompt, PromptLongerThanTheContext) {
    std::vector<int32_t> ids(40);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(100 + i);
    const std::string list = join_ids(ids);
    EXPECT_TRUE(fails_with(cmd("run", {"--prompt-ids", list, "-c", "16"}), {"40 tokens", "context of 16"}));
    EXPECT_TRUE(fails_with(cmd("eval", {"--prompt-ids", list, "-c", "16"}), {"40 tokens", "context of 16"}));
}

TEST_F(CliBadPrompt, MalformedPromptIds) {
    for (const char* sub : {"run", "eval"})
        for (const std::string bad : {"1,x,3", "1,,3", "1,2,", "99999999999"})
            EXPECT_TRUE(fails_with(cmd(sub, {"--prompt-ids=" + bad}), {"--prompt-ids", "'" + bad + "'"}))
                << sub << " " << bad;
}

TEST_F(CliBadPrompt, TokenIdOutOfRange) {
    for (const char* sub : {"run", "eval"}) {
        EXPECT_TRUE(
            fails_with(cmd(sub, {"--prompt-ids", "1,99999999,3"}), {"token id 99999999", "out of range"}))
            << sub;
        EXPECT_TRUE(fails_with(cmd(sub, {"--prompt-ids=5,-1"}), {"token id -1", "out of range"})) << sub;
    }
}

TEST_F(CliBadPrompt, RunNeedsExactlyOnePrompt) {
    EXPECT_TRUE(fails_with(cmd("run", {}), {"exactly one of"}));
    EXPECT_TRUE(fails_with(cmd("run", {"-p", "Hello", "--prompt-ids", "1,2"}), {"exactly one of"}));
}

// An empty text is a valid input: no tokens, or the BOS alone where the vocabulary adds one.
TEST_F(CliBadPrompt, EmptyTextTokenizesToNothing) {
    const CliResult plain = run_cli({"tokenize", "-m", model_, "-p", ""});
    EXPECT_EQ(plain.exit_code, 0) << plain;
    EXPECT_EQ(plain.out, "[]\n");
    const json j = run_json({"tokenize", "-m", model_, "-p", "", "--json"});
    EXPECT_EQ(j, json::parse(R"({"ids": [], "pieces": []})"));
    const std::string empty_file = testing::TempDir() + "/minfer-empty-prompt.txt";
    std::ofstream(empty_file).close();
    EXPECT_EQ(run_cli({"tokenize", "-m", model_, "-f", empty_file, "--ids"}).out, "[]\n");
    EXPECT_EQ(run_cli({"tokenize", "-m", model_, "-p", "Hello", "--ids"}).out, "[39,4791]\n");
    EXPECT_TRUE(fails_with({"tokenize", "-m", model_}, {"exactly one of -p TEXT or -f FILE"}));
    EXPECT_TRUE(fails_with(cmd("run", {"-p", ""}), {"the prompt is empty", "no BOS"}));
}

TEST(CliEmptyPrompt, RunStartsFromTheBosAlone) {
    const std::string model = model_path("stories260K.gguf");
    MINFER_REQUIRE_FILE(model);
    EXPECT_EQ(run_cli({"tokenize", "-m", model, "-p", "", "--ids"}).out, "[1]\n");
    const json j = run_json(
        with_threads({"run", "-m", model, "-p", "", "-n", "4", "--temp", "0", "--ignore-eos", "--json"}));
    EXPECT_EQ(j["prompt_ids"], json::array({1}));
    EXPECT_EQ(j["ids"].size(), 4u);
}

// Argument errors are caught while parsing, before any model is opened.
TEST(CliBadArgs, UnknownFlag) {
    EXPECT_TRUE(fails_with({"run", "--prompt-ids", "1,2", "--bogus-flag"}, {"--bogus-flag"}));
    EXPECT_TRUE(fails_with({"frobnicate"}, {"frobnicate"}));
}

TEST(CliBadArgs, BadFlagValues) {
    EXPECT_TRUE(fails_with({"run", "--prompt-ids", "1,2", "-n", "-5"}, {"n-predict", "-5"}));
    EXPECT_TRUE(fails_with({"run", "--prompt-ids", "1,2", "-n", "many"}, {"n-predict", "many"}));
    EXPECT_TRUE(fails_with({"run", "--prompt-ids", "1,2", "--top-p", "2"}, {"top-p"}));
    EXPECT_TRUE(fails_with({"run", "--prompt-ids", "1,2", "--min-p", "-0.5"}, {"min-p"}));
    EXPECT_TRUE(fails_with({"eval", "--prompt-ids", "1,2", "--top-k", "0"}, {"top-k"}));
}

TEST(CliBadArgs, MissingArguments) {
    EXPECT_TRUE(fails_with({"eval"}, {"--prompt-ids", "required"}));
    EXPECT_TRUE(fails_with({}, {"subcommand"}));
}

// ---- run and eval against the float64 reference ----

class CliReference : public testing::Test {
  protected:
    void SetUp() override {
        MINFER_REQUIRE_FILE(model_);
        MINFER_REQUIRE_FILE(ref_file_);
        ref_ = load_json(ref_file_);
    }
    const std::string model_ = model_path("qwen2-mini-F16.gguf");
    const std::string ref_file_ = ref_path("qwen2-mini.ref.json");
    json ref_;
};

TEST_F(CliReference, RunGreedyJsonMatchesReference) {
    const auto& p = ref_["prompts"][0];
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(join_ids(ids), "785,1140,943,374,264,5206,480,511,4375");
    const json out = run_json(with_threads({"run", "-m", model_, "--prompt-ids", join_ids(ids), "-n", "48",
                                            "--temp", "0", "--ignore-eos", "--json"}));
    ASSERT_TRUE(out.is_object()) << out;
    EXPECT_EQ(out["prompt_ids"].get<std::vector<int32_t>>(), ids);
    EXPECT_EQ(out["ids"].get<std::vector<int32_t>>(), p["greedy_ids"].get<std::vector<int32_t>>());
    EXPECT_TRUE(out["text"].is_string());
}

// Without --ignore-eos generation ends just before the first end-of-sequence token of the greedy
// continuation, which is never reported.
TEST_F(CliReference, RunStopsAtEndOfSequence) {
    const int64_t eos = GgufFile::open(model_)->get_int("tokenizer.ggml.eos_token_id");
    int stopped_early = 0;
    for (const auto& p : ref_["prompts"]) {
        SCOPED_TRACE(p["text"].get<std::string>());
        const auto ids = p["ids"].get<std::vector<int32_t>>();
        auto expected = p["greedy_ids"].get<std::vector<int32_t>>();
        if (const auto it = std::find(expected.begin(), expected.end(), eos); it != expected.end()) {
            expected.erase(it, expected.end());
            ++stopped_early;
        }
        const json out = run_json(with_threads(
            {"run", "-m", model_, "--prompt-ids", join_ids(ids), "-n", "48", "--temp", "0", "--json"}));
        ASSERT_TRUE(out.is_object()) << out;
        const auto got = out["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(std::count(got.begin(), got.end(), eos), 0);
        EXPECT_EQ(got, expected);
    }
    // The reference has prompts whose greedy continuation hits EOS, one of them at the first step.
    EXPECT_GE(stopped_early, 2);
}

TEST_F(CliReference, EvalTopKAndAllLogits) {
    const auto& p = ref_["prompts"][0];
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    TempDir tmp;
    const std::string logits_file = tmp.file("logits.f32");
    const json out = run_json(with_threads({"eval", "-m", model_, "--prompt-ids", join_ids(ids), "--top-k",
                                            "10", "--json", "--all-logits", logits_file}));
    ASSERT_TRUE(out.is_object()) << out;
    EXPECT_EQ(out["ids"].get<std::vector<int32_t>>(), ids);
    const json& positions = out["positions"];
    ASSERT_EQ(positions.size(), ids.size());
    for (const json& pos : positions) {
        EXPECT_EQ(pos["top_ids"].size(), 10u);
        EXPECT_EQ(pos["top_logits"].size(), 10u);
    }
    const auto top0 = positions[0]["top_ids"].get<std::vector<int32_t>>();
    const auto ref_top0 = p["top10_ids"][0].get<std::vector<int32_t>>();
    EXPECT_EQ(std::vector<int32_t>(top0.begin(), top0.begin() + 3),
              std::vector<int32_t>(ref_top0.begin(), ref_top0.begin() + 3));

    const int64_t n_vocab = GgufFile::open(model_)->tensor("token_embd.weight").dims[1];
    const std::vector<uint8_t> raw = read_bytes(logits_file);
    ASSERT_EQ(raw.size(), ids.size() * size_t(n_vocab) * sizeof(float));
    std::vector<float> logits(raw.size() / sizeof(float));
    std::memcpy(logits.data(), raw.data(), raw.size());
    for (size_t t = 0; t < ids.size(); ++t) {
        const float* row = logits.data() + t * size_t(n_vocab);
        const auto top_ids = positions[t]["top_ids"].get<std::vector<int32_t>>();
        const auto top_logits = positions[t]["top_logits"].get<std::vector<float>>();
        EXPECT_EQ(std::max_element(row, row + n_vocab) - row, top_ids[0]) << "position " << t;
        for (size_t k = 0; k < top_ids.size(); ++k)
            EXPECT_FLOAT_EQ(row[top_ids[k]], top_logits[k]) << "position " << t << " rank " << k;
    }
}

// ---- graph dumps ----

class CliGraphDump : public testing::Test {
  protected:
    void SetUp() override { MINFER_REQUIRE_FILE(model_); }

    // Runs `sub` with both dumps; returns the JSON dump and the DOT text, checking the printed count.
    std::pair<json, std::string> dump(const std::string& sub) {
        const std::string dot = tmp_.file(sub + ".dot"), js = tmp_.file(sub + ".json");
        const CliResult r = run_cli(with_threads(
            {sub, "-m", model_, "--prompt-ids", kPrompt, "--dump-graph", dot, "--dump-graph-json", js}));
        EXPECT_EQ(r.exit_code, 0) << r;
        std::smatch m;
        EXPECT_TRUE(std::regex_search(r.out, m, std::regex("graph: (\\d+) nodes"))) << r;
        const json g = load_json(js);
        EXPECT_EQ(m.size() == 2 ? std::stoul(m[1].str()) : 0, g["nodes"].size()) << r;
        std::ifstream f(dot);
        std::stringstream text;
        text << f.rdbuf();
        return {g, text.str()};
    }

    static const json* node_named(const json& g, const std::string& name) {
        for (const json& n : g["nodes"])
            if (n["name"] == name) return &n;
        return nullptr;
    }

    static bool is_input(const json& g, const json& node) {
        const auto in = g["inputs"].get<std::vector<int64_t>>();
        return std::find(in.begin(), in.end(), node["id"].get<int64_t>()) != in.end();
    }

    static constexpr const char* kPrompt = "785,1140,943,374,264,5206,480,511,4375";
    static constexpr size_t kPromptLen = 9;
    const std::string model_ = model_path("qwen2-mini-Q8_0.gguf");
    TempDir tmp_;
};

TEST_F(CliGraphDump, RunDumpsAreConsistent) {
    const auto [g, dot] = dump("run");
    ASSERT_TRUE(g.contains("nodes")) << g;
    EXPECT_EQ(g["params"]["n_tokens"], kPromptLen);
    EXPECT_EQ(g["params"]["n_out"], 1);

    // The KV cache reads are leaves: no sources, no edge into them.
    int kv_loads = 0;
    for (const json& n : g["nodes"]) {
        if (n["op"] != "KvcacheLoad") continue;
        ++kv_loads;
        EXPECT_TRUE(n["src"].empty()) << n;
        for (const json& e : g["edges"]) EXPECT_NE(e[1], n["id"]) << n["name"];
    }
    EXPECT_GT(kv_loads, 0);
    for (const char* name : {"positions", "seq_slot", "block_table", "out_ids"}) {
        const json* input = node_named(g, name);
        ASSERT_NE(input, nullptr) << name;
        EXPECT_TRUE(is_input(g, *input)) << name;
        EXPECT_EQ((*input)["op"], "Input") << name;
    }

    // The DOT file declares every node and edge of the JSON dump.
    const std::regex node_line("\\n  n\\d+ \\[label="), edge_line("\\n  n\\d+ -> n\\d+;");
    const auto count = [&text = dot](const std::regex& re) {  // clang 14 cannot capture a binding
        return size_t(
            std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
    };
    EXPECT_EQ(count(node_line), g["nodes"].size());
    EXPECT_EQ(count(edge_line), g["edges"].size());
}

TEST_F(CliGraphDump, DotParsesWithGraphviz) {
    if (!run_process({"dot", "-V"}, std::chrono::seconds(30)).spawn_error.empty())
        GTEST_SKIP() << "graphviz 'dot' not found";
    const std::string dot = tmp_.file("graph.dot"), svg = tmp_.file("graph.svg");
    const CliResult r =
        run_cli(with_threads({"run", "-m", model_, "--prompt-ids", kPrompt, "--dump-graph", dot}));
    ASSERT_EQ(r.exit_code, 0) << r;
    const CliResult d = run_process({"dot", "-Tsvg", dot, "-o", svg}, std::chrono::seconds(120));
    EXPECT_EQ(d.exit_code, 0) << d;
    EXPECT_EQ(d.err, "");
    EXPECT_GT(std::filesystem::file_size(svg), 0u);
}

TEST_F(CliGraphDump, EvalGraphKeepsEveryPosition) {
    const auto [g, dot] = dump("eval");
    ASSERT_TRUE(g.contains("nodes")) << g;
    EXPECT_EQ(g["params"]["n_tokens"], kPromptLen);
    EXPECT_EQ(g["params"]["n_out"], kPromptLen);
    EXPECT_EQ(node_named(g, "out_ids"), nullptr);
    EXPECT_FALSE(dot.empty());
}

}  // namespace
}  // namespace minfer::test
