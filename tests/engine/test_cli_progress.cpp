// Progress of long prompts (`run`) and of `bench -d`'s context, run as child processes on the default
// model: shown pass by pass on a terminal (script(1)'s pseudo-terminal here), not when stderr is a pipe,
// and the tokens generated do not change.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_util.h"

namespace minfer::test {
namespace {

constexpr const char* kScript = "/usr/bin/script";

// The command line, with stdout and stderr on a pseudo-terminal.
CliResult on_terminal(const std::vector<std::string>& args) {
    std::string cmd = MINFER_BINARY;
    for (const std::string& a : args) cmd += " " + a;
    return run_process({kScript, "-qec", cmd, "/dev/null"}, std::chrono::seconds(120));
}

std::string prompt_ids(int n) {
    std::string ids;
    for (int i = 0; i < n; ++i) ids += (i ? "," : "") + std::to_string(785 + i % 7);
    return ids;
}

TEST(CliProgress, LongPromptShowsItsPassesOnATerminal) {
    if (!std::filesystem::exists(kScript)) GTEST_SKIP() << "no " << kScript;
    const std::vector<std::string> args{
        "run", "--prompt-ids", prompt_ids(600), "-ub", "256", "-n", "4", "--temp", "0", "-t", "2", "--json"};
    const CliResult tty = on_terminal(args), piped = run_cli(args);
    ASSERT_EQ(tty.exit_code, 0) << tty;
    ASSERT_EQ(piped.exit_code, 0) << piped;
    for (const char* pass : {"\rprompt: 256/600 tokens", "\rprompt: 512/600 tokens"}) {
        EXPECT_NE(tty.out.find(pass), std::string::npos) << tty;
        EXPECT_EQ(piped.err.find(pass), std::string::npos) << piped;
    }
    const std::string last = "prompt: 512/600 tokens";
    EXPECT_EQ(tty.out.find("/600 tokens", tty.out.find(last) + last.size()), std::string::npos)
        << "the last pass runs in generate(), after the progress: " << tty;
    const std::string json = piped.out.substr(0, piped.out.find('\n'));
    EXPECT_NE(tty.out.find(json), std::string::npos) << "the tokens changed on a terminal: " << tty;
}

TEST(CliProgress, BenchDepthShowsItsPassesOnATerminal) {
    if (!std::filesystem::exists(kScript)) GTEST_SKIP() << "no " << kScript;
    const std::vector<std::string> args{"bench", "-p", "0", "-n", "4", "-d", "600", "-ub", "256", "-r", "1"};
    const CliResult tty = on_terminal(args), piped = run_cli(args);
    ASSERT_EQ(tty.exit_code, 0) << tty;
    ASSERT_EQ(piped.exit_code, 0) << piped;
    EXPECT_NE(tty.out.find("\rdepth: 512/600 tokens\rdepth: 600/600 tokens"), std::string::npos) << tty;
    EXPECT_EQ(piped.err.find("depth: "), std::string::npos) << piped;
}

}  // namespace
}  // namespace minfer::test
