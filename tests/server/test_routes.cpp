// Every route of `minfer serve` and every class of bad request: each gets its status and OpenAI's error
// envelope, and the server still answers afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "runtime/sampler.h"
#include "runtime/session.h"

#include "server_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;

class Routes : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { server_ = new TestServer(); }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static httplib::Result post(const std::string& path, const json& body) {
        return server_->client()->Post(path.c_str(), body.dump(), "application/json");
    }
    static TestServer* server_;
};
TestServer* Routes::server_ = nullptr;

void expect_error(const httplib::Result& r, int status, const std::string& type,
                  const std::string& in_message) {
    ASSERT_TRUE(r) << "no response: " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, status) << r->body;
    const json j = body_json(r);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["type"], type) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"].contains("code"));
    EXPECT_NE(j["error"]["message"].get<std::string>().find(in_message), std::string::npos) << r->body;
}

TEST_F(Routes, HealthAndModelsArePublic) {
    auto c = server_->client(false);
    auto h = c->Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
    EXPECT_EQ(body_json(h), json({{"status", "ok"}}));
    auto m = c->Get("/v1/models");
    ASSERT_TRUE(m);
    ASSERT_EQ(m->status, 200);
    const json j = body_json(m);
    EXPECT_EQ(j["object"], "list");
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["id"], "mini");
    EXPECT_EQ(j["data"][0]["object"], "model");
}

TEST_F(Routes, KeyIsRequiredElsewhere) {
    auto none = server_->client(false);
    expect_error(none->Post("/v1/completions", R"({"prompt":"Hi"})", "application/json"), 401,
                 "authentication_error", "API key");
    expect_error(none->Get("/metrics"), 401, "authentication_error", "API key");
    auto wrong = server_->client(false);
    wrong->set_bearer_token_auth("test-key-0123456780");
    expect_error(wrong->Post("/tokenize", R"({"content":"Hi"})", "application/json"), 401,
                 "authentication_error", "API key");
    httplib::Headers h{{"X-Api-Key", kKey}};
    auto ok = none->Post("/tokenize", h, R"({"content":"Hi"})", "application/json");
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200);
}

TEST_F(Routes, CompletionObject) {
    auto r = post("/v1/completions",
                  {{"prompt", "The list type"}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = body_json(r);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["model"], "mini");
    EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    EXPECT_TRUE(j["created"].is_number_integer());
    ASSERT_EQ(j["choices"].size(), 1u);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_FALSE(j["choices"][0]["text"].get<std::string>().empty());
    EXPECT_EQ(j["usage"]["completion_tokens"], 5);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
    EXPECT_EQ(j["usage"]["total_tokens"], 8);
    EXPECT_TRUE(j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
}

TEST_F(Routes, ChatObjectAndPrefixCacheHits) {
    const json body = {{"messages",
                        {{{"role", "system"}, {"content", std::string(200, 'x')}},
                         {{"role", "user"}, {"content", "Hello"}}}},
                       {"max_completion_tokens", 4},
                       {"temperature", 0}};
    auto first = post("/v1/chat/completions", body);
    ASSERT_TRUE(first);
    ASSERT_EQ(first->status, 200) << first->body;
    const json a = body_json(first);
    EXPECT_EQ(a["object"], "chat.completion");
    EXPECT_EQ(a["choices"][0]["message"]["role"], "assistant");
    EXPECT_TRUE(a["choices"][0]["message"]["content"].is_string());
    EXPECT_LE(a["usage"]["completion_tokens"].get<int>(), 4);
    const json b = body_json(post("/v1/chat/completions", body));
    // The same prompt again: its full 32-token blocks come from the prefix cache.
    const int prompt = b["usage"]["prompt_tokens"];
    EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt - 1) / 32 * 32) << b.dump();
    EXPECT_EQ(a["choices"][0]["message"]["content"], b["choices"][0]["message"]["content"]);
}

