// Observability: MINFER_TRACE (one JSON line per executed node per forward step), MINFER_GRAPH_DUMP
// (raw f32 outputs plus index.json) and `minfer dump-diff`. Steps: `run --prompt-ids 1,2,3 -n 3` does
// three forwards: step 0 prefills the three prompt tokens, steps 1 and 2 decode one sampled token each
// (the third sampled token is never fed back).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cli_util.h"
#include "gguf/gguf_test_util.h"
#include "models/model.h"
#include "runtime/observe.h"
#include "runtime/session.h"
#include "sched/alloc.h"

namespace minfer::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kModel = MINFER_SOURCE_DIR "/models/qwen2-mini-Q8_0.gguf";

// Sets an environment variable for its lifetime; children spawned meanwhile inherit it.
class ScopedEnv {
  public:
    ScopedEnv(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
    ~ScopedEnv() { ::unsetenv(name_); }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

  private:
    const char* name_;
};

CliResult run_prompt(const std::string& ids) {
    return run_cli(
        {"run", "-m", kModel, "--prompt-ids", ids, "-n", "3", "--temp", "0", "--ignore-eos", "-t", "2"});
}

CliResult run_with(const char* var, const std::string& value, const std::string& ids = "1,2,3") {
    ScopedEnv env(var, value);
    return run_prompt(ids);
}

std::vector<json> read_lines(const std::string& path) {
    std::ifstream in(path);
    std::vector<json> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    return lines;
}

json read_json(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
}

// The nodes the executor runs for a forward of nt tokens, in order: not inputs or KV views, and
// either a KV store or a node with a buffer (fusion orphans have none).
std::vector<const CNode*> executed_nodes(const ComputeGraph& g) {
    const BufferPlan plan = plan_buffers(g);
    std::vector<const CNode*> out;
    for (const CNode& n : g.nodes) {
        if (std::holds_alternative<op::Input>(n.op) || std::holds_alternative<op::KvcacheLoad>(n.op))
            continue;
        if (std::holds_alternative<op::KvcacheStore>(n.op) || plan.has_buffer(n.id)) out.push_back(&n);
    }
    return out;
}

// Per step of the CLI run above, the graph that step executes.
struct StepGraphs {
    std::unique_ptr<Model> model = Model::load(kModel);
    Session session{*model, {}};
    ComputeGraph prefill = session.planned_graph(session.params_for(3, 1));
    ComputeGraph decode = session.planned_graph(session.params_for(1, 1));
    const ComputeGraph& at(int64_t step) const { return step == 0 ? prefill : decode; }
};

TEST(BufferStats, SkipsNaNsAndCountsThem) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> v{2.0f, nan, -1.0f, 5.0f, nan};
    const BufferStats s = buffer_stats(v.data(), int64_t(v.size()));
    EXPECT_EQ(s.min, -1.0f);
    EXPECT_EQ(s.max, 5.0f);
    EXPECT_DOUBLE_EQ(s.mean, 2.0);
    EXPECT_EQ(s.nan, 2);
    const BufferStats all_nan = buffer_stats(v.data() + 1, 1);
    EXPECT_TRUE(std::isnan(all_nan.min) && std::isnan(all_nan.mean));
    EXPECT_EQ(all_nan.nan, 1);
}

TEST(Observe, TraceHasOneLinePerExecutedNodePerStep) {
    TempDir dir;
    const std::string trace = dir.file("trace.jsonl");
    const CliResult r = run_with("MINFER_TRACE", trace);
    ASSERT_EQ(r.exit_code, 0) << r;
    std::map<int64_t, std::vector<json>> by_step;
    for (json& line : read_lines(trace)) by_step[line.at("step").get<int64_t>()].push_back(std::move(line));
    ASSERT_EQ(by_step.size(), 3u);
    StepGraphs graphs;
    int with_stats = 0;
    for (int64_t step = 0; step < 3; ++step) {
        ASSERT_TRUE(by_step.count(step)) << "no lines for step " << step;
        const std::vector<const CNode*> want = executed_nodes(graphs.at(step));
        const std::vector<json>& got = by_step[step];
        ASSERT_EQ(got.size(), want.size()) << "step " << step;
        for (size_t i = 0; i < got.size(); ++i) {
            const json& l = got[i];
            const CNode& n = *want[i];
            EXPECT_EQ(l.at("node").get<int>(), n.id);
            EXPECT_EQ(l.at("name").get<std::string>(), n.name);
            EXPECT_EQ(l.at("op").get<std::string>(), op_name(n.op));
            EXPECT_EQ(l.at("shape").get<std::vector<int64_t>>(),
                      std::vector<int64_t>(n.shape.begin(), n.shape.end()));
            EXPECT_EQ(l.at("backend").get<std::string>(), "cpu");
            EXPECT_GE(l.at("us").get<double>(), 0.0);
            const bool kv_store = std::holds_alternative<op::KvcacheStore>(n.op);
            EXPECT_EQ(l.contains("min"), !kv_store) << l;
            if (kv_store) continue;
            ++with_stats;
            EXPECT_EQ(l.at("nan").get<int64_t>(), 0) << l;
            EXPECT_LE(l.at("min").get<double>(), l.at("mean").get<double>()) << l;
            EXPECT_LE(l.at("mean").get<double>(), l.at("max").get<double>()) << l;
        }
    }
    EXPECT_GT(with_stats, 0);
}

