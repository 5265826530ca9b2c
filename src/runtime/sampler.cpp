#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace minfer {

int32_t argmax(std::span<const float> v) {
    return int32_t(std::max_element(v.begin(), v.end()) - v.begin());  // first maximum
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

int32_t Sampler::sample(std::span<float> logits) {
    const bool penalize =
        p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
    if (penalize && !recent_.empty()) {
        std::unordered_map<int32_t, int> counts;
        for (int32_t id : recent_) ++counts[id];
        for (auto [id, n] : counts) {
            if (id < 0 || size_t(id) >= logits.size()) continue;
            float& l = logits[size_t(id)];
            l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
            l -= float(n) * p_.frequency_penalty + p_.presence_penalty;
        }
    }
    if (p_.temp <= 0.0f) return argmax(logits);

    cands_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) cands_[i] = {int32_t(i), logits[i]};
    auto by_logit = [](const Cand& a, const Cand& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    size_t n = cands_.size();
    if (p_.top_k > 0 && size_t(p_.top_k) < n) {
        std::partial_sort(cands_.begin(), cands_.begin() + p_.top_k, cands_.end(), by_logit);
        n = size_t(p_.top_k);
    } else {
        std::sort(cands_.begin(), cands_.end(), by_logit);
    }
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
