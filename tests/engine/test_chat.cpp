// minfer chat and run --chat, run as child processes on the default model (which has a Qwen chat
// template): answers are streamed one per turn, /reset starts over exactly like a fresh session, the KV
// cache is reused across turns without changing the answers, and run --chat feeds the rendered template.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli_util.h"
#include "gguf/gguf_test_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

using nlohmann::json;

const std::string kModel = MINFER_SOURCE_DIR "/models/qwen2-mini-Q8_0.gguf";

std::string write_file(const TempDir& dir, const std::string& name, const std::string& text) {
    const std::string path = dir.file(name);
    std::ofstream(path) << text;
    return path;
}

// `minfer chat -n 8 --temp 0` with `input` on stdin (through sh, as run_process reads /dev/null).
CliResult chat(const std::string& input, const std::vector<std::string>& extra = {}) {
    TempDir dir;
    std::vector<std::string> argv{"sh",
                                  "-c",
                                  "f=$1; shift; exec \"$@\" < \"$f\"",
                                  "sh",
                                  write_file(dir, "stdin.txt", input),
                                  MINFER_BINARY,
                                  "chat",
                                  "-n",
                                  "8",
                                  "--temp",
                                  "0",
                                  "-t",
                                  "2"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv, std::chrono::seconds(120));
}

json run_json(const std::vector<std::string>& args) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << r;
    return json::parse(r.out, nullptr, false);
}

// Token ids of the model's template applied to `messages` (minfer template, then minfer tokenize).
std::vector<int32_t> template_ids(const json& messages) {
    TempDir dir;
    const CliResult text = run_cli({"template", "--add-generation-prompt", "--messages",
                                    write_file(dir, "messages.json", messages.dump())});
    EXPECT_EQ(text.exit_code, 0) << text;
    return run_json({"tokenize", "--json", "-p", text.out})["ids"].get<std::vector<int32_t>>();
}

// The "(N reused)" count of every answer's summary line on stderr.
std::vector<int> reused_counts(const std::string& err) {
    std::vector<int> counts;
    const std::regex line(R"(\[prompt \d+ tokens \((\d+) reused\))");
    for (std::sregex_iterator it(err.begin(), err.end(), line), end; it != end; ++it)
        counts.push_back(std::stoi((*it)[1]));
    return counts;
}

bool contains(const std::vector<int32_t>& haystack, const std::vector<int32_t>& needle) {
    return std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end()) != haystack.end();
}

class Chat : public testing::Test {
  protected:
    void SetUp() override { MINFER_REQUIRE_FILE(kModel); }
};

TEST_F(Chat, TurnsResetAndFreshSessionAgree) {
    const CliResult r = chat("hello\nwhat is two plus two?\n/reset\nwhat is your name?\n");
    const CliResult first = chat("hello\n"), fresh = chat("what is your name?\n");
    ASSERT_EQ(r.exit_code, 0) << r;
    ASSERT_EQ(first.exit_code, 0) << first;
    ASSERT_EQ(fresh.exit_code, 0) << fresh;
    const std::vector<int> reused = reused_counts(r.err);
    ASSERT_EQ(reused.size(), 3u) << r;
    EXPECT_GT(reused[1], 0) << "the second turn should reuse the cached first turn: " << r;
    EXPECT_EQ(reused[2], 0) << "/reset must clear the cache: " << r;
    // Answers end with a newline: the first and last equal the single-message sessions, the middle one
    // lies in between.
    ASSERT_FALSE(fresh.out.empty());
    ASSERT_EQ(fresh.out.back(), '\n');
    ASSERT_GT(r.out.size(), first.out.size() + fresh.out.size()) << r;
    EXPECT_EQ(r.out.substr(0, first.out.size()), first.out) << r;
    EXPECT_EQ(r.out.substr(r.out.size() - fresh.out.size()), fresh.out) << r;
    EXPECT_EQ(r.out[r.out.size() - fresh.out.size() - 1], '\n') << r;
}

// The second answer, produced on top of the cached first turn, equals run on the whole rendered conversation.
TEST_F(Chat, CachedTurnMatchesAFreshPrefill) {
    const CliResult r = chat("hello\nwhat is two plus two?\n");
    const CliResult first = chat("hello\n");
    ASSERT_EQ(r.exit_code, 0) << r;
    ASSERT_EQ(first.exit_code, 0) << first;
    ASSERT_TRUE(r.out.starts_with(first.out)) << r;
    const json messages =
        json::array({{{"role", "user"}, {"content", "hello"}},
                     {{"role", "assistant"}, {"content", first.out.substr(0, first.out.size() - 1)}},
                     {{"role", "user"}, {"content", "what is two plus two?"}}});
    std::string ids;
    for (int32_t id : template_ids(messages)) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const json run = run_json({"run", "--prompt-ids", ids, "-n", "8", "--temp", "0", "-t", "2", "--json"});
    EXPECT_EQ(r.out.substr(first.out.size()), run["text"].get<std::string>() + "\n") << r;
}

TEST_F(Chat, ExitCommandAndSystemMessage) {
    const CliResult r = chat("hello\n/exit\nwhat is your name?\n");
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(reused_counts(r.err).size(), 1u) << "nothing after /exit is answered: " << r;
    const CliResult plain = chat("hello\n"),
                    sys = chat("hello\n",
                               {"-sys", "Answer every question the way an old pirate captain would."});
    ASSERT_EQ(sys.exit_code, 0) << sys;
    const std::regex prompt_size(R"(\[prompt (\d+) tokens)");
    std::smatch a, b;
    ASSERT_TRUE(std::regex_search(plain.err, a, prompt_size)) << plain;
    ASSERT_TRUE(std::regex_search(sys.err, b, prompt_size)) << sys;
    EXPECT_NE(a[1], b[1]) << "the system message must change the prompt";
}