TEST_F(Routes, StopStringsCutTheText) {
    const json base = {
        {"prompt", "The list type"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
    const std::string full = body_json(post("/v1/completions", base))["choices"][0]["text"];
    ASSERT_GT(full.size(), 8u);
    const std::string stop = full.substr(4, 3);
    json with = base;
    with["stop"] = {"\x01never", stop};
    const json j = body_json(post("/v1/completions", with));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(j["choices"][0]["text"], full.substr(0, full.find(stop)));
}

TEST_F(Routes, SeededSamplingIsReproducibleAndNChoicesDiffer) {
    const json body = {{"prompt", "Once upon a time"},
                       {"max_tokens", 16},
                       {"temperature", 1.0},
                       {"top_k", 0},
                       {"top_p", 1.0},
                       {"min_p", 0},
                       {"seed", 42},
                       {"n", 2},
                       {"ignore_eos", true}};
    const json a = body_json(post("/v1/completions", body)), b = body_json(post("/v1/completions", body));
    ASSERT_EQ(a["choices"].size(), 2u) << a.dump();
    EXPECT_EQ(a["choices"], b["choices"]);
    EXPECT_NE(a["choices"][0]["text"], a["choices"][1]["text"]);
    EXPECT_EQ(a["choices"][1]["index"], 1);
    EXPECT_EQ(a["usage"]["completion_tokens"], 32);
}

// logprobs are the model's: the greedy token's is the top alternative's, and the first one equals the
// log-softmax of a Session's logits for the same prompt ids.
TEST_F(Routes, LogprobsAreTheModels) {
    const json ids = body_json(post("/tokenize", {{"content", "The list type"}}))["tokens"];
    const json j = body_json(post(
        "/v1/completions",
        {{"prompt", ids}, {"max_tokens", 4}, {"logprobs", 3}, {"temperature", 0}, {"ignore_eos", true}}));
    const json& lp = j["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), 4u) << j.dump();
    std::string text;
    for (size_t i = 0; i < 4; ++i) {
        const json& top = lp["top_logprobs"][i];
        ASSERT_EQ(top.size(), 3u);
        EXPECT_EQ(lp["text_offset"][i], text.size());
        text += lp["tokens"][i].get<std::string>();
        EXPECT_FLOAT_EQ(top[lp["tokens"][i].get<std::string>()].get<float>(),
                        lp["token_logprobs"][i].get<float>());
        for (const auto& [tok, v] : top.items())
            EXPECT_LE(v.get<float>(), lp["token_logprobs"][i].get<float>());
    }
    EXPECT_EQ(text, j["choices"][0]["text"]);
    const auto model = Model::load(default_model());
    SessionParams sp;
    sp.n_ctx = 64;
    sp.n_threads = 2;
    sp.batch_invariant = true;
    Session s(*model, sp);
    const std::span<const float> logits = s.forward(ids.get<std::vector<int32_t>>());
    const int32_t best = argmax(logits);
    double sum = 0;
    for (const float l : logits) sum += std::exp(double(l - logits[size_t(best)]));
    EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), -std::log(sum), 1e-4);
}

TEST_F(Routes, ChatLogprobsStreamOnePerToken) {
    auto r = server_->client()->Post("/v1/chat/completions",
                                     json({{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                           {"max_tokens", 6},
                                           {"logprobs", true},
                                           {"top_logprobs", 2},
                                           {"ignore_eos", true},
                                           {"stream", true},
                                           {"seed", 5}})
                                         .dump(),
                                     "application/json");
    ASSERT_TRUE(r);
    bool done = false;
    size_t entries = 0;
    for (const json& e : sse_events(r->body, done)) {
        const json& lp = e["choices"][0]["logprobs"];
        ASSERT_TRUE(lp.is_object()) << e.dump();
        for (const json& c : lp["content"]) {
            EXPECT_EQ(c["top_logprobs"].size(), 2u);
            EXPECT_EQ(c["bytes"].size(), c["token"].get<std::string>().size());
            ++entries;
        }
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(entries, 6u);
}

// n = 2: the second choice starts once the first has its first token, so it attaches the prompt's full
// blocks from the prefix cache instead of computing them again.
TEST_F(Routes, NChoicesSharePromptBlocks) {
    auto hits = [] {
        return metric(server_->client()->Get("/metrics")->body, "minfer_prefix_cache_hit_tokens_total");
    };
    const double before = hits();
    const json j =
        body_json(post("/v1/completions", {{"prompt", "Unique prefix 91237 " + std::string(400, 'z')},
                                           {"max_tokens", 2},
                                           {"n", 2},
                                           {"ignore_eos", true}}));
    const int prompt = j["usage"]["prompt_tokens"];
    ASSERT_GT(prompt, 64) << j.dump();
    EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    EXPECT_EQ(hits() - before, (prompt - 1) / 32 * 32);
}

TEST_F(Routes, TokenizeDetokenizeApplyTemplate) {
    const json t = body_json(post("/tokenize", {{"content", "Hello world"}}));
    ASSERT_TRUE(t["tokens"].is_array());
    ASSERT_FALSE(t["tokens"].empty());
    const json d = body_json(post("/detokenize", {{"tokens", t["tokens"]}}));
    EXPECT_EQ(d["content"], "Hello world");
    const json p = body_json(post("/tokenize", {{"content", "Hi"}, {"with_pieces", true}}));
    EXPECT_TRUE(p["tokens"][0].contains("piece"));
    const json a =
        body_json(post("/apply-template", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}));
    const std::string prompt = a["prompt"];
    EXPECT_NE(prompt.find("Hi"), std::string::npos);
    EXPECT_NE(prompt.find("<|im_start|>assistant"), std::string::npos) << prompt;
}

TEST_F(Routes, MetricsArePrometheusText) {
    auto r = server_->client()->Get("/metrics");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/plain"), std::string::npos);
    for (const char* name :
         {"minfer_requests_processing", "minfer_requests_deferred", "minfer_prompt_tokens_total",
          "minfer_prompt_seconds_total", "minfer_tokens_predicted_total",
          "minfer_tokens_predicted_seconds_total", "minfer_kv_blocks_used", "minfer_kv_blocks_total",
          "minfer_kv_window_blocks_used", "minfer_kv_window_blocks_total",
          "minfer_prefix_cache_hit_tokens_total"})
        EXPECT_GE(metric(r->body, name), 0) << name << "\n" << r->body;
    EXPECT_EQ(metric(r->body, "minfer_kv_blocks_total"), 4096 / 32);
    EXPECT_EQ(metric(r->body, "minfer_kv_window_blocks_total"), 0) << "the embedded model has no window";
}

// A POST body and the 400 message it must get, by class: syntax, types, ranges, semantics.
struct BadBody {
    const char* path;
    std::string body;
    const char* message;
};

std::vector<BadBody> bad_bodies() {
    const json user = {{{"role", "user"}, {"content", "x"}}};
    std::string words;
    for (int i = 0; i < 5000; ++i) words += "hello ";
    const char* c = "/v1/completions";
    return {
        {c, "{\"prompt\": ", "not valid JSON"},
        {c, "[1, 2]", "JSON object"},
        {c, "{\"prompt\": \"\xff\xfe\"}", "UTF-8"},
        {c, json({{"prompt", 7}}).dump(), "'prompt'"},
        {c, json({{"prompt", "x"}, {"temperature", "hot"}}).dump(), "'temperature' must be a number"},
        {c, json({{"prompt", "x"}, {"max_tokens", 1.5}}).dump(), "'max_tokens' must be an integer"},
        {c, json({{"prompt", "x"}, {"top_p", 3}}).dump(), "'top_p' must be between"},
        {c, json({{"prompt", "x"}, {"n", 0}}).dump(), "'n'"},
        {c, json({{"prompt", "x"}, {"max_tokens", 1e15}}).dump(), "the context holds 4096"},
        {c, json({{"prompt", "x"}, {"stop", {1}}}).dump(), "stop"},
        {c, json({{"prompt", "x"}, {"logprobs", 21}}).dump(), "'logprobs' must be between 0 and 20"},
        {c, json({{"prompt", words}}).dump(), "the context holds 4096"},
        {"/v1/chat/completions", json({{"messages", user}, {"top_logprobs", 2}}).dump(), "needs 'logprobs'"},
        {"/v1/chat/completions", json({{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}).dump(),
         "'messages[0].role' is 'wizard'"},
        {"/v1/chat/completions", json({{"messages", json::array()}}).dump(), "at least one"},
        {"/v1/chat/completions", json({{"prompt", "x"}}).dump(), "'messages'"},
        {"/detokenize", json({{"tokens", {-1}}}).dump(), "token ids"},
        {c, json({{"prompt", {1, 2, 999999}}}).dump(), "token id 999999 is out of range"},
    };
}

// Each bad request class: its status and message; the server answers /health after all of them.
TEST_F(Routes, BadRequestsGetTheirStatus) {
    auto c = server_->client();
    for (const BadBody& b : bad_bodies()) {
        SCOPED_TRACE(b.body.substr(0, 80));
        expect_error(c->Post(b.path, b.body, "application/json"), 400, "invalid_request_error", b.message);
    }
    expect_error(c->Post("/v1/completions", std::string(10 << 20, 'a'), "application/json"), 413,
                 "invalid_request_error", "over the limit");
    expect_error(c->Get("/v1/nothing"), 404, "not_found_error", "/v1/nothing");
    expect_error(c->Post("/v1/models", "{}", "application/json"), 404, "not_found_error", "POST /v1/models");
    auto h = c->Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, 200);
}

// Bytes that are not JSON at all, at every route that takes a body: 400, never 500 or a hang.
TEST_F(Routes, GarbageBodiesNeverGive500) {
    auto c = server_->client();
    const std::string bodies[] = {"",
                                  "null",
                                  "\"str\"",
                                  "{\"messages\": {}}",
                                  "{\"prompt\": [\"a\", \"b\"]}",
                                  std::string("\0\x01\x02", 3),
                                  "{\"content\": 1}",
                                  "{\"tokens\": \"x\"}"};
    for (const char* path :
         {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize", "/apply-template"})
        for (const std::string& b : bodies) {
            auto r = c->Post(path, b, "application/json");
            ASSERT_TRUE(r) << path;
            EXPECT_EQ(r->status, 400) << path << " " << b << " -> " << r->body;
        }
}

// Every field of a valid request set, one or two at a time, to values of every type and range (seeded):
// each answer is 200 or 400, never 500, and the server stays healthy.
TEST_F(Routes, RandomFieldValuesGive200Or400) {
    const char* fields[] = {
        "prompt",           "messages",          "max_tokens",     "temperature",  "top_p", "top_k", "min_p",
        "presence_penalty", "frequency_penalty", "repeat_penalty", "seed",         "stop",  "n",     "stream",
        "stream_options",   "ignore_eos",        "logprobs",       "top_logprobs", "model"};
    const json values[] = {nullptr,
                           true,
                           -1,
                           0,
                           3,
                           1.5,
                           -1e300,
                           1e12,
                           "",
                           "4",
                           "\u00e9",
                           json::array(),
                           json::array({1, "a"}),
                           json::object(),
                           json({{"include_usage", "yes"}}),
                           json::array({{{"role", "user"}}}),
                           json::array({{{"role", "user"}, {"content", 5}}})};
    std::mt19937 rng(1234);
    auto c = server_->client();
    for (int i = 0; i < 300; ++i) {
        const bool chat = i % 2 == 1;
        json body = {{"max_tokens", 3}, {"ignore_eos", true}};
        if (chat)
            body["messages"] = {{{"role", "user"}, {"content", "Hi"}}};
        else
            body["prompt"] = "Hi";
        for (int k = 0; k < 1 + int(rng() % 2); ++k)
            body[fields[rng() % std::size(fields)]] = values[rng() % std::size(values)];
        const json& max =
            body["max_tokens"];  // short generations: absent or large would run to the context end
        if (max.is_null() || (max.is_number() && max.get<double>() > 8)) body["max_tokens"] = 3;
        auto r = c->Post(chat ? "/v1/chat/completions" : "/v1/completions", body.dump(), "application/json");
        ASSERT_TRUE(r) << body.dump();
        EXPECT_TRUE(r->status == 200 || r->status == 400)
            << r->status << " for " << body.dump() << ": " << r->body;
    }
    EXPECT_EQ(c->Get("/health")->status, 200);
}

TEST(ServerLifecycle, HealthIs503WhileLoadingAndQueueFullIs503) {
    server::ServerOptions o;
    o.port = 0;
    o.log = false;
    o.max_queue = 0;
    server::Server srv(o);
    const int port = srv.bind();
    srv.start();
    httplib::Client c("127.0.0.1", port);
    auto loading = c.Get("/health");
    ASSERT_TRUE(loading);
    EXPECT_EQ(loading->status, 503);
    EXPECT_EQ(c.Post("/v1/completions", R"({"prompt":"x"})", "application/json")->status, 503);
    srv.serve_model(Model::load(default_model()), test_engine_params(1), "mini");
    EXPECT_EQ(c.Get("/health")->status, 200);
    // One slot, no queue: a long generation holds it, the next request is refused with Retry-After.
    RawClient hog(port);
    std::string body = R"({"prompt":"x","max_tokens":4000,"ignore_eos":true,"stream":true})";
    ASSERT_TRUE(hog.post("/v1/completions", body));
    hog.read_until("data: ", 2);
    auto busy = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json");
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 503) << busy->body;
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    EXPECT_NE(busy->body.find("busy"), std::string::npos);
    auto too_many = c.Post("/v1/completions", R"({"prompt":"x","n":2})", "application/json");
    ASSERT_TRUE(too_many);
    EXPECT_EQ(too_many->status, 400);
    EXPECT_NE(too_many->body.find("holds at most 1 sequences"), std::string::npos) << too_many->body;
    hog.close();
    srv.shutdown();
    srv.wait();
}

}  // namespace
}  // namespace minfer::test
