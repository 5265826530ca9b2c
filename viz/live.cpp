#include "viz/live.h"

#include <cmath>
#include <limits>

#include "server/http.h"

namespace minfer::viz {

using nlohmann::json;

void EventLog::reset() {
    std::lock_guard lock(mu_);
    events_.clear();
    ++epoch_;
    cv_.notify_all();
}

void EventLog::publish(const std::string& event, const json& data) {
    std::string framed = server::sse_event(event, data);
    std::lock_guard lock(mu_);
    events_.push_back(std::move(framed));
    cv_.notify_all();
}

std::string EventLog::wait(Cursor& c, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    const auto fresh = [&] { return closed_ || c.epoch != epoch_ || c.next < events_.size(); };
    cv_.wait_for(lock, timeout, fresh);
    if (c.epoch != epoch_) c = {epoch_, 0};
    std::string out;
    for (; c.next < events_.size(); ++c.next) out += events_[c.next];
    return out;
}

void EventLog::close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    cv_.notify_all();
}

bool EventLog::closed() const {
    std::lock_guard lock(mu_);
    return closed_;
}

uint64_t EventLog::epoch() const {
    std::lock_guard lock(mu_);
    return epoch_;
}

Histogram histogram(const float* data, int64_t n) {
    Histogram h;
    h.n = n;
    h.bins.assign(kHistBins, 0);
    float lo = std::numeric_limits<float>::infinity(), hi = -lo;
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(data[i])) continue;
        lo = std::min(lo, data[i]);
        hi = std::max(hi, data[i]);
    }
    if (lo > hi) lo = hi = 0;  // no finite value
    h.lo = lo;
    h.hi = hi;
    const double scale = hi > lo ? kHistBins / (double(hi) - lo) : 0;
    for (int64_t i = 0; i < n; ++i) {
        const float x = data[i];
        if (std::isnan(x)) {
            ++h.nan;
        } else if (std::isinf(x)) {
            ++h.inf;
        } else {
            const auto b = int64_t((double(x) - lo) * scale);
            ++h.bins[size_t(std::min<int64_t>(b, kHistBins - 1))];
        }
    }
    return h;
}

json histogram_json(const Histogram& h, GraphKind kind) {
    return {{"graph", kind_name(kind)}, {"step", h.step}, {"node", h.node}, {"lo", h.lo},  {"hi", h.hi},
            {"bins", h.bins},           {"n", h.n},       {"nan", h.nan},   {"inf", h.inf}};
}

void HistogramStore::put(GraphKind k, Histogram h) {
    std::lock_guard lock(mu_);
    std::vector<Histogram>& v = by_kind_[int(k)];
    if (v.size() <= size_t(h.node)) v.resize(size_t(h.node) + 1);
    v[size_t(h.node)] = std::move(h);
}

bool HistogramStore::get(GraphKind k, NodeId node, Histogram& out) const {
    std::lock_guard lock(mu_);
    const std::vector<Histogram>& v = by_kind_[int(k)];
    if (node < 0 || size_t(node) >= v.size() || v[size_t(node)].step < 0) return false;
    out = v[size_t(node)];
    return true;
}

void HistogramStore::clear() {
    std::lock_guard lock(mu_);
    for (auto& v : by_kind_) v.clear();
}

void LiveObserver::begin_step(int64_t step) {
    step_ = step;
    n_tokens_ = 0;
    total_us_ = 0;
    nodes_ = json::array();
    step_hists_.clear();
}

void LiveObserver::on_node(const CNode& n, const float* data, double us) {
    if (n_tokens_ == 0) n_tokens_ = n.shape[1];
    total_us_ += us;
    json row = {n.id, us};
    if (data && n.dtype == DType::F32) {  // KV stores write only into the cache: no output to show
        const BufferStats s = buffer_stats(data, n.n_elements());
        row.insert(row.end(), {s.min, s.max, s.mean, s.nan});
        Histogram h = histogram(data, n.n_elements());
        h.step = step_;
        h.node = n.id;
        step_hists_.push_back(std::move(h));
    }
    nodes_.push_back(std::move(row));
}

void LiveObserver::end_step() {
    const GraphKind kind = kind_of(n_tokens_);
    for (Histogram& h : step_hists_) hists_.put(kind, std::move(h));
    step_hists_.clear();
    log_.publish("step", {{"step", step_},
                          {"graph", kind_name(kind)},
                          {"n_tokens", n_tokens_},
                          {"total_us", total_us_},
                          {"nodes", std::move(nodes_)}});
}

}  // namespace minfer::viz
