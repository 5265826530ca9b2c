// Streaming as OpenAI and llama-server send it: the role first, content deltas that never split a UTF-8
// character, the finish chunk, the usage chunk when asked, [DONE]. 32 concurrent greedy streams give
// token for token what the same prompt gives alone (`minfer run --temp 0 --deterministic`), and a client
// that vanishes mid-stream, or while waiting for a whole answer, has its KV blocks back in the pool within a
// second.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "engine/cli_util.h"
#include "runtime/generate.h"
#include "runtime/session.h"
#include "server_util.h"
#include "tokenizer/tokenizer.h"

namespace minfer::test {
namespace {

using nlohmann::json;

class Streaming : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { server_ = new TestServer(); }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    // The events of one streamed request; fails the test when the stream is not well formed.
    static std::vector<json> stream(const std::string& path, json body) {
        body["stream"] = true;
        auto r = server_->client()->Post(path.c_str(), body.dump(), "application/json");
        EXPECT_TRUE(r) << httplib::to_string(r.error());
        if (!r) return {};
        EXPECT_EQ(r->status, 200) << r->body;
        EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
        bool done = false;
        std::vector<json> events = sse_events(r->body, done);
        EXPECT_TRUE(done) << "no [DONE] at the end:\n" << r->body;
        return events;
    }
    static TestServer* server_;
};
TestServer* Streaming::server_ = nullptr;

bool valid_utf8(const std::string& s) {
    try {
        (void)json(s).dump(-1, ' ', false, json::error_handler_t::strict);
        return true;
    } catch (const json::exception&) {
        return false;
    }
}

TEST_F(Streaming, ChatShapeRoleDeltasFinishUsageDone) {
    const json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                       {"max_tokens", 12},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream_options", {{"include_usage", true}}}};
    const std::vector<json> ev = stream("/v1/chat/completions", body);
    ASSERT_GE(ev.size(), 3u);
    const std::string id = ev[0]["id"];
    EXPECT_EQ(id.rfind("chatcmpl-", 0), 0u);
    EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
    std::string text;
    for (size_t i = 0; i + 2 < ev.size(); ++i) {
        EXPECT_EQ(ev[i]["id"], id);
        EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
        EXPECT_TRUE(ev[i]["choices"][0]["finish_reason"].is_null());
        if (i > 0) {
            EXPECT_FALSE(ev[i]["choices"][0]["delta"].contains("role"));
        }
        text += ev[i]["choices"][0]["delta"].value("content", "");
    }
    const json& last = ev[ev.size() - 2];
    EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(last["choices"][0]["delta"], json::object());
    const json& usage = ev.back();
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
    EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 0);
    // The same request whole: the deltas add up to its text.
    json whole = body;
    whole.erase("stream_options");
    auto r = server_->client()->Post("/v1/chat/completions", whole.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(body_json(r)["choices"][0]["message"]["content"], text);
}

TEST_F(Streaming, CompletionChunksWithoutUsageUnlessAsked) {
    const std::vector<json> ev =
        stream("/v1/completions",
               {{"prompt", "def main():"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
    ASSERT_GE(ev.size(), 2u);
    for (const json& e : ev) {
        EXPECT_EQ(e["object"], "text_completion");
        EXPECT_FALSE(e.contains("usage"));
        EXPECT_TRUE(e["choices"][0]["text"].is_string());
    }
    EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "length");
}

// Multi-byte text (CJK, emoji): every delta is whole characters, and the deltas add up to the text of
// the same request unstreamed (a split character would have been replaced with U+FFFD in the stream).
// Which seed samples a multi-byte character depends on the CPU's kernels (AVX2 and AVX-512 round
// differently), so seeds are tried until one has (at most eight rounds).
TEST_F(Streaming, DeltasNeverSplitUtf8) {
    bool multi_byte = false;
    for (int seed = 7; seed < 15 && !multi_byte; ++seed)
        for (const char* prompt : {"你好，世界。今天", "😀😃😄 emoji", "Ünïcödé façade"}) {
            const json body = {{"prompt", prompt}, {"max_tokens", 48},  {"temperature", 1.5},
                               {"top_k", 0},       {"top_p", 1},        {"min_p", 0},
                               {"seed", seed},     {"ignore_eos", true}};
            std::string all;
            for (const json& e : stream("/v1/completions", body)) {
                const std::string t = e["choices"][0]["text"];
                EXPECT_TRUE(valid_utf8(t)) << prompt;
                all += t;
            }
            auto whole = server_->client()->Post("/v1/completions", body.dump(), "application/json");
            ASSERT_TRUE(whole);
            const std::string text = body_json(whole)["choices"][0]["text"];
            EXPECT_EQ(all, text) << prompt;
            multi_byte |= std::any_of(text.begin(), text.end(), [](char c) { return (c & 0x80) != 0; });
        }
    EXPECT_TRUE(multi_byte) << "no prompt generated a multi-byte character";
}

TEST_F(Streaming, NChoicesStreamWithTheirIndex) {
    const std::vector<json> ev =
        stream("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                        {"max_tokens", 5},
                                        {"n", 2},
                                        {"seed", 3},
                                        {"ignore_eos", true},
                                        {"stream_options", {{"include_usage", true}}}});
    int finished[2] = {0, 0}, roles[2] = {0, 0};
    for (const json& e : ev) {
        if (e["choices"].empty()) continue;
        const int i = e["choices"][0]["index"];
        ASSERT_TRUE(i == 0 || i == 1);
        roles[i] += e["choices"][0]["delta"].contains("role");
        finished[i] += !e["choices"][0]["finish_reason"].is_null();
    }
    EXPECT_EQ(roles[0], 1);
    EXPECT_EQ(roles[1], 1);
    EXPECT_EQ(finished[0], 1);
    EXPECT_EQ(finished[1], 1);
    EXPECT_EQ(ev.back()["usage"]["completion_tokens"], 10);
}

// What `minfer run --temp 0 --deterministic -p PROMPT -n N --ignore-eos` prints.
std::string alone(const Model& m, const Tokenizer& tok, const std::string& prompt, int n) {
    SessionParams sp;
    sp.n_ctx = 512;
    sp.n_threads = 2;
    sp.batch_invariant = true;
    Session s(m, sp);
    GenerateParams g;
    g.n_predict = n;
    g.ignore_eos = true;
    g.sampling.temp = 0;
    return generate(s, tok, tok.encode(prompt, true, true), g).text;
}

TEST_F(Streaming, ThirtyTwoConcurrentGreedyStreamsEqualEachAlone) {
    constexpr int kStreams = 32, kTokens = 24;
    const char* seeds[] = {"The list type",
                           "def main():",
                           "Once upon a time",
                           "import numpy as np",
                           "The capital of France is",
                           "SELECT * FROM",
                           "In 1905 Einstein",
                           "Hello"};
    std::vector<std::string> prompts, got(kStreams);
    for (int i = 0; i < kStreams; ++i)
        prompts.push_back(std::string(seeds[i % 8]) + std::string(size_t(i / 8), '!'));
    std::vector<int> counts(kStreams, -1);
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; ++i)
        threads.emplace_back([&, i] {
            const std::vector<json> ev =
                stream("/v1/completions", {{"prompt", prompts[size_t(i)]},
                                           {"max_tokens", kTokens},
                                           {"temperature", 0},
                                           {"ignore_eos", true},
                                           {"stream_options", {{"include_usage", true}}}});
            for (const json& e : ev)
                if (!e["choices"].empty()) got[size_t(i)] += e["choices"][0]["text"].get<std::string>();
            if (!ev.empty()) counts[size_t(i)] = ev.back()["usage"]["completion_tokens"];
        });
    for (std::thread& t : threads) t.join();
    const auto model = Model::load(default_model());
    const auto tok = Tokenizer::from_gguf(*model->file);
    for (int i = 0; i < kStreams; ++i) {
        EXPECT_EQ(counts[size_t(i)], kTokens) << prompts[size_t(i)];
        EXPECT_EQ(got[size_t(i)], alone(*model, *tok, prompts[size_t(i)], kTokens)) << prompts[size_t(i)];
    }
    // alone() is what the command prints.
    const CliResult run = run_cli({"run", "-p", prompts[0], "-n", std::to_string(kTokens), "--temp", "0",
                                   "--ignore-eos", "--deterministic", "-t", "2", "--json"});
    ASSERT_EQ(run.exit_code, 0) << run;
    EXPECT_EQ(json::parse(run.out)["text"], got[0]);
}

double kv_blocks_used(const TestServer& s) {
    auto r = s.client()->Get("/metrics");
    return r ? metric(r->body, "minfer_kv_blocks_used") : -1;
}

// Polls /metrics until the KV cache holds no block or a second has passed; the blocks then in use.
double blocks_after_one_second(const TestServer& s) {
    const auto t0 = std::chrono::steady_clock::now();
    double used = -1;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
        used = kv_blocks_used(s);
        if (used == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return used;
}

void expect_nothing_processing(const TestServer& s) {
    auto m = s.client()->Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_EQ(metric(m->body, "minfer_requests_processing"), 0);
}

const json kLongCompletion = {{"prompt", std::string(300, 'a')}, {"max_tokens", 4000}, {"ignore_eos", true}};

TEST_F(Streaming, DisconnectMidStreamFreesBlocksWithinOneSecond) {
    RawClient c(server_->port);
    json body = kLongCompletion;
    body["stream"] = true;
    ASSERT_TRUE(c.post("/v1/completions", body.dump()));
    const std::string got = c.read_until("data: ", 4);
    ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
    EXPECT_GT(kv_blocks_used(*server_), 0);
    c.close();
    EXPECT_EQ(blocks_after_one_second(*server_), 0)
        << "the vanished client's blocks are still held after 1 s";
    expect_nothing_processing(*server_);
}

// A client waiting for a whole answer sends and reads nothing until it comes: its hang-up is found by
// polling the connection between steps.
TEST_F(Streaming, DisconnectBeforeAWholeAnswerFreesBlocksWithinOneSecond) {
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
        RawClient c(server_->port);
        json body = kLongCompletion;
        if (std::string(path) == "/v1/chat/completions") {
            body.erase("prompt");
            body["messages"] = {{{"role", "user"}, {"content", std::string(300, 'a')}}};
        }
        ASSERT_TRUE(c.post(path, body.dump()));
        const auto t0 = std::chrono::steady_clock::now();
        while (kv_blocks_used(*server_) <= 0 &&
               std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ASSERT_GT(kv_blocks_used(*server_), 0) << path << ": the request never started";
        c.close();
        EXPECT_EQ(blocks_after_one_second(*server_), 0)
            << path << ": blocks still held 1 s after the hang-up";
        expect_nothing_processing(*server_);
    }
}

}  // namespace
}  // namespace minfer::test
