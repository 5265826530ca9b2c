// The engine settings of the batch-invariance tests (engine, scheduler, server): --deterministic on
// two threads, so every sequence's logits can be memcmp-compared with the sequence run alone.
#pragma once
#include <cstdint>

#include "runtime/engine.h"

namespace minfer::test {

inline EngineParams invariant_params(int max_seqs, int64_t n_ctx) {
    EngineParams p;
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    p.max_seqs = max_seqs;
    p.batch_invariant = true;
    return p;
}

}  // namespace minfer::test
