// matmul (threaded; int8 or int8x2 activations + integer dots, the int16 prefill GEMM, or f32 quant dot /
// dequantize + AVX2 tile) against matmul_ref (scalar dequantize, double accumulation) for every quant type
// the traits table provides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/kernels_avx2.h"
#include "backend/cpu/matmul.h"
#include "cpu_test_util.h"
#include "quant/quants_impl.h"
#include "util/error.h"

namespace minfer::cpu {
namespace {

using test::kU;
using test::random_floats;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,   GgmlType::Q4_0,
                           GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,   GgmlType::Q8_0,
                           GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
                           GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};

struct Problem {
    int64_t n_in, n_out, nt;
    std::vector<uint8_t> w;
    std::vector<float> x, bias, w_ref;  // w_ref: W as to_float_ref sees it, for the error budget
};

Problem make_problem(const QuantTraits& q, int64_t n_in, int64_t n_out, int64_t nt, std::mt19937& rng) {
    Problem p{n_in, n_out, nt, std::vector<uint8_t>(quant_row_bytes(q, n_in) * size_t(n_out)), {}, {}, {}};
    const auto wf = random_floats(rng, n_in * n_out, -1.0f, 1.0f);
    for (int64_t o = 0; o < n_out; ++o)
        q.from_float_ref(&wf[size_t(o * n_in)], &p.w[size_t(o) * quant_row_bytes(q, n_in)], n_in);
    p.w_ref.resize(wf.size());
    for (int64_t o = 0; o < n_out; ++o)
        q.to_float_ref(&p.w[size_t(o) * quant_row_bytes(q, n_in)], &p.w_ref[size_t(o * n_in)], n_in);
    p.x = random_floats(rng, nt * n_in, -1.0f, 1.0f);
    p.bias = random_floats(rng, n_out, -1.0f, 1.0f);
    return p;
}

// Budget: any f32 summation of n_in products, in any order, is within (n_in - 1) kU * sum_i |w_i x_i| of
// the exact sum (recursive summation bound); the optimized dequantization may round a few elements
// differently from to_float_ref (a few kU of |w_i x_i| each), and the bias add is one more rounding.
// (n_in + 16) kU * sum|w_i x_i| + kU |bias| covers all of it.
void check_against_ref(const Problem& p, const std::vector<float>& y, const std::vector<float>& want,
                       bool with_bias) {
    for (int64_t t = 0; t < p.nt; ++t) {
        for (int64_t o = 0; o < p.n_out; ++o) {
            double sum_abs = 0.0;
            for (int64_t i = 0; i < p.n_in; ++i)
                sum_abs +=
                    std::fabs(double(p.w_ref[size_t(o * p.n_in + i)]) * double(p.x[size_t(t * p.n_in + i)]));
            const double budget =
                double(p.n_in + 16) * kU * sum_abs + (with_bias ? kU * std::fabs(p.bias[size_t(o)]) : 0.0);
            const size_t i = size_t(t * p.n_out + o);
            ASSERT_LE(std::fabs(double(y[i]) - double(want[i])), budget)
                << "n_in=" << p.n_in << " n_out=" << p.n_out << " nt=" << p.nt << " t=" << t << " o=" << o;
        }
    }
}

// Decode (nt == 1) with an integer-dot type quantizes the activation row once (int8: blocks of 32 or
// 256, step d = max |x| / 127; int8x2: blocks of 32, two levels) and runs the dot per output: bit for bit
// what the traits' quantizer + dot + bias give.
void check_int_plumbing(const QuantTraits& q, DecodeDot mode, const Problem& p, const std::vector<float>& y,
                        const float* bias) {
    const bool x2 = mode == DecodeDot::Int8x2;
    const size_t rb = quant_row_bytes(q, p.n_in),
                 xrb = x2 ? act_x2_row_bytes(p.n_in) : act_row_bytes(q, p.n_in);
    const auto quantize = x2 ? q.quantize_x2 : q.quantize_act;
    const auto dot = x2 ? q.vec_dot_x2 : q.vec_dot_q8;
    std::vector<uint8_t> xq(xrb);
    for (int64_t t = 0; t < p.nt; ++t) {
        quantize(&p.x[size_t(t * p.n_in)], xq.data(), p.n_in);
        for (int64_t o = 0; o < p.n_out; ++o) {
            const float want = dot(&p.w[size_t(o) * rb], xq.data(), p.n_in) + (bias ? bias[o] : 0.0f);
            ASSERT_EQ(y[size_t(t * p.n_out + o)], want) << "t=" << t << " o=" << o;
        }
    }
}

// The integer paths against matmul_ref. int8: rounding activation x_i moves it by at most d_i / 2; the
// kernels multiply it by the weight's scale and minimum terms separately, each at most |w| + one step
// <= 2 wmax in magnitude for these uniform weights (wmax = the row's largest |w|), so 4 wmax per element
// bounds both the activation error and the magnitudes whose f32 roundings the sum sees. int8x2: x_i
// moves by at most d / 2 = max |x| / 64516 over its block of 32 (up to 2^-21 relative roundings of the
// residual), and the minimum terms see the same represented values, so one wmax bounds the weight it
// meets; roundings as for int8.
void check_int_against_ref(const QuantTraits& q, DecodeDot mode, const Problem& p,
                           const std::vector<float>& y, const std::vector<float>& want, bool with_bias) {
    const bool x2 = mode == DecodeDot::Int8x2;
    const int64_t blk = !x2 && q.vec_dot_type == VecDotType::Q8_K ? 256 : 32;
    // Half a step per unit of the block's max |x| (times 4 wmax below), and the slack of its roundings.
    const double half_step = x2 ? 0.25 / (2.0 * 127.0 * 254.0) : 1.0 / 254.0, slack = x2 ? 1e-3 : 1e-5;
    for (int64_t t = 0; t < p.nt; ++t) {
        const float* x = &p.x[size_t(t * p.n_in)];
        double half_steps = 0.0, sum_abs_x = 0.0;
        for (int64_t b = 0; b < p.n_in; b += blk) {
            float amax = 0.0f;
            for (int64_t i = b; i < b + blk; ++i) amax = std::max(amax, std::fabs(x[i]));
            half_steps += double(blk) * amax * half_step;
        }
        for (int64_t i = 0; i < p.n_in; ++i) sum_abs_x += std::fabs(x[i]);
        for (int64_t o = 0; o < p.n_out; ++o) {
            double wmax = 0.0;
            for (int64_t i = 0; i < p.n_in; ++i)
                wmax = std::max(wmax, std::fabs(double(p.w_ref[size_t(o * p.n_in + i)])));
            const double budget =
                4.0 * wmax * (half_steps * (1.0 + slack) + double(p.n_in + 16) * kU * sum_abs_x) +
                (with_bias ? kU * std::fabs(p.bias[size_t(o)]) : 0.0);
            const size_t i = size_t(t * p.n_out + o);
            ASSERT_LE(std::fabs(double(y[i]) - double(want[i])), budget)
                << "n_in=" << p.n_in << " n_out=" << p.n_out << " nt=" << p.nt << " t=" << t << " o=" << o;
        }
    }
}

// The int16 prefill GEMM's reference (i16::gemm_ref) against the exact sum over the values its activation
// levels stand for, x^ = d (254 hi + lo) of quantize_x2_ref (within max |x| / 64516 of x per block of 32:
// the quantizer's own tests), with to_float_ref's weights (which the levels reconstruct exactly). What
// remains is f32 rounding: per level block (n_in / 16 of them at most) a term and a minimum term, each
// bounded by 2 wmax (|scale q| <= |w| + |min|) times the block's sum|x^| and rounded three times at most
// (conversion of the exact integer sum, step product, fused multiply-add), then their recursive sum: at
// most (n_in / 16 + 8) kU * 4 wmax sum|x^| in all; and the bias add.
void check_i16_against_ref(const QuantTraits& q, const Problem& p, const std::vector<float>& y,
                           const float* bias) {
    std::vector<uint8_t> xq(act_x2_row_bytes(p.n_in));
    std::vector<double> xh(static_cast<size_t>(p.n_in));
    for (int64_t t = 0; t < p.nt; ++t) {
        q.quantize_x2_ref(&p.x[size_t(t * p.n_in)], xq.data(), p.n_in);
        const auto* blk = reinterpret_cast<const quants::BlockQ8X2*>(xq.data());
        double sum_abs_x = 0.0;
        for (int64_t i = 0; i < p.n_in; ++i) {
            const quants::BlockQ8X2& b = blk[i / 32];
            xh[size_t(i)] = double(b.d) * (254.0 * b.hi[i % 32] + b.lo[i % 32]);
            sum_abs_x += std::fabs(xh[size_t(i)]);
        }
        for (int64_t o = 0; o < p.n_out; ++o) {
            double exact = bias ? double(bias[o]) : 0.0, wmax = 0.0;
            for (int64_t i = 0; i < p.n_in; ++i) {
                const double w = p.w_ref[size_t(o * p.n_in + i)];
                exact += w * xh[size_t(i)], wmax = std::max(wmax, std::fabs(w));
            }
            const size_t i = size_t(t * p.n_out + o);
            const double budget = 4.0 * wmax * double(p.n_in / 16 + 8) * kU * sum_abs_x +
                                  (bias ? kU * (std::fabs(bias[o]) + std::fabs(exact)) : 0.0);
            ASSERT_LE(std::fabs(double(y[i]) - exact), budget)
                << "n_in=" << p.n_in << " n_out=" << p.n_out << " nt=" << p.nt << " t=" << t << " o=" << o;
        }
    }
}

// Whether matmul runs the int16 GEMM for this call (matmul.h).
bool takes_i16(const QuantTraits& q, DecodeDot mode, int64_t nt) {
    return nt > 1 && mode != DecodeDot::F32 && q.to_levels && quants_use_avx512();
}

void check_type(const QuantTraits& q, std::mt19937& rng) {
    std::unique_ptr<ThreadPool> pools[] = {std::make_unique<ThreadPool>(1), std::make_unique<ThreadPool>(2),
                                           std::make_unique<ThreadPool>(3)};
    for (int64_t n_in : {37, 96, 256, 768}) {
        if (n_in % q.block_size != 0) continue;
        for (int64_t n_out : {1, 13, 67}) {
            for (int64_t nt : {1, 2, 7, 10, 33}) {
                const Problem p = make_problem(q, n_in, n_out, nt, rng);
                for (bool with_bias : {false, true}) {
                    const float* bias = with_bias ? p.bias.data() : nullptr;
                    std::vector<float> want(static_cast<size_t>(nt * n_out)), first, want_i16;
                    matmul_ref(q, p.w.data(), n_in, n_out, p.x.data(), nt, want.data(), bias);
                    if (q.to_levels && nt > 1) {
                        want_i16.resize(want.size());
                        i16::gemm_ref(q, p.w.data(), n_in, n_out, p.x.data(), nt, want_i16.data(), bias);
                        check_i16_against_ref(q, p, want_i16, bias);
                    }
                    for (DecodeDot mode : {DecodeDot::F32, DecodeDot::Int8, DecodeDot::Int8x2}) {
                        first.clear();
                        for (auto& pool : pools) {
                            std::vector<float> y(want.size(), NAN);
                            matmul(q, p.w.data(), n_in, n_out, p.x.data(), nt, y.data(), bias, *pool, mode);
                            const bool integer = mode == DecodeDot::Int8
                                                     ? q.vec_dot_q8 != nullptr
                                                     : mode == DecodeDot::Int8x2 && q.vec_dot_x2 != nullptr;
                            if (integer && nt <= int_dot_max_tokens(q, mode)) {
                                check_int_plumbing(q, mode, p, y, bias);
                                check_int_against_ref(q, mode, p, y, want, with_bias);
                            } else if (takes_i16(q, mode, nt)) {
                                ASSERT_EQ(y, want_i16)
                                    << "int16 GEMM vs its scalar twin, threads=" << pool->size()
                                    << " n_in=" << n_in << " n_out=" << n_out << " nt=" << nt;
                            } else {
                                check_against_ref(p, y, want, with_bias);
                            }
                            // Each output is computed the same way whichever thread owns its row.
                            if (first.empty()) first = y;
                            ASSERT_EQ(y, first) << "threads=" << pool->size() << " n_in=" << n_in
                                                << " n_out=" << n_out << " nt=" << nt;
                        }
                    }
                }
            }
        }
    }
}

TEST(Matmul, MatchesReferenceForEveryQuantType) {
    std::mt19937 rng(21);
    std::string tested;
    for (GgmlType t : kTypes) {
        const QuantTraits* q = quant_traits(t);
        if (!q) continue;
        SCOPED_TRACE(q->name);
        check_type(*q, rng);
        tested += std::string(tested.empty() ? "" : " ") + q->name;
    }
    RecordProperty("quant_types", tested);
    std::cout << "matmul checked for: " << tested << "\n";
    if (!quant_traits(GgmlType::F32)) ADD_FAILURE() << "F32 has no quant traits";
}

TEST(Matmul, RejectsRowLengthOffBlockSize) {
    for (GgmlType t : kTypes) {
        const QuantTraits* q = quant_traits(t);
        if (!q || q->block_size == 1) continue;
        ThreadPool pool(1);
        const int64_t n_in = q->block_size + 1;
        std::vector<uint8_t> w(quant_row_bytes(*q, 2 * q->block_size));
        std::vector<float> x(static_cast<size_t>(n_in)), y(1);
        EXPECT_THROW(matmul(*q, w.data(), n_in, 1, x.data(), 1, y.data(), nullptr, pool), Error) << q->name;
        EXPECT_THROW(matmul_ref(*q, w.data(), n_in, 1, x.data(), 1, y.data(), nullptr), Error) << q->name;
    }
}

// The int16 GEMM's few-token form (i16::gemv, which matmul runs for a few columns, and for one under
// invariance) against its scalar twin, gemm_ref of those tokens: the same bits, for every type the GEMM
// takes, one to nine tokens (the block readers take up to four at a time, so 5 and 9 leave a group of one),
// rows of one to many 32-element chunks (the kernel sums them sixteen at a time, so 19 super-blocks leave a
// tail), row counts that split unevenly between threads, with and without bias, and x of every magnitude.
TEST(Matmul, Int16GemvEqualsItsTwin) {
    if (!quants_use_avx512()) GTEST_SKIP() << "this CPU lacks AVX-512 (F, BW, VL, VNNI): no int16 GEMM";
    std::mt19937 rng(78);
    ThreadPool pool(3);
    int tested = 0;
    for (GgmlType t : kTypes) {
        const QuantTraits* q = quant_traits(t);
        if (!q || !q->to_levels) continue;
        ++tested;
        for (int64_t nt : {1, 3, 4, 5, 9})
            for (int64_t n_in : {256, 768, 4864})
                for (int64_t n_out : {1, 37})
                    for (float scale : {0.0f, 1e-3f, 1.0f, 3e4f}) {
                        Problem p = make_problem(*q, n_in, n_out, nt, rng);
                        for (float& v : p.x) v *= scale;
                        for (bool with_bias : {false, true}) {
                            const float* bias = with_bias ? p.bias.data() : nullptr;
                            std::vector<float> y(static_cast<size_t>(nt * n_out), NAN), want(y.size());
                            i16::gemv(*q, p.w.data(), n_in, n_out, p.x.data(), nt, y.data(), bias, pool);
                            i16::gemm_ref(*q, p.w.data(), n_in, n_out, p.x.data(), nt, want.data(), bias);
                            ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0)
                                << q->name << " nt " << nt << " n_in " << n_in << " n_out " << n_out
                                << " x scale " << scale << (bias ? " bias" : "");
                        }
                    }
    }
    EXPECT_GE(tested, 6) << "types with integer levels";
}

