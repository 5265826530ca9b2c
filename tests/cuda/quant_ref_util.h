// Host references for the CUDA products of quantized matrices (test_quant_cuda.cpp, test_quant_mma.cpp):
// matrices quantized by the CPU reference traits, double-precision dot products, and x as the int8
// kernels take it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/quant_cuda.h"
#include "quants/quant_test_util.h"

namespace minfer::test {

// An n_out x n_in matrix quantized by the CPU's from_float_ref, and its dequantization by to_float_ref.
struct HostMatrix {
    GgmlType type;
    int64_t n_in, n_out;
    std::vector<uint8_t> bytes;
    std::vector<float> values;
};

inline HostMatrix quantized_matrix(GgmlType t, int64_t n_out, int64_t n_in, std::mt19937& rng) {
    const QuantTraits& q = traits(t);
    HostMatrix m{t, n_in, n_out, std::vector<uint8_t>(quant_row_bytes(q, n_in) * size_t(n_out)),
                 std::vector<float>(size_t(n_out * n_in))};
    const std::vector<float> src = gaussian(rng, n_out * n_in);
    q.from_float_ref(src.data(), m.bytes.data(), n_out * n_in);
    q.to_float_ref(m.bytes.data(), m.values.data(), n_out * n_in);
    return m;
}

// Random bytes (every bit pattern of the quants, sane fp16 scales) and their to_float_ref values.
inline HostMatrix random_matrix(GgmlType t, int64_t n_out, int64_t n_in, std::mt19937& rng) {
    HostMatrix m{t, n_in, n_out, random_row(rng, t, n_out * n_in), std::vector<float>(size_t(n_out * n_in))};
    traits(t).to_float_ref(m.bytes.data(), m.values.data(), n_out * n_in);
    return m;
}

// Double-precision dot products of every row with every token (dot[t][r]) and sum_i |w_i x_i| (mag).
struct RefDots {
    std::vector<double> dot, mag;
};

template <class X>
RefDots reference_dots(const HostMatrix& w, const std::vector<X>& x, int64_t nt) {
    RefDots r{std::vector<double>(size_t(nt * w.n_out)), std::vector<double>(size_t(nt * w.n_out))};
    for (int64_t t = 0; t < nt; ++t)
        for (int64_t o = 0; o < w.n_out; ++o) {
            double acc = 0.0, mag = 0.0;
            for (int64_t i = 0; i < w.n_in; ++i) {
                const double p = double(w.values[size_t(o * w.n_in + i)]) * x[size_t(t * w.n_in + i)];
                acc += p;
                mag += std::fabs(p);
            }
            r.dot[size_t(t * w.n_out + o)] = acc;
            r.mag[size_t(t * w.n_out + o)] = mag;
        }
    return r;
}

// x as the int8 kernels take it (cuda::matvec_int8_x), each product d * level exact in double: for
// kInt8 per 32 elements d * q, d = max|x| / 127, q = x * (127 / max|x|) rounded to nearest even, the
// same f32 operations as the kernel's, so a tie or a scale off by one ulp is not hidden by the budget (a
// q off by one moves a product by d |w|, far above it); for kInt8x2 d * (254 hi + lo) from the CPU's own
// quantize_q8x2 (quantize_x2_ref), which QuantizeX2MatchesCpu checks the kernel against bit for bit.
inline std::vector<double> quantized_x(const std::vector<float>& x, cuda::XQuant xq) {
    std::vector<double> q(x.size());
    if (xq == cuda::XQuant::kInt8x2) {
        std::vector<uint8_t> blocks(act_x2_row_bytes(int64_t(x.size())));
        traits(GgmlType::Q8_0).quantize_x2_ref(x.data(), blocks.data(), int64_t(x.size()));
        const auto* b = reinterpret_cast<const quants::BlockQ8X2*>(blocks.data());
        for (size_t i = 0; i < x.size(); ++i)
            q[i] = double(b[i / 32].d) * double(254 * b[i / 32].hi[i % 32] + b[i / 32].lo[i % 32]);
        return q;
    }
    for (size_t b = 0; b + 32 <= x.size(); b += 32) {
        float amax = 0.0f;
        for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
        for (size_t i = b; i < b + 32; ++i) q[i] = double(d) * double(std::nearbyint(x[i] * id));
    }
    return q;
}

}  // namespace minfer::test
