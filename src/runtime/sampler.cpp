#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "backend/cpu/ops.h"

namespace minfer {

int32_t argmax(std::span<const float> v) {
    return cpu::argmax(v.data(), int64_t(v.size()));
}

TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int n_top) {
    const float max = logits[size_t(argmax(logits))];
    double sum = 0;
    for (const float l : logits) sum += std::exp(double(l - max));
    const auto lse = float(double(max) + std::log(sum));
    TokenLogprob out{id, logits[size_t(id)] - lse, {}};
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    const auto n = std::min(size_t(std::max(n_top, 0)), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + std::ptrdiff_t(n), ids.end(), [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (size_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logits[size_t(ids[i])] - lse);
    return out;
}

// The top_k best tokens (all when top_k is off) into cands_, best first: a strict order, larger logit
// then lower id, so the set and its order are unique. For top_k below the vocabulary one pass keeps
// only tokens at or above the k-th best logit seen so far, pruning the kept ones back to k whenever
// they fill kPrune slots, so a 152k vocabulary costs one compare per token instead of a heap update.
size_t Sampler::best_candidates(std::span<const float> logits) {
    auto by_logit = [](const Cand& a, const Cand& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    const size_t n = logits.size();
    cands_.clear();
    if (p_.top_k <= 0 || size_t(p_.top_k) >= n) {
        for (size_t i = 0; i < n; ++i) cands_.push_back({int32_t(i), logits[i]});
        std::sort(cands_.begin(), cands_.end(), by_logit);
        return n;
    }
    const auto k = size_t(p_.top_k);
    const size_t prune_at = std::max<size_t>(4 * k, 1024);
    float floor = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
        if (!(logits[i] >= floor)) continue;
        cands_.push_back({int32_t(i), logits[i]});
        if (cands_.size() < prune_at) continue;
        std::nth_element(cands_.begin(), cands_.begin() + ptrdiff_t(k - 1), cands_.end(), by_logit);
        cands_.resize(k);
        floor = cands_[k - 1].logit;  // a later token must reach it to be among the k best
    }
    const size_t kept = std::min(k, cands_.size());
    std::partial_sort(cands_.begin(), cands_.begin() + ptrdiff_t(kept), cands_.end(), by_logit);
    cands_.resize(kept);
    return kept;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

void Sampler::reset() {
    recent_.clear();
    rng_.seed(p_.seed);
}

void Sampler::accept(int32_t id) {
    if (p_.penalty_last_n <= 0) return;
    recent_.push_back(id);
    if (recent_.size() > size_t(p_.penalty_last_n)) recent_.erase(recent_.begin());
}

bool Sampler::penalizes() const {
    return p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
}

bool Sampler::is_argmax() const {
    return (p_.temp <= 0.0f || p_.top_k == 1) && !penalizes();
}

int32_t Sampler::sample(std::span<const float> raw) {
    const bool penalize = penalizes();
    std::span<const float> logits = raw;
    if (penalize && !recent_.empty()) {
        penalized_.assign(raw.begin(), raw.end());
        std::unordered_map<int32_t, int> counts;
        for (int32_t id : recent_) ++counts[id];
        for (auto [id, n] : counts) {
            if (id < 0 || size_t(id) >= penalized_.size()) continue;
            float& l = penalized_[size_t(id)];
            l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
            l -= float(n) * p_.frequency_penalty + p_.presence_penalty;
        }
        logits = penalized_;
    }
    if (p_.temp <= 0.0f) return argmax(logits);

    const size_t n = best_candidates(logits);
    // Softmax at temperature over the survivors (sorted, so the first is the max).
    std::vector<double> probs(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i)
        sum += probs[i] = std::exp(double(cands_[i].logit - cands_[0].logit) / p_.temp);
    for (double& q : probs) q /= sum;
    size_t keep = n;
    if (p_.min_p > 0.0f)
        while (keep > 1 && probs[keep - 1] < double(p_.min_p) * probs[0]) --keep;
    if (p_.top_p < 1.0f) {
        double cum = 0;
        for (size_t i = 0; i < keep; ++i)
            if ((cum += probs[i]) >= double(p_.top_p)) {
                keep = i + 1;
                break;
            }
    }
    std::discrete_distribution<size_t> pick(probs.begin(), probs.begin() + ptrdiff_t(keep));
    return cands_[pick(rng_)].id;
}

}  // namespace minfer
