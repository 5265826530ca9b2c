#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels_avx2.h"
#include "backend/cpu/ops_ref.h"

namespace minfer::cpu {

// CPUs without AVX2/FMA run the scalar reference twins: slower, but the same results within the
// budgets the tests hold the SIMD versions to.

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    if (cpu_has_avx2()) return avx2::rms_norm(x, w, y, n, eps);
    rms_norm_ref(x, w, y, n, eps);
}

void RopeFreq::cos_sin(int32_t pos, int64_t i, int64_t n_rot, float& c, float& s) const {
    const double extrap = std::pow(double(base), -2.0 * double(i) / double(n_rot));
    double theta = double(pos) * double(scale) * extrap, m = 1.0;
    if (yarn_high > 0.0) {
        const double span = yarn_high > yarn_low ? yarn_high - yarn_low : 0.001;
        const double keep = 1.0 - std::clamp((double(i) - yarn_low) / span, 0.0, 1.0);
        theta = double(pos) * (extrap * double(scale) * (1.0 - keep) + extrap * keep);
        m = mscale;
    }
    c = float(std::cos(theta) * m);
    s = float(std::sin(theta) * m);
}

void rope(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const RopeFreq& f,
          bool neox) {
    // One angle per pair, shared by all heads; cos/sin in double, the rotation itself in float.
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        float c, s;
        f.cos_sin(pos, i, n_rot, c, s);
        const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        for (int64_t h = 0; h < n_head; ++h) {
            float* xh = x + h * head_dim;
            const float a = xh[i0], b = xh[i1];
            xh[i0] = a * c - b * s;
            xh[i1] = a * s + b * c;
        }
    }
}

namespace {

// The largest of x[b, e) (e > b), in 16 independent chains of max instructions that overlap in the
// pipeline (a plain loop's one dependent chain, with a branch per element, measured 6x slower over a
// 152k vocabulary).
float block_max(const float* x, int64_t b, int64_t e) {
    float lane[16];
    for (float& l : lane) l = x[b];
    int64_t i = b;
    for (; i + 16 <= e; i += 16)
        for (int j = 0; j < 16; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
    float m = lane[0];
    for (const float l : lane) m = l > m ? l : m;
    for (; i < e; ++i) m = x[i] > m ? x[i] : m;
    return m;
}

}  // namespace

// The first block of 1024 holding the maximum, then the first index in it that holds it.
int32_t argmax(const float* x, int64_t n) {
    constexpr int64_t kBlock = 1024;
    int64_t best = 0;
    float best_max = 0;
    for (int64_t b = 0; b < n; b += kBlock) {
        const float m = block_max(x, b, std::min(n, b + kBlock));
        if (b == 0 || m > best_max) best_max = m, best = b;
    }
    for (int64_t i = best; i < std::min(n, best + kBlock); ++i)
        if (x[i] == best_max) return int32_t(i);
    return int32_t(best);
}

void silu(const float* x, float* y, int64_t n) {
    if (cpu_has_avx2()) return avx2::silu(x, y, n);
    silu_ref(x, y, n);
}

void swiglu(const float* g, const float* u, float* y, int64_t n) {
    if (cpu_has_avx2()) return avx2::swiglu(g, u, y, n);
    swiglu_ref(g, u, y, n);
}

void geglu(const float* g, const float* u, float* y, int64_t n) {
    if (cpu_has_avx2()) return avx2::geglu(g, u, y, n);
    geglu_ref(g, u, y, n);
}

// A plain loop: the experts' activations are a small part of their products' time.
void swiglu_oai(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float a = std::min(g[i], 7.0f), b = std::clamp(u[i], -7.0f, 7.0f);
        y[i] = a / (1.0f + std::exp(-1.702f * a)) * (b + 1.0f);
    }
}

void scale(const float* x, float s, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void add(const float* a, const float* b, float* y, int64_t n) {
    if (cpu_has_avx2()) return avx2::add(a, b, y, n);
    add_ref(a, b, y, n);
}

void mul(const float* a, const float* b, float* y, int64_t n) {
    if (cpu_has_avx2()) return avx2::mul(a, b, y, n);
    mul_ref(a, b, y, n);
}

KvRows contiguous_rows(const float* k, const float* v, int64_t stride, int64_t n_rows) {
    static const int32_t first_block = 0;
    int shift = kMinBlockShift;
    while ((int64_t(1) << shift) < n_rows) ++shift;
    return {k, v, stride, &first_block, shift};
}

void attention(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv, int64_t hd,
               int64_t first, int64_t n_kv_rows, float scale, float* scratch, const float* sinks) {
    if (quants_use_avx512() && avx512::attention_fits(n_head / n_head_kv, hd))
        return avx512::attention(q, kv, out, n_head, n_head_kv, hd, first, n_kv_rows, scale, scratch, sinks);
    if (cpu_has_avx2())
        return avx2::attention(q, kv, out, n_head, n_head_kv, hd, first, n_kv_rows, scale, scratch, sinks);
    attention_ref(q, kv, out, n_head, n_head_kv, hd, first, n_kv_rows, scale, sinks);
}

}  // namespace minfer::cpu