// -f FILE gives the system message from a file (llama-cli -cnv -f), as -sys gives it on the command line.
TEST_F(Chat, SystemMessageFromAFile) {
    TempDir dir;
    const std::string sys = "Answer every question the way an old pirate captain would.";
    const std::string path = write_file(dir, "system.txt", sys);
    const CliResult from_file = chat("hello\n", {"-f", path}), given = chat("hello\n", {"-sys", sys}),
                    plain = chat("hello\n");
    ASSERT_EQ(from_file.exit_code, 0) << from_file;
    const std::regex prompt_size(R"(\[prompt (\d+) tokens)");
    std::smatch a, b, c;
    ASSERT_TRUE(std::regex_search(from_file.err, a, prompt_size)) << from_file;
    ASSERT_TRUE(std::regex_search(given.err, b, prompt_size)) << given;
    ASSERT_TRUE(std::regex_search(plain.err, c, prompt_size)) << plain;
    EXPECT_EQ(a[1], b[1]);
    EXPECT_NE(a[1], c[1]) << "the file's system message must change the prompt";
    EXPECT_EQ(from_file.out, given.out);
    const CliResult both = chat("hello\n", {"-f", path, "-sys", sys});
    EXPECT_NE(both.exit_code, 0) << both;
    EXPECT_NE(both.err.find("error: give --system TEXT or -f FILE, not both"), std::string::npos) << both;
}

// /quit and /bye quit like /exit; /help and an unknown /command are answered by chat, not sent to the
// model; /reset says so; the banner names the model and /help.
TEST_F(Chat, CommandsNeverReachTheModel) {
    for (const char* quit : {"/quit", "/bye"}) {
        const CliResult r = chat(std::string("hello\n") + quit + "\nwhat is your name?\n");
        ASSERT_EQ(r.exit_code, 0) << r;
        EXPECT_EQ(reused_counts(r.err).size(), 1u) << quit << " must quit: " << r;
    }
    const CliResult r = chat("/help\n/frobnicate\nhello\n/reset\n");
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(reused_counts(r.err).size(), 1u) << "only hello is answered: " << r;
    EXPECT_NE(r.err.find("commands: /reset"), std::string::npos) << r;
    EXPECT_NE(r.err.find("unknown command /frobnicate"), std::string::npos) << r;
    EXPECT_NE(r.err.find("conversation cleared"), std::string::npos) << r;
    EXPECT_NE(r.err.find("qwen2-mini-Q8_0.gguf, context of"), std::string::npos) << r;
    EXPECT_EQ(r.out, chat("hello\n").out) << "the answer to hello is unchanged by the commands";
}

// A conversation that outgrows a 64-token context keeps going: the oldest messages are dropped (and
// chat says so) instead of every later turn being refused.
TEST_F(Chat, FullContextDropsTheOldestTurns) {
    const std::string turns = "hello\nwhat is two plus two?\ntell me a story\nwhat is your name?\nthanks\n";
    const CliResult r = chat(turns, {"-c", "64", "-sys", "You are terse."});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_EQ(reused_counts(r.err).size(), 5u) << "every turn is answered: " << r;
    EXPECT_NE(r.err.find("dropped the oldest"), std::string::npos) << r;
}

TEST_F(Chat, RunChatFeedsTheRenderedTemplate) {
    const json user = {{"role", "user"}, {"content", "hi"}};
    const auto chat_ids =
        run_json({"run", "--chat", "-p", "hi", "-n", "4", "--json", "-t", "2"})["prompt_ids"];
    EXPECT_EQ(chat_ids.get<std::vector<int32_t>>(), template_ids(json::array({user})));
    const auto plain_ids = run_json({"run", "-p", "hi", "-n", "4", "--json", "-t", "2"})["prompt_ids"];
    EXPECT_NE(chat_ids, plain_ids);
    EXPECT_EQ(run_json({"run", "--no-template", "-p", "hi", "-n", "4", "--json", "-t", "2"})["prompt_ids"],
              plain_ids);
}

TEST_F(Chat, RunSystemMessageImpliesChat) {
    const std::string system = "You are a pirate.";
    const auto ids =
        run_json({"run", "-sys", system, "-p", "hi", "-n", "4", "--json", "-t", "2"})["prompt_ids"]
            .get<std::vector<int32_t>>();
    const json messages =
        json::array({{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "hi"}}});
    EXPECT_EQ(ids, template_ids(messages));
    EXPECT_NE(ids, run_json({"run", "--chat", "-p", "hi", "-n", "4", "--json", "-t", "2"})["prompt_ids"]
                       .get<std::vector<int32_t>>());
    const auto system_ids = run_json({"tokenize", "--json", "-p", system})["ids"].get<std::vector<int32_t>>();
    EXPECT_TRUE(contains(ids, system_ids));
}

TEST_F(Chat, RunTemplateFlagsConflict) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "--chat", "--no-template", "-p", "hi"},
          {"run", "-sys", "x", "--no-template", "-p", "hi"},
          {"run", "--chat", "--prompt-ids", "1,2"}}) {
        const CliResult r = run_cli(args);
        EXPECT_TRUE(r.failed_cleanly()) << r;
        EXPECT_TRUE(r.out.empty()) << r;
    }
}

}  // namespace
}  // namespace minfer::test
