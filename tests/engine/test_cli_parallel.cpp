// `minfer run --parallel N -f FILE`, as a child process on the default model: every prompt of the file
// through the batching scheduler, answered in input order with the tokens `run` gives it alone
// (--deterministic), and bad uses refused cleanly.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;

std::string prompts_file(const std::vector<std::string>& lines) {
    const auto path =
        std::filesystem::temp_directory_path() / ("minfer-prompts-" + std::to_string(::getpid()));
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << "\n";
    return path.string();
}

std::vector<json> json_lines(const std::string& out) {
    std::vector<json> rows;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line, nullptr, false));
    return rows;
}

TEST(CliRunParallel, AnswersInInputOrderAsRunAlone) {
    const std::vector<std::string> prompts{"The list type", "def main():", "Once upon a time", "import os",
                                           "Hello"};
    const std::string file = prompts_file(prompts);
    const std::vector<std::string> common{"-n",           "12",     "--temp", "0.8", "--seed",         "5",
                                          "--ignore-eos", "--json", "-t",     "2",   "--deterministic"};
    std::vector<std::string> args{"run", "--parallel", "3", "-f", file};
    args.insert(args.end(), common.begin(), common.end());
    const CliResult r = run_cli(args);
    std::filesystem::remove(file);
    ASSERT_EQ(r.exit_code, 0) << r;
    const std::vector<json> rows = json_lines(r.out);
    ASSERT_EQ(rows.size(), prompts.size()) << r;
    for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_TRUE(rows[i].is_object()) << r;
        EXPECT_EQ(rows[i]["index"], i);
        std::vector<std::string> one{"run", "-p", prompts[i]};
        one.insert(one.end(), common.begin(), common.end());
        const CliResult alone = run_cli(one);
        ASSERT_EQ(alone.exit_code, 0) << alone;
        const json want = json::parse(alone.out);
        EXPECT_EQ(rows[i]["prompt_ids"], want["prompt_ids"]) << prompts[i];
        EXPECT_EQ(rows[i]["ids"], want["ids"]) << prompts[i];
        EXPECT_EQ(rows[i]["text"], want["text"]) << prompts[i];
    }
}

// Without -c the shared KV cache is sized for the sequences that run at once (parallel x (longest
// prompt + -n)), not the one-sequence default of at most 4096 tokens they would preempt each other in.
TEST(CliRunParallel, KvCacheHoldsEverySequenceAtOnce) {
    const std::vector<std::string> prompts{"The list type", "def main(): return 1", "Hello"};
    const std::string file = prompts_file(prompts);
    const CliResult r = run_cli({"run", "--parallel", "3", "-f", file, "-n", "1500", "--temp", "0", "--json",
                                 "-t", "2", "--seed", "1"});
    ASSERT_EQ(r.exit_code, 0) << r;
    size_t longest = 0;
    for (const json& row : json_lines(r.out)) longest = std::max(longest, row["prompt_ids"].size());
    const std::string want = "kv cache: " + std::to_string(3 * (longest + 1500)) + " tokens, for 3 sequences";
    EXPECT_NE(r.err.find(want), std::string::npos) << r;
    const CliResult given =
        run_cli({"run", "--parallel", "3", "-f", file, "-n", "8", "-c", "512", "-t", "2"});
    std::filesystem::remove(file);
    ASSERT_EQ(given.exit_code, 0) << given;
    EXPECT_EQ(given.err.find("kv cache:"), std::string::npos) << "-c is the user's: " << given;
}

TEST(CliRunParallel, BadUsesFailCleanly) {
    const std::string empty = prompts_file({});
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "--parallel", "2"},
          {"run", "--parallel", "2", "-f", "/nonexistent/p.txt"},
          {"run", "--parallel", "2", "-f", empty},
          {"run", "--parallel", "0", "-f", empty},
          {"run", "-f", empty, "-p", "x"},
          {"run", "-p", "x", "--kv-mem", "100"},
          {"run", "-p", "x", "--kv-mem", "900G"},
          {"run", "-p", "x", "--kv-type", "q4"},
          {"run", "-p", "x", "--kv-type", "f16", "--device", "cuda"}}) {
        const CliResult r = run_cli(args);
        EXPECT_TRUE(r.failed_cleanly()) << r;
        EXPECT_FALSE(r.err.empty()) << r;
    }
    std::filesystem::remove(empty);
}

}  // namespace
}  // namespace minfer::test