// The prefill panel kernels alone, for token counts that take the one-group and the two-group kernels
// and their tails, and a partial panel: the AVX-512 micro-kernels must give the AVX2 ones' bits (same FMA
// sequence per row and token), and both stay within the summation budget of check_against_ref ((n_in + 16) kU
// * sum|w_i x_i|) of a double-precision sum.
TEST(Matmul, PanelKernelsAgreeAcrossIsas) {
    if (!cpu_has_avx2() || !quants_use_avx512())
        GTEST_SKIP() << "this CPU lacks AVX-512 (F, BW, VL, VNNI), or MINFER_NO_AVX512 is set: only the AVX2 "
                        "panel kernels run";
    std::mt19937 rng(77);
    for (const int64_t n_in : {int64_t(1), int64_t(7), int64_t(64), int64_t(65), int64_t(200)})
        for (const int64_t nr : {int64_t(16), int64_t(5)})
            for (const int64_t nt :
                 {int64_t(1), int64_t(4), int64_t(6), int64_t(7), int64_t(12), int64_t(13), int64_t(25)}) {
                SCOPED_TRACE("n_in " + std::to_string(n_in) + " nr " + std::to_string(nr) + " nt " +
                             std::to_string(nt));
                const auto w = random_floats(rng, nr * n_in, -1.0f, 1.0f);
                const auto x = random_floats(rng, nt * n_in, -1.0f, 1.0f);
                std::vector<float> panel(size_t(avx2::kPanelRows * n_in));
                std::vector<float> xp(
                    size_t((nt + avx2::kPanelTokens - 1) / avx2::kPanelTokens * avx2::kPanelTokens * n_in));
                avx2::pack_panel(w.data(), nr, n_in, panel.data());
                avx2::pack_tokens(x.data(), nt, n_in, xp.data());
                std::vector<float> y2(size_t(nt * nr)), y512(size_t(nt * nr));
                avx2::matmul_panel(panel.data(), nr, xp.data(), nt, n_in, y2.data(), nr,
                                   avx2::panel_micros());
                avx2::matmul_panel(panel.data(), nr, xp.data(), nt, n_in, y512.data(), nr,
                                   avx512::panel_micros());
                EXPECT_EQ(y512, y2);
                for (int64_t t = 0; t < nt; ++t)
                    for (int64_t r = 0; r < nr; ++r) {
                        double exact = 0.0, sum_abs = 0.0;
                        for (int64_t k = 0; k < n_in; ++k) {
                            const double p =
                                double(w[size_t(r * n_in + k)]) * double(x[size_t(t * n_in + k)]);
                            exact += p, sum_abs += std::fabs(p);
                        }
                        EXPECT_NEAR(y512[size_t(t * nr + r)], exact, double(n_in + 16) * kU * sum_abs)
                            << "t " << t << " r " << r;
                    }
            }
}

}  // namespace
}  // namespace minfer::cpu
