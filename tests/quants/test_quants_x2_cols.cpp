// The many-column int8x2 dots (QuantTraits::vec_dot_x2_cols): for every column count up to kX2MaxCols,
// each column's result must be bit for bit the one-column dot's on that activation row, for the table's
// kernels, their scalar twins and, called directly, both the AVX2 and the AVX-512 kernels (whichever this
// CPU runs), so batched tokens get exactly decode's bits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "act_test_util.h"

namespace minfer::test {
namespace {

using VecDotFn = float (*)(const void*, const void*, int64_t);
using ColsFn = void (*)(const void*, const void*, size_t, int64_t, int, float*);

struct Kernels {
    const char* isa;
    VecDotFn dot;
    ColsFn cols;
};

// The SIMD kernels of type t this CPU can run, besides the table's own (which are among them).
std::vector<Kernels> simd_kernels(GgmlType t) {
    namespace v = quants::avx2;
    namespace w = quants::avx512;
    struct Row {
        GgmlType type;
        VecDotFn avx2;
        ColsFn avx2_cols;
        VecDotFn avx512;
        ColsFn avx512_cols;
    };
    const Row rows[] = {
        {GgmlType::Q8_0, v::vec_dot_x2_q8_0, v::vec_dot_x2_cols_q8_0, w::vec_dot_x2_q8_0,
         w::vec_dot_x2_cols_q8_0},
        {GgmlType::Q4_0, v::vec_dot_x2_q4_0, v::vec_dot_x2_cols_q4_0, w::vec_dot_x2_q4_0,
         w::vec_dot_x2_cols_q4_0},
        {GgmlType::Q4_1, v::vec_dot_x2_q4_1, v::vec_dot_x2_cols_q4_1, nullptr, nullptr},
        {GgmlType::Q5_0, v::vec_dot_x2_q5_0, v::vec_dot_x2_cols_q5_0, w::vec_dot_x2_q5_0,
         w::vec_dot_x2_cols_q5_0},
        {GgmlType::Q5_1, v::vec_dot_x2_q5_1, v::vec_dot_x2_cols_q5_1, nullptr, nullptr},
        {GgmlType::Q4_K, v::vec_dot_x2_q4_k, v::vec_dot_x2_cols_q4_k, w::vec_dot_x2_q4_k,
         w::vec_dot_x2_cols_q4_k},
        {GgmlType::Q5_K, v::vec_dot_x2_q5_k, v::vec_dot_x2_cols_q5_k, w::vec_dot_x2_q5_k,
         w::vec_dot_x2_cols_q5_k},
        {GgmlType::Q6_K, v::vec_dot_x2_q6_k, v::vec_dot_x2_cols_q6_k, w::vec_dot_x2_q6_k,
         w::vec_dot_x2_cols_q6_k},
        {GgmlType::Q2_K, nullptr, nullptr, w::vec_dot_x2_q2_k, w::vec_dot_x2_cols_q2_k},
        {GgmlType::Q3_K, nullptr, nullptr, w::vec_dot_x2_q3_k, w::vec_dot_x2_cols_q3_k},
        {GgmlType::IQ4_NL, nullptr, nullptr, w::vec_dot_x2_iq4_nl, w::vec_dot_x2_cols_iq4_nl},
        {GgmlType::IQ4_XS, nullptr, nullptr, w::vec_dot_x2_iq4_xs, w::vec_dot_x2_cols_iq4_xs},
        {GgmlType::MXFP4, nullptr, nullptr, w::vec_dot_x2_mxfp4, w::vec_dot_x2_cols_mxfp4},
    };
    std::vector<Kernels> out;
    for (const Row& r : rows) {
        if (r.type != t) continue;
        if (quants_use_avx2() && r.avx2) out.push_back({"avx2", r.avx2, r.avx2_cols});
        if (quants_use_avx512() && r.avx512) out.push_back({"avx512", r.avx512, r.avx512_cols});
    }
    return out;
}

class X2ColsType : public ::testing::TestWithParam<GgmlType> {};

// Random weight bytes (every level pattern) against kX2MaxCols activation rows stored `stride` bytes
// apart (a few bytes more than a row, so no kernel may assume packed rows), for every column count and
// every starting column.
TEST_P(X2ColsType, EachColumnMatchesOneColumnDotBitForBit) {
    const QuantTraits& q = traits(GetParam());
    SKIP_WITHOUT_X2(q);
    std::vector<Kernels> kernels = simd_kernels(GetParam());
    kernels.push_back({"table", q.vec_dot_x2, q.vec_dot_x2_cols});
    kernels.push_back({"ref", q.vec_dot_x2_ref, q.vec_dot_x2_cols_ref});
    std::mt19937 rng(11);
    for (int64_t n : lengths(q)) {
        const size_t stride = act_x2_row_bytes(n) + 12;
        const int rows = 2 * kX2MaxCols;
        std::vector<uint8_t> xq(stride * rows);
        for (int c = 0; c < rows; ++c) q.quantize_x2(activations(rng, n).data(), xq.data() + c * stride, n);
        for (int trial = 0; trial < 4; ++trial) {
            const std::vector<uint8_t> w = random_row(rng, GetParam(), n);
            for (const Kernels& k : kernels)
                for (int ncols = 1; ncols <= kX2MaxCols; ++ncols)
                    for (int first = 0; first + ncols <= rows; first += ncols) {
                        float got[kX2MaxCols];
                        const uint8_t* x0 = xq.data() + first * stride;
                        k.cols(w.data(), x0, stride, n, ncols, got);
                        for (int c = 0; c < ncols; ++c) {
                            const float want = k.dot(w.data(), x0 + c * stride, n);
                            ASSERT_EQ(std::memcmp(&got[c], &want, sizeof want), 0)
                                << q.name << " " << k.isa << " n=" << n << " ncols=" << ncols
                                << " first=" << first << " c=" << c << ": " << got[c] << " vs " << want;
                        }
                    }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Int8Types, X2ColsType, ::testing::ValuesIn(kX2Types), type_name);

}  // namespace
}  // namespace minfer::test
