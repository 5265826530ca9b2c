// The routes of `minfer viz` on an in-process server with the embedded model: the page, the graph
// documents and SVGs, generations over SSE (one at a time: 409 while busy), histograms, bad input, a
// viewer that vanishes mid-generation and two viewers at once.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "viz_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class VizRoutes : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { server_ = new VizTestServer(); }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static httplib::Result get(const std::string& path) { return server_->client()->Get(path); }
    static httplib::Result post(const std::string& path, const std::string& body) {
        return server_->client()->Post(path, body, "application/json");
    }
    static json body_of(const httplib::Result& r) { return json::parse(r->body); }
    // Starts a generation, retrying while another runs; returns its id.
    static uint64_t start(const json& ask) {
        for (int i = 0; i < 600; ++i) {
            const auto r = post("/api/generate", ask.dump());
            if (r && r->status == 202) return body_of(r)["id"].get<uint64_t>();
            if (!r || r->status != 409) break;
            std::this_thread::sleep_for(50ms);
        }
        ADD_FAILURE() << "could not start a generation";
        return 0;
    }
    static std::vector<SseEvent> of(const std::vector<SseEvent>& all, const std::string& event) {
        std::vector<SseEvent> out;
        for (const SseEvent& e : all)
            if (e.event == event) out.push_back(e);
        return out;
    }
    static VizTestServer* server_;
};
VizTestServer* VizRoutes::server_ = nullptr;

TEST_F(VizRoutes, PageInfoGraphsAndSvgs) {
    const auto page = get("/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
    EXPECT_NE(page->body.find("minfer viz"), std::string::npos);

    const json info = body_of(get("/api/info"));
    EXPECT_EQ(info["device"], "cpu");
    EXPECT_EQ(info["n_layer"], server_->mini.model->hp.n_layer);
    EXPECT_FALSE(info["node_by_node"].get<bool>());

    for (const char* kind : {"prefill", "decode"}) {
        const json doc = body_of(get(std::string("/api/graph?graph=") + kind));
        EXPECT_EQ(doc["graph"], kind);
        const auto svg = get(std::string("/api/svg?graph=") + kind);
        ASSERT_TRUE(svg);
        EXPECT_EQ(svg->status, 200);
        EXPECT_EQ(svg->get_header_value("Content-Type"), "image/svg+xml; charset=utf-8");
        EXPECT_EQ(count_of(svg->body, "class=\"node"), doc["n_nodes"].get<size_t>()) << kind;
    }
    // Sent as is to a browser that accepts Brotli (httplib's would take seconds for a large graph).
    for (const char* path : {"/api/svg?graph=decode", "/api/graph?graph=decode"}) {
        RawViewer v(server_->port);
        ASSERT_TRUE(v.get(path, "Accept-Encoding: gzip, deflate, br\r\nConnection: close\r\n"));
        const std::string raw = v.read_until("\r\n\r\n");
        EXPECT_EQ(raw.find("Content-Encoding"), std::string::npos) << path << "\n" << raw.substr(0, 300);
    }
    const json decode = body_of(get("/api/graph?graph=decode"));
    const auto collapsed = get("/api/svg?graph=decode&collapse=0");
    ASSERT_TRUE(collapsed);
    EXPECT_EQ(count_of(collapsed->body, "class=\"node"),
              decode["n_nodes"].get<size_t>() - decode["layers"][0]["nodes"].size() + 1);
}

TEST_F(VizRoutes, BadRequestsAreClearErrors) {
    const std::vector<std::tuple<std::string, std::string, int, std::string>> cases = {
        {"GET", "/api/graph?graph=middle", 400, "unknown graph 'middle'"},
        {"GET", "/api/svg?graph=decode&collapse=9999", 400, "collapse: a layer must be an integer"},
        {"GET", "/api/svg?graph=decode&collapse=x", 400, "collapse"},
        {"GET", "/api/hist?graph=decode&node=-1", 400, "node must be an integer"},
        {"GET", "/api/nothing", 404, "no route for GET /api/nothing"},
        {"POST", "{not json", 400, "parse error"},
        {"POST", "[1]", 400, "a JSON object"},
        {"POST", "{}", 400, "'prompt' must be a non-empty string"},
        {"POST", R"({"prompt": 3})", 400, "'prompt' must be a string"},
        {"POST", R"({"prompt": "hi", "n_predict": 0})", 400, "'n_predict' must be in [1, 512]"},
        {"POST", R"({"prompt": "hi", "n_predict": 1.5})", 400, "'n_predict' must be an integer"},
        {"POST", R"({"prompt": "hi", "temperature": -1})", 400, "'temperature' must be in [0, 10]"},
        {"POST", R"({"prompt": "hi", "seed": -3})", 400, "'seed' must be a non-negative integer"},
    };
    for (const auto& [method, what, status, message] : cases) {
        const auto r = method == "GET" ? get(what) : post("/api/generate", what);
        ASSERT_TRUE(r) << what;
        EXPECT_EQ(r->status, status) << what << ": " << r->body;
        const json e = body_of(r);
        EXPECT_NE(e["error"]["message"].get<std::string>().find(message), std::string::npos) << r->body;
    }
    std::string long_prompt;
    for (int i = 0; i < 600; ++i) long_prompt += "word ";
    const auto r = post("/api/generate", json{{"prompt", long_prompt}}.dump());
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("the context holds 512"), std::string::npos) << r->body;
}

