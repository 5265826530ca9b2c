// The live half: SSE framing, the event log viewers replay, histograms, and the observer's step events
// against the nodes a real forward ran and their buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "runtime/observe.h"
#include "server/http.h"
#include "viz/live.h"
#include "viz_util.h"

namespace minfer::test {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

TEST(VizSse, Framing) {
    EXPECT_EQ(server::sse_event("step", json{{"a", 1}}), "event: step\ndata: {\"a\":1}\n\n");
    EXPECT_EQ(server::sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
    // Text with newlines stays on one data line; invalid UTF-8 is replaced instead of throwing.
    const std::string e = server::sse_event("token", json{{"text", "a\nb\xff"}});
    EXPECT_EQ(count_of(e, "\n"), 3u) << e;
    EXPECT_NE(e.find("a\\nb"), std::string::npos) << e;
    EXPECT_EQ(parse_sse(e).at(0).event, "token");
}

TEST(VizEventLog, ViewersReplayTheCurrentGeneration) {
    viz::EventLog log;
    viz::EventLog::Cursor early;
    log.publish("start", {{"id", 1}});
    log.publish("token", {{"text", "a"}});
    std::vector<SseEvent> got = parse_sse(log.wait(early, 10ms));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].data["text"], "a");
    EXPECT_TRUE(log.wait(early, 10ms).empty()) << "nothing new: the wait times out";

    log.reset();  // a new generation: both the early viewer and a late one read it from its start
    log.publish("start", {{"id", 2}});
    viz::EventLog::Cursor late;
    EXPECT_EQ(parse_sse(log.wait(early, 10ms)).at(0).data["id"], 2);
    EXPECT_EQ(parse_sse(log.wait(late, 10ms)).at(0).data["id"], 2);

    std::thread closer([&] {
        std::this_thread::sleep_for(20ms);
        log.close();
    });
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(log.wait(late, 10s).empty());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "close() wakes the waiters";
    EXPECT_TRUE(log.closed());
    closer.join();
}

TEST(VizHistogram, CountsFiniteValuesAndTheRest) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> x;
    for (int i = 0; i < 400; ++i) x.push_back(float(i) / 399.0f * 2.0f - 1.0f);  // uniform over [-1, 1]
    x.insert(x.end(), {nan, nan, inf, -inf});
    const viz::Histogram h = viz::histogram(x.data(), int64_t(x.size()));
    EXPECT_EQ(h.lo, -1.0f);
    EXPECT_EQ(h.hi, 1.0f);
    EXPECT_EQ(h.nan, 2);
    EXPECT_EQ(h.inf, 2);
    EXPECT_EQ(h.n, int64_t(x.size()));
    ASSERT_EQ(h.bins.size(), size_t(viz::kHistBins));
    int64_t sum = 0;
    for (const int64_t b : h.bins) {
        EXPECT_GE(b, 9);
        EXPECT_LE(b, 11);  // 10 per bin, give or take rounding at the edges
        sum += b;
    }
    EXPECT_EQ(sum, 400);

    const std::vector<float> same(7, 3.5f);
    const viz::Histogram c = viz::histogram(same.data(), 7);
    EXPECT_EQ(c.bins.front(), 7) << "constant data: one bin";
    const std::vector<float> nans(3, nan);
    EXPECT_EQ(viz::histogram(nans.data(), 3).nan, 3);
}

// Records what the executor hands every observer: the reference for the live observer's events.
struct Recorder final : StepObserver {
    struct Row {
        NodeId id;
        bool has_data;
        BufferStats s;
    };
    std::vector<std::vector<Row>> steps;
    void begin_step(int64_t) override { steps.emplace_back(); }
    void on_node(const CNode& n, const float* data, double) override {
        const bool f32 = data && n.dtype == DType::F32;
        steps.back().push_back({n.id, f32, f32 ? buffer_stats(data, n.n_elements()) : BufferStats{}});
    }
    void end_step() override {}
};

TEST(VizObserver, OneStepEventPerForwardWithEveryExecutedNode) {
    MiniModel m;
    viz::EventLog log;
    viz::HistogramStore hists;
    auto recorder = std::make_unique<Recorder>();
    Recorder& rec = *recorder;
    m.session.add_observer(std::make_unique<viz::LiveObserver>(log, hists));
    m.session.add_observer(std::move(recorder));
    const std::vector<int32_t> prompt = m.tok->encode("The list type", true, true);
    ASSERT_GE(prompt.size(), 2u);
    m.session.forward(prompt);
    const int32_t next = 42;
    m.session.forward({&next, 1});

    viz::EventLog::Cursor c;
    const std::vector<SseEvent> events = parse_sse(log.wait(c, 10ms));
    ASSERT_EQ(events.size(), 2u);
    ASSERT_EQ(rec.steps.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        const json& e = events[i].data;
        EXPECT_EQ(events[i].event, "step");
        EXPECT_EQ(e["graph"], i == 0 ? "prefill" : "decode");
        EXPECT_EQ(e["n_tokens"], i == 0 ? int64_t(prompt.size()) : 1);
        ASSERT_EQ(e["nodes"].size(), rec.steps[i].size());
        double total = 0;
        for (size_t j = 0; j < rec.steps[i].size(); ++j) {
            const json& row = e["nodes"][j];
            const Recorder::Row& want = rec.steps[i][j];
            EXPECT_EQ(row[0], want.id);
            EXPECT_GE(row[1].get<double>(), 0.0);
            total += row[1].get<double>();
            ASSERT_EQ(row.size(), want.has_data ? 6u : 2u);
            if (!want.has_data) continue;
            if (std::isfinite(want.s.min)) {
                EXPECT_EQ(row[2].get<float>(), want.s.min);
                EXPECT_EQ(row[3].get<float>(), want.s.max);
            }
            EXPECT_EQ(row[5].get<int64_t>(), want.s.nan);
            viz::Histogram h;
            ASSERT_TRUE(hists.get(i == 0 ? viz::GraphKind::Prefill : viz::GraphKind::Decode, want.id, h));
            int64_t counted = h.nan + h.inf;
            for (const int64_t b : h.bins) counted += b;
            EXPECT_EQ(counted, h.n);
        }
        EXPECT_NEAR(e["total_us"].get<double>(), total, 1e-6 * total + 1e-6);
    }
}

}  // namespace
}  // namespace minfer::test
