// Engine::forward_greedy against Engine::forward: two engines on the same model run the same batches
// (prompts in chunks that want 0, 1, 2 or every row's logits, beside decode tokens); every wanted row's
// id from the greedy forward must be the argmax of the other's logits row.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace minfer::test {

inline void expect_greedy_equals_argmax(const Model& m, const EngineParams& p) {
    Engine by_logits(m, p), greedy(m, p);
    std::mt19937 rng(41);
    const auto n_vocab = size_t(m.hp.n_vocab);
    std::vector<std::vector<int32_t>> streams(6);
    std::vector<int64_t> fed(streams.size(), 0);
    for (auto& s : streams) {
        s.resize(std::uniform_int_distribution<size_t>(1, 40)(rng));
        for (int32_t& t : s) t = std::uniform_int_distribution<int32_t>(0, int32_t(n_vocab) - 1)(rng);
        ASSERT_EQ(by_logits.open(), greedy.open());
    }
    int64_t compared = 0;
    for (int step = 0; step < 8; ++step) {
        std::vector<Engine::Chunk> batch;
        std::vector<size_t> owner;
        for (size_t i = 0; i < streams.size(); ++i) {
            const auto rest = int64_t(streams[i].size()) - fed[i];
            const int64_t n = std::min<int64_t>(rest, std::uniform_int_distribution<int64_t>(1, 12)(rng));
            const int64_t want = std::min<int64_t>(n, int64_t((step + i) % 4 == 3 ? n : (step + i) % 3));
            batch.push_back({SeqId(i), std::span(streams[i]).subspan(size_t(fed[i]), size_t(n)), want});
            owner.push_back(i);
        }
        const std::span<const float> logits = by_logits.forward(batch);
        const std::vector<float> rows(logits.begin(), logits.end());
        const std::span<const int32_t> ids = greedy.forward_greedy(batch);
        ASSERT_EQ(ids.size() * n_vocab, rows.size());
        for (size_t r = 0; r < ids.size(); ++r, ++compared)
            ASSERT_EQ(ids[r], argmax(std::span(rows).subspan(r * n_vocab, n_vocab))) << "step " << step;
        size_t row = 0;
        for (size_t b = 0; b < batch.size(); ++b) {
            const size_t i = owner[b];
            fed[i] += int64_t(batch[b].tokens.size());
            row += size_t(batch[b].n_logits);
            // A sequence whose prompt is in takes its greedy token next, as decoding would.
            if (fed[i] == int64_t(streams[i].size()) && batch[b].n_logits > 0)
                streams[i].push_back(ids[row - 1]);
            if (fed[i] == int64_t(streams[i].size()))
                streams[i].push_back(std::uniform_int_distribution<int32_t>(0, int32_t(n_vocab) - 1)(rng));
        }
    }
    EXPECT_GT(compared, 20);
}

}  // namespace minfer::test
