// Flags as a llama.cpp user types them (issue 32): -ngl, -cnv, -f, -n -1, --version, a random seed that
// is printed, readable help with defaults, "error:" before argument errors, unknown commands and
// options named as such, and the template command with the chat variables.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "cli_util.h"
#include "gguf/gguf_test_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

using nlohmann::json;

CliResult cli(const std::vector<std::string>& args) {
    return run_cli(args, std::chrono::seconds(120));
}

// The clean failure whose stderr starts with "error: " and holds every needle.
void expect_error(const std::vector<std::string>& args, const std::vector<std::string>& needles) {
    const CliResult r = cli(args);
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r;
    for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << n << "\n" << r;
}

// The seed a run printed on stderr ("seed: N").
uint64_t printed_seed(const CliResult& r) {
    std::smatch m;
    const std::string err = r.err;
    if (!std::regex_search(err, m, std::regex("seed: ([0-9]+)"))) {
        ADD_FAILURE() << "no seed printed\n" << r;
        return 0;
    }
    return std::stoull(m[1]);
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
}

TEST(CliFlags, DeviceHelpAndErrorsAreReadable) {
    const CliResult help = cli({"run", "--help"});
    ASSERT_EQ(help.exit_code, 0) << help;
    EXPECT_NE(help.out.find("--device cpu|cuda=cpu"), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("--kv-type f32|f16|q8_0=f32"), std::string::npos) << help.out;
    EXPECT_EQ(help.out.find("->"), std::string::npos) << help.out;
    expect_error({"run", "-p", "hi", "--device", "gpu"}, {"--device: expected one of cpu, cuda, got 'gpu'"});
    expect_error({"run", "-p", "hi", "--kv-type", "q4"}, {"expected one of f32, f16, q8_0, got 'q4'"});
}

TEST(CliFlags, HelpShowsDefaults) {
    for (const char* cmd : {"run", "chat"}) {
        const CliResult help = cli({cmd, "--help"});
        ASSERT_EQ(help.exit_code, 0) << help;
        for (const char* want : {"--temp FLOAT:finite=0.8", "--top-k INT:INT in [0, 1073741824]=40",
                                 "--top-p FLOAT:in [0, 1]=0.95", "--min-p FLOAT:in [0, 1]=0.05",
                                 "default: random", "-n,--n-predict INT="})
            EXPECT_NE(help.out.find(want), std::string::npos) << cmd << ": " << want << "\n" << help.out;
    }
}

TEST(CliFlags, ArgumentErrorsHaveTheErrorPrefix) {
    expect_error({"run", "-p", "hi", "--bogus-flag"}, {"unknown option '--bogus-flag'"});
    expect_error({"run", "-p", "hi", "-n", "many"}, {"--n-predict", "many"});
    expect_error({"run", "-p", "hi", "--top-k", "-3"}, {"--top-k"});
    expect_error({"run", "-p", "hi", "--seed", "abc"}, {"--seed", "abc"});
    expect_error({"bench", "-r", "0"}, {"--repetitions"});
}

TEST(CliFlags, UnknownCommandsAreNamedWithTheList) {
    for (const char* cmd : {"visualize", "generate"})
        expect_error({cmd}, {"unknown command '" + std::string(cmd) + "'", "run, chat", "info"});
}

TEST(CliFlags, SeedIsRandomByDefaultAndPrinted) {
    const std::vector<std::string> args{"run", "-p",           "Once",   "-n", "12", "--temp",
                                        "1.5", "--ignore-eos", "--json", "-t", "2"};
    const CliResult a = cli(args), b = cli(args);
    ASSERT_EQ(a.exit_code, 0) << a;
    ASSERT_EQ(b.exit_code, 0) << b;
    const uint64_t seed_a = printed_seed(a);
    EXPECT_NE(seed_a, printed_seed(b));
    std::vector<std::string> again = args;
    again.insert(again.end(), {"--seed", std::to_string(seed_a)});
    const CliResult c = cli(again);
    ASSERT_EQ(c.exit_code, 0) << c;
    EXPECT_EQ(printed_seed(c), seed_a);
    EXPECT_EQ(json::parse(c.out)["ids"], json::parse(a.out)["ids"]);
    std::vector<std::string> minus_one = args;
    minus_one.insert(minus_one.end(), {"--seed", "-1"});
    const CliResult d = cli(minus_one);
    ASSERT_EQ(d.exit_code, 0) << d;
    EXPECT_NE(printed_seed(d), UINT64_MAX);
}