TEST(Observe, GraphDumpWritesEveryF32OutputAndAnIndex) {
    TempDir dir;
    const std::string dump = dir.file("dump/nested");  // created on demand
    ASSERT_EQ(run_with("MINFER_GRAPH_DUMP", dump).exit_code, 0);
    const json index = read_json(dump + "/index.json");
    StepGraphs graphs;
    size_t want = 0;
    for (int64_t step = 0; step < 3; ++step)
        for (const CNode* n : executed_nodes(graphs.at(step)))
            want += !std::holds_alternative<op::KvcacheStore>(n->op);
    ASSERT_EQ(index.size(), want);
    std::set<int64_t> steps;
    for (const json& e : index) {
        steps.insert(e.at("step").get<int64_t>());
        const CNode& n = graphs.at(e.at("step").get<int64_t>())[e.at("node").get<NodeId>()];
        EXPECT_EQ(e.at("name").get<std::string>(), n.name);
        EXPECT_EQ(e.at("op").get<std::string>(), op_name(n.op));
        const std::string file = dump + "/" + e.at("file").get<std::string>();
        ASSERT_TRUE(fs::exists(file)) << file;
        EXPECT_EQ(int64_t(fs::file_size(file)), n.n_elements() * 4) << file;
    }
    EXPECT_EQ(steps, (std::set<int64_t>{0, 1, 2}));

    // The prefill's logits, dumped, are what an in-process forward of the same prompt returns.
    const NodeId out = graphs.prefill.outputs.front();
    const std::vector<uint8_t> bytes = read_bytes(dump + "/step0_node" + std::to_string(out) + ".f32");
    const std::vector<int32_t> ids{1, 2, 3};
    const std::span<const float> logits = graphs.session.forward(ids);
    ASSERT_EQ(bytes.size(), logits.size() * 4);
    const auto* dumped = reinterpret_cast<const float*>(bytes.data());
    for (size_t i = 0; i < logits.size(); ++i) ASSERT_NEAR(dumped[i], logits[i], 1e-3f) << i;
}

TEST(Observe, SessionReadsTheEnvironmentOnceAndCountsSteps) {
    TempDir dir;
    const std::string trace = dir.file("trace.jsonl");
    std::unique_ptr<Model> model = Model::load(kModel);
    std::unique_ptr<Session> s;
    {
        ScopedEnv env("MINFER_TRACE", trace);
        s = std::make_unique<Session>(*model, SessionParams{});
    }
    const std::vector<int32_t> ids{4, 5};
    s->forward(ids);
    s->forward(std::span<const int32_t>(ids.data(), 1));
    EXPECT_EQ(s->steps(), 2);
    s.reset();  // closes the trace
    const std::vector<json> lines = read_lines(trace);
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.front().at("step"), 0);
    EXPECT_EQ(lines.back().at("step"), 1);
}

// Two dump directories from runs of `prompt_a` and `prompt_b`, made once for the dump-diff tests.
class DumpDiff : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        dir_ = new TempDir;
        ASSERT_EQ(run_with("MINFER_GRAPH_DUMP", a(), "1,2,3").exit_code, 0);
        ASSERT_EQ(run_with("MINFER_GRAPH_DUMP", b(), "1,2,4").exit_code, 0);
    }
    static void TearDownTestSuite() { delete dir_; }
    static std::string a() { return dir_->file("a"); }
    static std::string b() { return dir_->file("b"); }
    // A copy of dump a to corrupt.
    static std::string copy_of_a(const std::string& name) {
        const std::string dst = dir_->file(name);
        fs::copy(a(), dst, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
        return dst;
    }
    static json diff_json(const std::string& x, const std::string& y) {
        const CliResult r = run_cli({"dump-diff", "--json", x, y});
        EXPECT_EQ(r.exit_code, 0) << r;
        return json::parse(r.out);
    }
    static TempDir* dir_;
};
TempDir* DumpDiff::dir_ = nullptr;

