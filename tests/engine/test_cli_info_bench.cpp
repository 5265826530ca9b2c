// `minfer info` and `minfer bench`, run as child processes on the default model: the JSON objects hold
// the expected fields with sane values, and out-of-range flags fail cleanly.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#ifdef MINFER_HAVE_CUDA
#include "backend/cuda/cuda_util.h"
#endif

namespace minfer::test {
namespace {

using nlohmann::json;

json parse_stdout(const CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r;
    const json j = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r;
    return j;
}

TEST(CliInfo, JsonDescribesTheDefaultModel) {
    const json j = parse_stdout(run_cli({"info", "--json"}));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["architecture"], "qwen2");
    EXPECT_EQ(j["hparams"]["layers"], 6);
    for (const char* k : {"n_embd", "heads", "kv_heads", "head_dim", "n_ff", "vocab", "context"})
        EXPECT_GT(j["hparams"][k].get<int64_t>(), 0) << k;
    ASSERT_TRUE(j["tensor_types"].contains("Q8_0"));
    int64_t n_tensors = 0;
    for (const auto& [type, n] : j["tensor_types"].items()) n_tensors += n.get<int64_t>();
    EXPECT_EQ(n_tensors, j["tensor_count"].get<int64_t>());
    EXPECT_GT(j["parameters"].get<int64_t>(), 0);
    EXPECT_GT(j["file_size_mb"].get<double>(), 0.0);
    EXPECT_EQ(j["tokenizer"]["vocab_size"], j["hparams"]["vocab"]);
    EXPECT_TRUE(j["tokenizer"]["chat_template"].get<bool>());
}

TEST(CliInfo, HumanOutputNamesTheTypes) {
    const CliResult r = run_cli({"info"});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_NE(r.out.find("architecture:  qwen2"), std::string::npos) << r;
    EXPECT_NE(r.out.find("Q8_0: "), std::string::npos) << r;
}

TEST(CliBench, JsonHasPositiveFiniteRates) {
    const json j = parse_stdout(run_cli({"bench", "-p", "16", "-n", "8", "-r", "2", "-t", "1", "--json"}));
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["threads"], 1);
    EXPECT_TRUE(j["model"].is_string());
    for (const char* test : {"pp16", "tg8"}) {
        ASSERT_TRUE(j.contains(test)) << test;
        const double mean = j[test]["mean"].get<double>(), sd = j[test]["sd"].get<double>();
        EXPECT_TRUE(std::isfinite(mean) && mean > 0) << test << " mean " << mean;
        EXPECT_TRUE(std::isfinite(sd) && sd >= 0) << test << " sd " << sd;
    }
}

TEST(CliBench, ZeroSkipsATest) {
    const json j = parse_stdout(run_cli({"bench", "-p", "0", "-n", "4", "-r", "1", "-t", "1", "--json"}));
    EXPECT_TRUE(j.contains("tg4"));
    EXPECT_EQ(j.size(), 5u) << j.dump();  // model, threads, device, depth, tg4
    EXPECT_EQ(j["device"], "cpu");
    EXPECT_EQ(j["depth"], 0);
}

// -d D prefills D tokens before each repetition: the test runs at depth D (llama-bench's --n-depth), and
// the context holds D + N positions (a too-small one would fail the run).
TEST(CliBench, DepthRunsTheTestsAfterAPrefilledContext) {
    const json j =
        parse_stdout(run_cli({"bench", "-p", "8", "-n", "4", "-d", "40", "-r", "1", "-t", "1", "--json"}));
    EXPECT_EQ(j["depth"], 40);
    for (const char* test : {"pp8", "tg4"}) {
        ASSERT_TRUE(j.contains(test)) << test;
        EXPECT_GT(j[test]["mean"].get<double>(), 0.0) << test;
    }
    const CliResult r = run_cli({"bench", "-p", "0", "-n", "2", "-d", "3", "-r", "1", "-t", "1"});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_NE(r.out.find("| tg2 @ d3 |"), std::string::npos) << r;
}

TEST(CliBench, BadFlagsFailCleanly) {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"bench", "-r", "0"},
                                               {"bench", "-p", "-1"},
                                               {"bench", "-d", "-1"},
                                               {"bench", "-p", "0", "-n", "0"},
                                               {"bench", "-t", "x"}}) {
        const CliResult r = run_cli(args);
        EXPECT_TRUE(r.failed_cleanly()) << r;
        EXPECT_TRUE(r.out.empty()) << r;
    }
}

TEST(CliDevice, UnknownDeviceFailsCleanly) {
    for (const char* cmd : {"run", "bench", "eval", "chat"}) {
        const CliResult r = run_cli({cmd, "--device", "tpu"});
        EXPECT_TRUE(r.failed_cleanly()) << r;
        EXPECT_NE(r.err.find("--device"), std::string::npos) << r;
    }
}

// Without a GPU (or without CUDA in the build), --device cuda is one clear error, not a crash.
TEST(CliDevice, CudaWithoutAGpuFailsCleanly) {
#ifdef MINFER_HAVE_CUDA
    if (cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
#endif
    const CliResult r = run_cli({"run", "--device", "cuda", "-p", "Hello", "-n", "2"});
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find("cuda"), std::string::npos) << r;
}

TEST(CliInfo, MissingModelFailsCleanly) {
    const CliResult r = run_cli({"info", "-m", "/nonexistent/model.gguf"});
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r;
}

}  // namespace
}  // namespace minfer::test
