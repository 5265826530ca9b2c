// Scalar reference twins of the kernels in ops.h: straightforward loops with double accumulation,
// used by the randomized op-vs-reference tests and as the fallback on CPUs without AVX2.
#pragma once
#include <cstdint>

#include "backend/cpu/ops.h"

namespace minfer::cpu {

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps);
void rope_ref(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const RopeFreq& f,
              bool neox);
void silu_ref(const float* x, float* y, int64_t n);
void swiglu_ref(const float* g, const float* u, float* y, int64_t n);
void geglu_ref(const float* g, const float* u, float* y, int64_t n);
void add_ref(const float* a, const float* b, float* y, int64_t n);
void mul_ref(const float* a, const float* b, float* y, int64_t n);
int32_t argmax_ref(const float* x, int64_t n);
// Same layout as attention() in ops.h; scores, softmax and the weighted sum are all in double.
void attention_ref(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv,
                   int64_t hd, int64_t first, int64_t n_kv_rows, float scale, const float* sinks = nullptr);
void swiglu_oai_ref(const float* g, const float* u, float* y, int64_t n);

}  // namespace minfer::cpu
