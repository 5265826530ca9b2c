// matmul(invariant = true): a column's output bits must not depend on how many columns share the call,
// nor on its place among them, nor on the thread count. For every type, DecodeDot mode, a range of
// column counts and row counts (1, and not a multiple of the 16-row panels), with and without bias:
// each column of a batch against the same column computed alone, and placed elsewhere among other
// columns; and every value against matmul_ref within the budget test_matmul.cpp gives that path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "cpu_test_util.h"

namespace minfer::cpu {
namespace {

using test::kU;
using test::random_floats;

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
const int64_t kColumnCounts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 33};
constexpr int64_t kMaxCols = 33;

// W [n_out][n_in] from random floats by from_float_ref (w_ref: its to_float_ref values), and 2 * kMaxCols
// activation columns: the batch's and others to place it among.
struct Problem {
    int64_t n_in, n_out;
    std::vector<uint8_t> w;
    std::vector<float> w_ref, x, bias;
    const float* col(int64_t t) const { return &x[size_t(t * n_in)]; }
};

Problem make_problem(const QuantTraits& q, int64_t n_in, int64_t n_out, std::mt19937& rng) {
    const size_t rb = quant_row_bytes(q, n_in);
    Problem p{n_in, n_out, std::vector<uint8_t>(rb * size_t(n_out)), {}, {}, {}};
    const auto wf = random_floats(rng, n_in * n_out, -1.0f, 1.0f);
    p.w_ref.resize(wf.size());
    for (int64_t o = 0; o < n_out; ++o) {
        q.from_float_ref(&wf[size_t(o * n_in)], &p.w[size_t(o) * rb], n_in);
        q.to_float_ref(&p.w[size_t(o) * rb], &p.w_ref[size_t(o * n_in)], n_in);
    }
    p.x = random_floats(rng, 2 * kMaxCols * n_in, -1.0f, 1.0f);
    p.bias = random_floats(rng, n_out, -1.0f, 1.0f);
    return p;
}

bool integer_path(const QuantTraits& q, DecodeDot mode) {
    return (mode == DecodeDot::Int8 && q.vec_dot_q8) || (mode == DecodeDot::Int8x2 && q.vec_dot_x2);
}

// test_matmul.cpp's budgets for output (t, o) of the columns x ([nt][n_in]). f32 paths: any f32 sum of
// the n_in products is within (n_in - 1) kU sum|w_i x_i| of the exact one, the SIMD dequantization may
// round a few elements apart from to_float_ref, and the bias is one more rounding: (n_in + 16) kU
// sum|w_i x_i| + kU |bias|. Integer paths: the activation rounding (half a step per element, step
// max |x| / 127 per block of 32 or 256 for int8, max |x| / 64516 / 2 per block of 32 for int8x2, with
// 1e-5 / 1e-3 slack for the roundings of the steps) times 4 wmax (the weight's scale and minimum terms
// are each at most 2 wmax), plus the f32 roundings of those terms: 4 wmax (half_steps (1 + slack) +
// (n_in + 16) kU sum|x|) + kU |bias|.
double budget(const QuantTraits& q, DecodeDot mode, const Problem& p, const float* x, int64_t o, bool bias) {
    const float* w = &p.w_ref[size_t(o * p.n_in)];
    double sum_wx = 0.0, sum_x = 0.0, wmax = 0.0;
    for (int64_t i = 0; i < p.n_in; ++i) {
        sum_wx += std::fabs(double(w[i]) * double(x[i])), sum_x += std::fabs(x[i]);
        wmax = std::max(wmax, std::fabs(double(w[i])));
    }
    const double b = bias ? kU * std::fabs(p.bias[size_t(o)]) : 0.0;
    if (!integer_path(q, mode)) return double(p.n_in + 16) * kU * sum_wx + b;
    const bool x2 = mode == DecodeDot::Int8x2;
    const int64_t blk = !x2 && q.vec_dot_type == VecDotType::Q8_K ? 256 : 32;
    const double half_step = x2 ? 0.25 / (2.0 * 127.0 * 254.0) : 1.0 / 254.0, slack = x2 ? 1e-3 : 1e-5;
    double half_steps = 0.0;
    for (int64_t s = 0; s < p.n_in; s += blk) {
        float amax = 0.0f;
        for (int64_t i = s; i < s + blk; ++i) amax = std::max(amax, std::fabs(x[i]));
        half_steps += double(blk) * amax * half_step;
    }
    return 4.0 * wmax * (half_steps * (1.0 + slack) + double(p.n_in + 16) * kU * sum_x) + b;
}

struct Case {
    const QuantTraits& q;
    const Problem& p;
    DecodeDot mode;
    const float* bias;
    // y [nt][n_out] of matmul(invariant) on the columns x ([nt][n_in]).
    std::vector<float> operator()(const std::vector<float>& x, int64_t nt, ThreadPool& pool) const {
        std::vector<float> y(size_t(nt * p.n_out), NAN);
        matmul(q, p.w.data(), p.n_in, p.n_out, x.data(), nt, y.data(), bias, pool, mode, true);
        return y;
    }
};

bool same_bits(const float* a, const float* b, int64_t n) {
    return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0;
}

// One (type, n_out, mode, bias): each column alone first, then the batches of every column count.
void check_batches(const Case& run, std::mt19937& rng, ThreadPool* const pools[2]) {
    const Problem& p = run.p;
    const auto cols = [&](int64_t first, int64_t nt) {
        return std::vector<float>(p.x.begin() + first * p.n_in, p.x.begin() + (first + nt) * p.n_in);
    };
    std::vector<std::vector<float>> alone;
    for (int64_t t = 0; t < kMaxCols; ++t) alone.push_back(run(cols(t, 1), 1, *pools[0]));
    for (int64_t nt : kColumnCounts) {
        SCOPED_TRACE("nt " + std::to_string(nt));
        const std::vector<float> x = cols(0, nt), y = run(x, nt, *pools[nt % 2]);
        std::vector<float> want(y.size());
        matmul_ref(run.q, p.w.data(), p.n_in, p.n_out, x.data(), nt, want.data(), run.bias);
        for (int64_t t = 0; t < nt; ++t) {
            ASSERT_TRUE(same_bits(&y[size_t(t * p.n_out)], alone[size_t(t)].data(), p.n_out))
                << "column " << t;
            for (int64_t o = 0; o < p.n_out; ++o) {
                const size_t i = size_t(t * p.n_out + o);
                ASSERT_LE(std::fabs(double(y[i]) - double(want[i])),
                          budget(run.q, run.mode, p, p.col(t), o, run.bias != nullptr))
                    << "t " << t << " o " << o;
            }
        }
        // Column j among other columns (kMaxCols.. of the problem), at another position pos.
        const int64_t j = int64_t(rng() % uint32_t(nt)), pos = (j + 1 + int64_t(rng() % uint32_t(nt))) % nt;
        std::vector<float> mixed = cols(kMaxCols, nt);
        std::copy_n(p.col(j), p.n_in, mixed.begin() + pos * p.n_in);
        const std::vector<float> ym = run(mixed, nt, *pools[1 - nt % 2]);
        ASSERT_TRUE(same_bits(&ym[size_t(pos * p.n_out)], alone[size_t(j)].data(), p.n_out))
            << "column " << j << " at " << pos;
    }
}

TEST(MatmulInvariant, ColumnBitsIndependentOfBatch) {
    std::mt19937 rng(31);
    const auto one = std::make_unique<ThreadPool>(1), three = std::make_unique<ThreadPool>(3);
    ThreadPool* const pools[2] = {three.get(), one.get()};
    for (GgmlType type : kTypes) {
        const QuantTraits* q = quant_traits(type);
        ASSERT_NE(q, nullptr);
        // K-quants: two super-blocks; the others 11 blocks of 32 (an odd count: the pairwise AVX-512 dots
        // take their single-block tail).
        const int64_t n_in = q->block_size == 256 ? 512 : 352;
        int64_t n_rand = 17 + int64_t(rng() % 60);
        if (n_rand % 16 == 0) ++n_rand;
        for (int64_t n_out : {int64_t(1), n_rand}) {
            const Problem p = make_problem(*q, n_in, n_out, rng);
            for (DecodeDot mode : {DecodeDot::F32, DecodeDot::Int8, DecodeDot::Int8x2})
                for (bool with_bias : {false, true}) {
                    SCOPED_TRACE(std::string(q->name) + " n_out " + std::to_string(n_out) + " mode " +
                                 std::to_string(int(mode)) + (with_bias ? " bias" : ""));
                    check_batches(Case{*q, p, mode, with_bias ? p.bias.data() : nullptr}, rng, pools);
                }
        }
    }
}

}  // namespace
}  // namespace minfer::cpu
