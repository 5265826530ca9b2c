// Internal: AVX2/FMA versions of the CPU kernels (defined in *_avx2.cpp, which are compiled with
// -mavx2 -mfma -mf16c), and the AVX-512 prefill micro-kernels (matmul_avx512.cpp). Call them only when
// cpu_has_avx2() is true; the public entry points in ops.h / matmul.h do that dispatch.
#pragma once
#include <cstdint>

#include "backend/cpu/ops.h"
#include "quant/quants.h"

namespace minfer::cpu {

// One CPU feature probe for every kernel family: the quant table's (quant/quants.h).
inline bool cpu_has_avx2() {
    return quants_use_avx2();
}

namespace avx2 {

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
void silu(const float* x, float* y, int64_t n);
void swiglu(const float* g, const float* u, float* y, int64_t n);
void geglu(const float* g, const float* u, float* y, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);
void mul(const float* a, const float* b, float* y, int64_t n);
void attention(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv, int64_t hd,
               int64_t first, int64_t n_kv_rows, float scale, float* scratch, const float* sinks);

// The prefill matmul's operands, both k-major. Weight panel: kPanelRows rows, panel[k * kPanelRows + r]
// = w_r[k] ([n_in, 16]), rows past nr zero; pack_panel builds it from nr <= kPanelRows f32 rows (stride
// n_in). Packed activations: groups of kPanelTokens tokens, xp[g * n_in + k * kPanelTokens + t] =
// x[g + t][k] ([ceil(nt / 6) * 6 * n_in]), tokens past nt zero; pack_tokens builds them from x ([nt, n_in]).
constexpr int64_t kPanelRows = 16;
constexpr int64_t kPanelTokens = 6;
void pack_panel(const float* w, int64_t nr, int64_t n_in, float* panel);
void pack_tokens(const float* x, int64_t nt, int64_t n_in, float* xp);

// The register-blocked micro-kernels: outer products of the panel's 16 rows and T tokens over k in
// [k0, k1), stored to (add: added to) y[t * y_stride + r]. Tokens 0..5 come from the packed group at xg,
// tokens 6.. from the next group (xg + group_stride). micros[T - 1] serves T <= kPanelTokens tokens of
// one group; micros[kPanelTokens] two full groups at once (12 tokens), or is null.
using PanelMicroFn = void (*)(const float* panel, const float* xg, int64_t group_stride, int64_t k0,
                              int64_t k1, float* y, int64_t y_stride, bool add);
const PanelMicroFn* panel_micros();

// y[t * y_stride + r] = w_r . x_t for the panel's nr rows against nt packed tokens with the micro-kernels
// `micros` (this file's or avx512's: they give the same bits), f32 FMA accumulation in k blocks of 64
// summed into y.
void matmul_panel(const float* panel, int64_t nr, const float* xp, int64_t nt, int64_t n_in, float* y,
                  int64_t y_stride, const PanelMicroFn* micros);

}  // namespace avx2

// AVX-512 micro-kernels of the same panel format (matmul_avx512.cpp, compiled with the AVX-512 flags).
// Call only where quants_use_avx512(); matmul.cpp chooses.
namespace avx512 {
const avx2::PanelMicroFn* panel_micros();

// attention_avx512.cpp: ops.h's attention for head dims that are multiples of 16 and GQA groups of up to
// 8 heads (attention_fits); scratch holds n_kv_rows floats per head of a group.
bool attention_fits(int64_t group, int64_t hd);
void attention(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv, int64_t hd,
               int64_t first, int64_t n_kv_rows, float scale, float* scratch, const float* sinks);
}  // namespace avx512
}  // namespace minfer::cpu