// A generation streams start, one step per forward (the prefill, then one per further token), its
// tokens and done; while it runs a second request is refused with 409; histograms come after.
TEST_F(VizRoutes, GenerationStreamsStepsAndTokens) {
    const uint64_t id = start({{"prompt", "The list type"}, {"n_predict", 24}});
    const auto busy = post("/api/generate", R"({"prompt": "again"})");
    ASSERT_TRUE(busy);
    if (busy->status == 409) {
        EXPECT_NE(busy->body.find("a generation is running"), std::string::npos);
    } else {
        EXPECT_EQ(busy->status, 202) << "the first one had already finished";
    }
    const uint64_t wait_for = busy->status == 202 ? body_of(busy)["id"].get<uint64_t>() : id;

    const std::vector<SseEvent> events = read_events_until_done(server_->port, wait_for);
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.front().event, "hello");
    ASSERT_GE(events.size(), 2u);
    EXPECT_EQ(events[1].event, "start");
    EXPECT_EQ(events[1].data["id"], wait_for);
    const auto done = of(events, "done");
    ASSERT_FALSE(done.empty());
    const json& d = done.back().data;
    EXPECT_FALSE(d.contains("error")) << d;
    const auto steps = of(events, "step"), tokens = of(events, "token");
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps.front().data["graph"], "prefill");
    const auto n_generated = d["n_generated"].get<size_t>();
    EXPECT_GE(n_generated, 1u);
    // The prefill, then one decode step per later token, and one more when the end of generation (not
    // n_predict) stopped it.
    const size_t n_predict = wait_for == id ? 24 : 16;
    EXPECT_EQ(steps.size(), n_generated + (n_generated < n_predict ? 1 : 0));
    std::string text;
    for (const SseEvent& t : tokens) text += t.data["text"].get<std::string>();
    EXPECT_EQ(text, d["text"].get<std::string>());

    const json decode = body_of(get("/api/graph?graph=decode"));
    const json& last = steps.back().data;
    EXPECT_EQ(last["graph"], "decode");
    for (const json& row : last["nodes"])
        EXPECT_FALSE(decode["nodes"][row[0].get<size_t>()]["orphan"].get<bool>());
    const NodeId out = decode["outputs"][0].get<NodeId>();
    const auto h = get("/api/hist?graph=decode&node=" + std::to_string(out));
    ASSERT_TRUE(h);
    ASSERT_EQ(h->status, 200) << h->body;
    const json hist = body_of(h);
    EXPECT_EQ(hist["node"], out);
    int64_t counted = hist["nan"].get<int64_t>() + hist["inf"].get<int64_t>();
    for (const json& b : hist["bins"]) counted += b.get<int64_t>();
    EXPECT_EQ(counted, server_->mini.model->hp.n_vocab) << "the logits of one token";
    const NodeId input = decode["inputs"][0].get<NodeId>();
    EXPECT_EQ(get("/api/hist?graph=decode&node=" + std::to_string(input))->status, 404)
        << "inputs are not run";
}

// A viewer that drops its connection mid-generation ends only its own stream: the generation finishes,
// the server keeps serving, another viewer sees it all.
TEST_F(VizRoutes, ViewerDroppingMidGenerationHarmsNothing) {
    const uint64_t id = start({{"prompt", "Once upon a time"}, {"n_predict", 48}});
    {
        RawViewer v(server_->port);
        ASSERT_TRUE(v.get("/api/events"));
        EXPECT_NE(v.read_until("event: step").find("event: step"), std::string::npos);
    }  // closed mid-generation
    EXPECT_EQ(get("/api/info")->status, 200);
    const auto done = of(read_events_until_done(server_->port, id), "done");
    ASSERT_FALSE(done.empty());
    EXPECT_FALSE(done.back().data.contains("error"));
    const uint64_t next = start({{"prompt", "Hello"}, {"n_predict", 4}});
    EXPECT_FALSE(of(read_events_until_done(server_->port, next), "done").empty());
}

TEST_F(VizRoutes, TwoViewersSeeTheSameGeneration) {
    const uint64_t id = start({{"prompt", "Two viewers"}, {"n_predict", 12}});
    auto a = std::async(std::launch::async, [&] { return read_events_until_done(server_->port, id); });
    auto b = std::async(std::launch::async, [&] { return read_events_until_done(server_->port, id); });
    const auto ea = a.get(), eb = b.get();
    const auto da = of(ea, "done"), db = of(eb, "done");
    ASSERT_FALSE(da.empty());
    ASSERT_FALSE(db.empty());
    EXPECT_EQ(da.back().data["text"], db.back().data["text"]);
    EXPECT_EQ(of(ea, "step").size(), of(eb, "step").size());
}

// Stopped after its first token: the greedy continuation of this prompt runs all 400 tokens (no end of
// generation; `minfer run -p "1, 2, 3, 4, 5," -n 400 --temp 0`), so only the stop can end it sooner.
TEST_F(VizRoutes, StopCancelsTheRunningGeneration) {
    const uint64_t id = start({{"prompt", "1, 2, 3, 4, 5,"}, {"n_predict", 400}});
    httplib::Client c("127.0.0.1", server_->port);
    c.set_read_timeout(60, 0);
    std::string text;
    c.Get("/api/events", [&](const char* data, size_t n) {
        text.append(data, n);
        return text.find("event: token") == std::string::npos;
    });
    EXPECT_EQ(post("/api/stop", "")->status, 200);
    const auto done = of(read_events_until_done(server_->port, id), "done");
    ASSERT_FALSE(done.empty());
    EXPECT_TRUE(done.back().data["cancelled"].get<bool>()) << done.back().data;
    EXPECT_LT(done.back().data["n_generated"].get<int64_t>(), 400);
}

}  // namespace
}  // namespace minfer::test