TEST(CliFlags, GpuLayersMeansCuda) {
    const CliResult cpu = cli({"run", "-p", "hi", "-n", "2", "-ngl", "0", "--temp", "0"});
    EXPECT_EQ(cpu.exit_code, 0) << cpu;
    const CliResult gpu = cli({"run", "-p", "hi", "-n", "2", "-ngl", "99", "--temp", "0"});
    EXPECT_EQ(gpu.err.find("n-predict"), std::string::npos) << gpu;
#ifndef MINFER_HAVE_CUDA
    EXPECT_TRUE(gpu.failed_cleanly()) << gpu;
    EXPECT_NE(gpu.err.find("without CUDA"), std::string::npos) << gpu;
#endif
    expect_error({"run", "-p", "hi", "-ngl", "4", "--device", "cpu"}, {"--n-gpu-layers", "--device"});
}

TEST(CliFlags, MultiLetterShortFlags) {
    expect_error({"run", "-p", "hi", "-cnv"}, {"unknown option '-cnv'", "minfer chat"});
    expect_error({"run", "-p", "hi", "-fa"}, {"unknown option '-fa'"});
    expect_error({"chat", "-xyz"}, {"unknown option '-xyz'"});
    const CliResult plain = cli({"run", "-p", "hi", "-n", "2", "-no-cnv", "--temp", "0"});
    EXPECT_EQ(plain.exit_code, 0) << plain;
    const CliResult ub = cli({"run", "-p", "hi", "-n", "2", "-ub", "16", "--temp", "0"});
    EXPECT_EQ(ub.exit_code, 0) << ub;
}

TEST(CliFlags, PromptFromFile) {
    TempDir dir;
    const std::string text = "The list type is a mutable sequence.\nIt holds items.";
    write_text(dir.file("p.txt"), text);
    const CliResult from_file = cli({"run", "-f", dir.file("p.txt"), "-n", "1", "--temp", "0", "--json"});
    const CliResult from_arg = cli({"run", "-p", text, "-n", "1", "--temp", "0", "--json"});
    ASSERT_EQ(from_file.exit_code, 0) << from_file;
    ASSERT_EQ(from_arg.exit_code, 0) << from_arg;
    EXPECT_EQ(json::parse(from_file.out)["prompt_ids"], json::parse(from_arg.out)["prompt_ids"]);

    std::string big;
    while (big.size() < (1u << 20)) big += "All work and no play makes Jack a dull boy. ";
    write_text(dir.file("big.txt"), big);
    const CliResult tok = cli({"tokenize", "-f", dir.file("big.txt"), "--json"});
    ASSERT_EQ(tok.exit_code, 0) << tok.err;
    EXPECT_GT(json::parse(tok.out)["ids"].size(), 100000u);
    expect_error({"run", "-f", dir.file("p.txt"), "-p", "x"}, {"not both"});
    expect_error({"run", "-f", dir.file("missing.txt")}, {"missing.txt", "cannot open"});
}

TEST(CliFlags, NPredictMinusOneRunsToTheEndOfTheContext) {
    const CliResult r =
        cli({"run", "-p", "hi", "-n", "-1", "-c", "200", "--temp", "0", "--ignore-eos", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r;
    const json j = json::parse(r.out);
    const size_t total = j["prompt_ids"].size() + j["ids"].size();
    EXPECT_GT(j["ids"].size(), 128u);  // beyond the default -n
    EXPECT_GE(total, 200u);
    EXPECT_LE(total, 201u);
    expect_error({"run", "-p", "hi", "-n", "-2"}, {"--n-predict", "-2"});
}

TEST(CliFlags, ContextBeyondTrainingWarns) {
    const CliResult beyond = cli({"run", "-p", "hi", "-n", "1", "-c", "4160", "--temp", "0"});
    ASSERT_EQ(beyond.exit_code, 0) << beyond;
    EXPECT_NE(beyond.err.find("warning: -c 4160 is beyond the 4096 tokens the model was trained on"),
              std::string::npos)
        << beyond;
    const CliResult within = cli({"run", "-p", "hi", "-n", "1", "-c", "4096", "--temp", "0"});
    ASSERT_EQ(within.exit_code, 0) << within;
    EXPECT_EQ(within.err.find("warning:"), std::string::npos) << within;
}

TEST(CliFlags, Version) {
    const CliResult r = cli({"--version"});
    EXPECT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(r.out.rfind("minfer", 0), 0u) << r;
}

TEST(CliFlags, TemplateGetsTheChatVariables) {
    const std::string model = model_path("llama3-vocab.gguf");
    MINFER_REQUIRE_FILE(model);
    TempDir dir;
    write_text(dir.file("m.json"), R"([{"role": "user", "content": "hi"}])");
    const CliResult r =
        cli({"template", "-m", model, "--messages", dir.file("m.json"), "--add-generation-prompt"});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(r.out.rfind("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", 0), 0u)
        << r;
}

}  // namespace
}  // namespace minfer::test
