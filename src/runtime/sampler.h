// Token sampling from one row of logits: penalties, then greedy (temp <= 0) or temperature + top-k +
// top-p + min-p filtering and a draw from a seeded generator (deterministic for a given seed).
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace minfer {

struct SamplerParams {
    float temp = 0.8f;            // <= 0: greedy (argmax; ties to the lowest id)
    int32_t top_k = 40;           // <= 0: disabled
    float top_p = 0.95f;          // >= 1: disabled
    float min_p = 0.05f;          // <= 0: disabled; keep tokens with p >= min_p * p_max
    float repeat_penalty = 1.0f;  // 1: disabled; llama.cpp semantics (divide positive, multiply negative)
    float presence_penalty = 0.0f;
    float frequency_penalty = 0.0f;
    int32_t penalty_last_n = 64;  // how many recent tokens the penalties look at
    uint64_t seed = 0;
};

class Sampler {
  public:
    explicit Sampler(const SamplerParams& p);
    // Picks the next token from `logits` (n_vocab floats; penalties apply to a copy).
    int32_t sample(std::span<const float> logits);
    // Whether sample() is the argmax of the raw logits, whatever they are: greedy or top-k 1, and no
    // penalties (the engine can then pick the token where the logits are).
    bool is_argmax() const;
    // Records an accepted token (prompt or generated) for the penalties.
    void accept(int32_t id);
    void reset();

  private:
    SamplerParams p_;
    std::mt19937_64 rng_;
    std::vector<int32_t> recent_;  // last penalty_last_n accepted tokens
    struct Cand {
        int32_t id;
        float logit;
    };
    bool penalizes() const;
    size_t best_candidates(std::span<const float> logits);
    std::vector<Cand> cands_;       // scratch, reused between calls
    std::vector<float> penalized_;  // the logits with penalties applied (scratch)
};

// Index of the largest value (lowest index on ties).
int32_t argmax(std::span<const float> v);

// A token's log-probability under the model (log-softmax of the raw logits, before penalties and
// sampling filters) and the n_top most likely tokens with theirs, most likely first (ties: lowest id).
struct TokenLogprob {
    int32_t id = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;
};
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int n_top);

}  // namespace minfer
