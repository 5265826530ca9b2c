// Sampler: greedy, filters, penalties and seed determinism, checked against distributions computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
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
    std::vector<float> l = {3.0f, 2.0f};  // 3 / 2 = 1.5 < 2
    EXPECT_EQ(s.sample(l), 1);
    EXPECT_FLOAT_EQ(l[0], 1.5f);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
    SamplerParams p = plain(0.0f);
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    Sampler s(p);
    s.accept(1);
    s.accept(1);
    std::vector<float> l = {0.0f, 1.0f};
    s.sample(l);
    EXPECT_FLOAT_EQ(l[1], 1.0f - 0.5f - 2 * 0.25f);
    EXPECT_FLOAT_EQ(l[0], 0.0f);
}

}  // namespace
}  // namespace minfer