TEST_F(DumpDiff, ARunAgainstItselfDiffersNowhere) {
    const json d = diff_json(a(), a());
    const size_t n = read_json(a() + "/index.json").size();
    ASSERT_EQ(d.at("entries").size(), n);
    EXPECT_EQ(d.at("compared"), n);
    EXPECT_EQ(d.at("only_in_a"), 0);
    for (const json& e : d.at("entries")) EXPECT_EQ(e.at("max_abs_diff").get<double>(), 0.0) << e;
    EXPECT_EQ(d.at("worst").at("max_abs_diff").get<double>(), 0.0);
}

TEST_F(DumpDiff, ADifferentPromptDiffersAndTheWorstNodeIsTheLargest) {
    const json d = diff_json(a(), b());
    double largest = 0;
    for (const json& e : d.at("entries")) largest = std::max(largest, e.at("max_abs_diff").get<double>());
    EXPECT_GT(largest, 0.0);
    EXPECT_EQ(d.at("worst").at("max_abs_diff").get<double>(), largest);
    // The first node (the embedding lookup) of the prefill differs: token 3 became 4.
    EXPECT_GT(d.at("entries").front().at("max_abs_diff").get<double>(), 0.0);
}

TEST_F(DumpDiff, PrintsATableAndASummary) {
    const CliResult r = run_cli({"dump-diff", a(), b()});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_NE(r.out.find("max_abs_diff"), std::string::npos) << r;
    EXPECT_NE(r.out.find("worst: step "), std::string::npos) << r;
    const size_t rows = size_t(std::count(r.out.begin(), r.out.end(), '\n'));
    EXPECT_EQ(rows, read_json(a() + "/index.json").size() + 3);  // header, entries, two summary lines
}

TEST_F(DumpDiff, MissingDirectoryIsAnError) {
    const std::string missing = dir_->file("no-such-dump");
    const CliResult r = run_cli({"dump-diff", a(), missing});
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find(missing + "/index.json"), std::string::npos) << r;
}

TEST_F(DumpDiff, TruncatedFileIsAnError) {
    const std::string c = copy_of_a("truncated");
    const std::string file = c + "/" + read_json(c + "/index.json").front().at("file").get<std::string>();
    fs::resize_file(file, fs::file_size(file) - 4);
    const CliResult r = run_cli({"dump-diff", a(), c});
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find(file), std::string::npos) << r;
}

TEST_F(DumpDiff, MismatchedShapeIsAnError) {
    const std::string c = copy_of_a("reshaped");
    json index = read_json(c + "/index.json");
    index[0]["shape"][1] = 7;
    std::ofstream(c + "/index.json") << index.dump();
    const CliResult r = run_cli({"dump-diff", a(), c});
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find("has shape"), std::string::npos) << r;
}

TEST_F(DumpDiff, MalformedIndexIsAnError) {
    const std::string c = copy_of_a("malformed");
    std::ofstream(c + "/index.json") << "[{\"step\": 0}]";
    const CliResult r = run_cli({"dump-diff", c, a()});
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find(c + "/index.json"), std::string::npos) << r;
}

TEST(Observe, UnusableTargetsFailTheRunCleanly) {
    TempDir dir;
    const std::string file = dir.file("plain-file");
    std::ofstream(file) << "x";
    const CliResult dump = run_with("MINFER_GRAPH_DUMP", file);
    EXPECT_TRUE(dump.failed_cleanly()) << dump;
    EXPECT_NE(dump.err.find("MINFER_GRAPH_DUMP"), std::string::npos) << dump;
    const std::string trace = dir.file("no-such-dir/trace.jsonl");
    const CliResult tr = run_with("MINFER_TRACE", trace);
    EXPECT_TRUE(tr.failed_cleanly()) << tr;
    EXPECT_NE(tr.err.find(trace), std::string::npos) << tr;
}

}  // namespace
}  // namespace minfer::test
