// Bounded load on loopback: 1,000 requests at concurrency 32 (chat and completions, streamed and not)
// with no error, resident memory after the run within 10% + 16 MiB of what it was after the first 100
// (no per-request leak), then a table of bad requests, each with its status, and /health still 200.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "server_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;

// Request i of the run: alternately completions and chat, every third one streamed.
std::pair<std::string, json> load_request(int i) {
    json body = {{"max_tokens", 8}, {"temperature", 0.7}, {"seed", i}, {"ignore_eos", true}};
    const std::string text = "Request " + std::to_string(i) + ": the list type";
    if (i % 3 == 0) body["stream"] = true;
    if (i % 2 == 0) {
        body["prompt"] = text;
        return {"/v1/completions", body};
    }
    body["messages"] = {{{"role", "user"}, {"content", text}}};
    return {"/v1/chat/completions", body};
}

// An error description, or empty when the response is what request i should get.
std::string check(const httplib::Result& r, const json& body) {
    if (!r) return "no response: " + httplib::to_string(r.error());
    if (r->status != 200) return "status " + std::to_string(r->status) + ": " + r->body;
    if (body.value("stream", false)) {
        bool done = false;
        const std::vector<json> ev = sse_events(r->body, done);
        return done && !ev.empty() ? "" : "a stream without [DONE]";
    }
    const json j = json::parse(r->body, nullptr, false);
    return j.is_object() && j["usage"]["completion_tokens"] == 8 ? "" : "bad body: " + r->body;
}

// The bad-request table after the load: each class its status and error envelope.
void bad_request_table(const TestServer& server) {
    auto cli = server.client();
    auto none = server.client(false);
    const char* js = "application/json";
    const std::pair<httplib::Result, int> table[] = {
        {cli->Post("/v1/completions", "{\"prompt\": \"x\"", js), 400},                     // malformed JSON
        {cli->Post("/v1/completions", R"({"prompt": "x", "max_tokens": "8"})", js), 400},  // wrong type
        {cli->Post("/v1/completions", R"({"prompt": "x", "max_tokens": 100000000})", js),
         400},                                                                  // huge max_tokens
        {cli->Post("/v1/completions", std::string(10 << 20, ' '), js), 413},    // 10 MB body
        {cli->Post("/v1/completions", "{\"prompt\": \"\xc3\x28\"}", js), 400},  // invalid UTF-8
        {cli->Get("/v2/unknown"), 404},                                         // unknown route
        {none->Post("/v1/completions", R"({"prompt": "x"})", js), 401},         // no key
    };
    for (size_t i = 0; i < std::size(table); ++i) {
        ASSERT_TRUE(table[i].first) << "row " << i;
        EXPECT_EQ(table[i].first->status, table[i].second) << "row " << i << ": " << table[i].first->body;
        EXPECT_TRUE(body_json(table[i].first).contains("error")) << "row " << i;
    }
}

TEST(Load, ThousandRequestsAtConcurrency32ThenBadRequests) {
    TestServer server;
    constexpr int kRequests = 1000, kClients = 32;
    std::atomic<int> next{0}, done{0};
    std::atomic<size_t> rss_after_100{0};
    std::mutex mu;
    std::vector<std::string> errors;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c)
        clients.emplace_back([&] {
            auto cli = server.client();
            for (int i = next++; i < kRequests; i = next++) {
                const auto [path, body] = load_request(i);
                const std::string err = check(cli->Post(path.c_str(), body.dump(), "application/json"), body);
                if (!err.empty()) {
                    std::lock_guard lock(mu);
                    errors.push_back(path + " #" + std::to_string(i) + ": " + err);
                }
                if (++done == 100) rss_after_100 = rss_bytes();
            }
        });
    for (std::thread& t : clients) t.join();
    const size_t rss_end = rss_bytes();
    ASSERT_TRUE(errors.empty()) << errors.size() << " errors, first: " << errors.front();
    EXPECT_EQ(done, kRequests);
    std::printf("RSS after 100 requests %zu MiB, after %d: %zu MiB\n", rss_after_100 >> 20, kRequests,
                rss_end >> 20);
    EXPECT_LE(rss_end, rss_after_100 + rss_after_100 / 10 + (size_t(16) << 20))
        << "RSS grew from " << (rss_after_100 >> 20) << " MiB after 100 requests to " << (rss_end >> 20)
        << " MiB";

    bad_request_table(server);
    auto cli = server.client();
    auto h = cli->Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    auto m = cli->Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_EQ(metric(m->body, "minfer_requests_total"), kRequests + 0.0);
    EXPECT_EQ(metric(m->body, "minfer_kv_blocks_used"), 0);
}

}  // namespace
}  // namespace minfer::test
