// Sampler: greedy, filters, penalties and seed determinism, checked against distributions computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "runtime/sampler.h"

namespace minfer {
namespace {

SamplerParams plain(float temp) {
    SamplerParams p;
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

std::map<int32_t, int> histogram(SamplerParams p, const std::vector<float>& logits, int n) {
    Sampler s(p);
    std::map<int32_t, int> h;
    for (int i = 0; i < n; ++i) {
        std::vector<float> l = logits;
        ++h[s.sample(l)];
    }
    return h;
}

TEST(Sampler, GreedyPicksFirstMaximum) {
    Sampler s(plain(0.0f));
    std::vector<float> l = {1.0f, 3.0f, -2.0f, 3.0f};
    EXPECT_EQ(s.sample(l), 1);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDiffers) {
    const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f};
    auto draw = [&](uint64_t seed) {
        SamplerParams p = plain(1.0f);
        p.seed = seed;
        Sampler s(p);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) {
            std::vector<float> l = logits;
            out.push_back(s.sample(l));
        }
        return out;
    };
    EXPECT_EQ(draw(7), draw(7));
    EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, TemperatureOneFollowsSoftmax) {
    const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
    const int n = 60000;
    const auto h = histogram(plain(1.0f), logits, n);
    const double z = 1 + std::exp(1.0) + std::exp(2.0);
    for (int i = 0; i < 3; ++i) {
        const double p = std::exp(double(logits[size_t(i)])) / z;
        const double sd = std::sqrt(p * (1 - p) / n);
        EXPECT_NEAR(double(h.count(i) ? h.at(i) : 0) / n, p, 5 * sd) << "token " << i;  // 5 sigma
    }
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
    SamplerParams p = plain(1.0f);
    p.top_k = 2;
    const auto h = histogram(p, {5.0f, 4.9f, 4.8f, 4.7f}, 2000);
    EXPECT_EQ(h.size(), 2u);
    EXPECT_TRUE(h.count(0) && h.count(1));
}

TEST(Sampler, TopPCutsTheTail) {
    SamplerParams p = plain(1.0f);
    p.top_p = 0.5f;  // token 0 alone holds > 50%
    const auto h = histogram(p, {3.0f, 1.0f, 1.0f, 1.0f}, 2000);
    EXPECT_EQ(h.size(), 1u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
    SamplerParams p = plain(1.0f);
    p.min_p = 0.2f;  // exp(-2) = 0.135 < 0.2 of the max; exp(-1) = 0.37 stays
    const auto h = histogram(p, {0.0f, -1.0f, -2.0f}, 4000);
    EXPECT_TRUE(h.count(0) && h.count(1));
    EXPECT_FALSE(h.count(2));
}

TEST(Sampler, RepeatPenaltyChangesGreedyChoice) {
    SamplerParams p = plain(0.0f);
    p.repeat_penalty = 2.0f;
    Sampler s(p);
    s.accept(0);
    const std::vector<float> l = {3.0f, 2.0f};  // 3 / 2 = 1.5 < 2
    EXPECT_EQ(s.sample(l), 1);
    EXPECT_EQ(l[0], 3.0f) << "penalties apply to the sampler's copy, not the caller's logits";
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
    SamplerParams p = plain(0.0f);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler s(p);
    s.accept(1);
    s.accept(1);
    // Token 1 loses 0.5 + 2 * 0.25 = 1: just below token 0 from 0.99, just above it from 1.01.
    EXPECT_EQ(s.sample(std::vector<float>{0.0f, 0.99f}), 0);
    EXPECT_EQ(s.sample(std::vector<float>{0.0f, 1.01f}), 1);
}

// argmax is the first maximum, as std::max_element finds it, at every length around its blocks of
// 1024 and its 16 lanes, with ties inside a block, across blocks and among infinities.
TEST(Sampler, ArgmaxIsTheFirstMaximum) {
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> level(-4, 4);  // few values: many ties
    for (size_t n : {1u, 2u, 15u, 16u, 17u, 1023u, 1024u, 1025u, 3000u, 151936u}) {
        for (int rep = 0; rep < 20; ++rep) {
            std::vector<float> v(n);
            for (float& x : v) x = rep % 5 == 4 ? -INFINITY : float(level(rng));
            if (rep % 3 == 1) v[rng() % n] = 9.0f, v[rng() % n] = 9.0f;
            const auto want = int32_t(std::max_element(v.begin(), v.end()) - v.begin());
            EXPECT_EQ(argmax(v), want) << "n " << n << " rep " << rep;
        }
    }
}

// The filtering sampler as first written: every token a candidate, partially sorted to top_k (by logit,
// then id), softmax at temperature, min-p, top-p, one draw. The sampler's one-pass top-k selection must
// give the same tokens, draw for draw, from the same seed.
int32_t sample_by_sorting(const SamplerParams& p, std::span<const float> logits, std::mt19937_64& rng) {
    struct Cand {
        int32_t id;
        float logit;
    };
    std::vector<Cand> c(logits.size());
    for (size_t i = 0; i < c.size(); ++i) c[i] = {int32_t(i), logits[i]};
    auto by_logit = [](const Cand& a, const Cand& b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    };
    size_t n = c.size();
    if (p.top_k > 0 && size_t(p.top_k) < n) {
        std::partial_sort(c.begin(), c.begin() + p.top_k, c.end(), by_logit);
        n = size_t(p.top_k);
    } else {
        std::sort(c.begin(), c.end(), by_logit);
    }
    std::vector<double> probs(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += probs[i] = std::exp(double(c[i].logit - c[0].logit) / p.temp);
    for (double& q : probs) q /= sum;
    size_t keep = n;
    if (p.min_p > 0.0f)
        while (keep > 1 && probs[keep - 1] < double(p.min_p) * probs[0]) --keep;
    if (p.top_p < 1.0f) {
        double cum = 0;
        for (size_t i = 0; i < keep; ++i)
            if ((cum += probs[i]) >= double(p.top_p)) {
                keep = i + 1;
                break;
            }
    }
    std::discrete_distribution<size_t> pick(probs.begin(), probs.begin() + ptrdiff_t(keep));
    return c[pick(rng)].id;
}

TEST(Sampler, TopKSelectionDrawsAsFullSorting) {
    std::mt19937 gen(11);
    std::normal_distribution<float> wide(0.0f, 3.0f);
    std::uniform_int_distribution<int> level(-3, 3);  // few values: ties at the k-th place
    for (const size_t n : {7u, 1000u, 5000u, 151936u})
        for (const int k : {1, 2, 40, 64, 1000, 6000})
            for (int rep = 0; rep < 3; ++rep) {
                SamplerParams p;
                p.top_k = k;
                p.temp = rep == 2 ? 2.0f : 0.8f;
                p.top_p = rep == 1 ? 0.9f : 1.0f;
                p.min_p = rep == 0 ? 0.05f : 0.0f;
                p.seed = uint64_t(17 * k + rep);
                Sampler s(p);
                std::mt19937_64 ref_rng(p.seed);
                for (int draw = 0; draw < 4; ++draw) {
                    std::vector<float> l(n);
                    for (float& x : l) x = rep == 1 ? float(level(gen)) : wide(gen);
                    if (draw == 3) std::sort(l.begin(), l.end());  // the best last: every prune moves it
                    ASSERT_EQ(s.sample(l), sample_by_sorting(p, l, ref_rng))
                        << "n " << n << " k " << k << " rep " << rep << " draw " << draw;
                }
            }
}

// is_argmax: greedy or top-k 1 without penalties, and then sample() is the argmax of the row.
TEST(Sampler, ArgmaxSamplersPickTheArgmax) {
    std::mt19937 gen(3);
    std::uniform_int_distribution<int> level(-2, 2);
    SamplerParams greedy = plain(0.0f), top1;
    top1.top_k = 1;
    SamplerParams penalized = top1;
    penalized.repeat_penalty = 1.1f;
    EXPECT_TRUE(Sampler(greedy).is_argmax());
    EXPECT_TRUE(Sampler(top1).is_argmax());
    EXPECT_FALSE(Sampler(penalized).is_argmax());
    EXPECT_FALSE(Sampler(SamplerParams{}).is_argmax());
    for (const SamplerParams& p : {greedy, top1}) {
        Sampler s(p);
        for (int rep = 0; rep < 20; ++rep) {
            std::vector<float> l(3000);
            for (float& x : l) x = float(level(gen));
            EXPECT_EQ(s.sample(l), argmax(l));
        }
    }
}

}  // namespace
}  // namespace minfer
