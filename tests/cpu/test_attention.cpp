// Attention against the double-precision reference (attention_ref), and the reference against cases
// whose answer is known in closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/ops_ref.h"
#include "cpu_test_util.h"

namespace minfer::cpu {
namespace {

using test::kU;
using test::random_floats;

// One block holding all `rows` rows (at least 16): the contiguous layout.
KvRows contiguous(const std::vector<float>& k, const std::vector<float>& v, int64_t stride, int64_t rows) {
    return contiguous_rows(k.data(), v.data(), stride, rows);
}

struct Shape {
    int64_t n_head, n_head_kv, hd, pad;  // pad: extra floats at the end of each KV row (kv_stride slack)
};

// Per-head error budget. Each score is scale * (an f32 dot of hd terms): off by at most
// ds = scale * (hd + 2) kU * max_j sum_d |q_d k_jd| (summation bound plus the scale product). A score
// shift of ds moves every softmax weight by a relative 2 ds at most (numerator and normaliser), so the
// output, a weighted mean of v rows, moves by 2 ds * max|v|. On top: e^x within 4 kU per weight,
// the f32 accumulation of at most 64 weighted rows before folding into f64 (64 kU of sum p_j |v_j|),
// and a few final roundings: 2 ds + 80 kU, relative to max|v|.
double head_budget(const float* qh, const float* k, const float* v, int64_t hd, int64_t stride, int64_t rows,
                   float scale) {
    double max_abs_dot = 0.0, max_v = 0.0;
    for (int64_t j = 0; j < rows; ++j) {
        double s = 0.0;
        for (int64_t d = 0; d < hd; ++d) {
            s += std::fabs(double(qh[d]) * double(k[j * stride + d]));
            max_v = std::max(max_v, std::fabs(double(v[j * stride + d])));
        }
        max_abs_dot = std::max(max_abs_dot, s);
    }
    const double ds = double(scale) * double(hd + 2) * kU * max_abs_dot;
    return (2 * ds + 80 * kU) * max_v;
}

void check_attention(const Shape& s, int64_t rows, float scale, float qk_amp, std::mt19937& rng) {
    const int64_t stride = s.n_head_kv * s.hd + s.pad;
    const auto q = random_floats(rng, s.n_head * s.hd, -qk_amp, qk_amp);
    const auto k = random_floats(rng, rows * stride, -qk_amp, qk_amp);
    const auto v = random_floats(rng, rows * stride, -3.0f, 3.0f);
    std::vector<float> out(q.size()), want(q.size()),
        scratch(static_cast<size_t>(rows * (s.n_head / s.n_head_kv)));
    const KvRows kv = contiguous(k, v, stride, rows);
    attention(q.data(), kv, out.data(), s.n_head, s.n_head_kv, s.hd, 0, rows, scale, scratch.data());
    attention_ref(q.data(), kv, want.data(), s.n_head, s.n_head_kv, s.hd, 0, rows, scale);
    const int64_t group = s.n_head / s.n_head_kv;
    for (int64_t h = 0; h < s.n_head; ++h) {
        const int64_t off = (h / group) * s.hd;
        const double budget =
            head_budget(&q[size_t(h * s.hd)], &k[size_t(off)], &v[size_t(off)], s.hd, stride, rows, scale);
        for (int64_t d = 0; d < s.hd; ++d) {
            const size_t i = size_t(h * s.hd + d);
            ASSERT_LE(std::fabs(out[i] - want[i]), budget)
                << "heads " << s.n_head << "/" << s.n_head_kv << " hd=" << s.hd << " rows=" << rows
                << " h=" << h << " d=" << d;
        }
    }
}

TEST(Attention, MatchesDoubleReference) {
    std::mt19937 rng(11);
    // Groups of 1 to 8 heads per KV head (7: Qwen2.5-0.5B/7B), head dims of 64 and 128 and others (80:
    // the AVX-512 kernel's 16-column tail; 36, 100: not multiples of 16, the AVX2 kernel).
    const Shape shapes[] = {{4, 2, 64, 0},  {8, 4, 128, 0}, {4, 4, 64, 8},  {8, 1, 128, 3}, {2, 1, 36, 0},
                            {4, 2, 100, 5}, {7, 1, 64, 0},  {6, 2, 128, 4}, {3, 1, 80, 0}};
    for (const Shape& s : shapes) {
        for (int64_t rows : {1, 2, 3, 7, 8, 9, 31, 63, 64, 65, 129, 300}) {
            check_attention(s, rows, 1.0f / std::sqrt(float(s.hd)), 1.0f, rng);
        }
    }
}

// Peaked softmax (large scores) and a long context, where accumulation error would grow with the length.
TEST(Attention, PeakedAndLongContext) {
    std::mt19937 rng(12);
    check_attention({8, 4, 128, 0}, 300, 1.0f / std::sqrt(128.0f), 6.0f, rng);
    check_attention({4, 2, 64, 0}, 4096, 1.0f / std::sqrt(64.0f), 1.0f, rng);
    check_attention({4, 2, 64, 0}, 4096, 1.0f / std::sqrt(64.0f), 4.0f, rng);
}

// A sliding window: attention over rows first..rows-1 against the reference, with windows that start on,
// just after and just before the kernels' 8- and 16-row groups; and the reference's window against the
// reference over those rows alone, copied to a region of their own (the same sums, bit for bit).
TEST(Attention, SlidingWindowMatchesReference) {
    std::mt19937 rng(15);
    for (const Shape& s :
         {Shape{4, 2, 64, 0}, Shape{8, 1, 128, 3}, Shape{4, 2, 100, 5}, Shape{3, 1, 80, 0}}) {
        const int64_t stride = s.n_head_kv * s.hd + s.pad, group = s.n_head / s.n_head_kv;
        for (int64_t rows : {5, 16, 33, 100}) {
            const auto q = random_floats(rng, s.n_head * s.hd, -1.0f, 1.0f);
            const auto k = random_floats(rng, rows * stride, -1.0f, 1.0f);
            const auto v = random_floats(rng, rows * stride, -3.0f, 3.0f);
            const KvRows kv = contiguous(k, v, stride, rows);
            for (int64_t first : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{15}, int64_t{17},
                                  rows - 2, rows - 1}) {
                if (first < 0 || first >= rows) continue;
                std::vector<float> out(q.size()), want(q.size()), alone(q.size());
                std::vector<float> scratch(size_t(rows * group));
                attention(q.data(), kv, out.data(), s.n_head, s.n_head_kv, s.hd, first, rows, 0.125f,
                          scratch.data());
                attention_ref(q.data(), kv, want.data(), s.n_head, s.n_head_kv, s.hd, first, rows, 0.125f);
                const std::vector<float> wk(k.begin() + first * stride, k.end()),
                    wv(v.begin() + first * stride, v.end());
                attention_ref(q.data(), contiguous(wk, wv, stride, rows - first), alone.data(), s.n_head,
                              s.n_head_kv, s.hd, 0, rows - first, 0.125f);
                EXPECT_EQ(want, alone) << "rows " << rows << " from " << first;
                for (int64_t h = 0; h < s.n_head; ++h) {
                    const int64_t off = (h / group) * s.hd + first * stride;
                    const double budget = head_budget(&q[size_t(h * s.hd)], &k[size_t(off)], &v[size_t(off)],
                                                      s.hd, stride, rows - first, 0.125f);
                    for (int64_t d = 0; d < s.hd; ++d) {
                        const size_t i = size_t(h * s.hd + d);
                        ASSERT_LE(std::fabs(out[i] - want[i]), budget)
                            << "rows " << rows << " from " << first << " h=" << h << " d=" << d;
                    }
                }
            }
        }
    }
}

// Attention sinks (gpt-oss): a logit per head that joins the softmax's sum and weighs no row. Against the
// reference, with sinks below, among and above the scores; and the reference in closed form: with one
// row, the output is v * e^s / (e^s + e^sink); a sink of -1e30 changes nothing.
TEST(Attention, SinksMatchReference) {
    std::mt19937 rng(16);
    for (const Shape& s : {Shape{4, 2, 64, 0}, Shape{8, 1, 128, 3}, Shape{4, 2, 100, 5}}) {
        const int64_t stride = s.n_head_kv * s.hd + s.pad, group = s.n_head / s.n_head_kv, rows = 40;
        const auto q = random_floats(rng, s.n_head * s.hd, -1.0f, 1.0f);
        const auto k = random_floats(rng, rows * stride, -1.0f, 1.0f);
        const auto v = random_floats(rng, rows * stride, -3.0f, 3.0f);
        const KvRows kv = contiguous(k, v, stride, rows);
        const auto sinks = random_floats(rng, s.n_head, -3.0f, 6.0f);
        std::vector<float> out(q.size()), want(q.size()), plain(q.size()), drowned(q.size());
        std::vector<float> scratch(size_t(rows * group));
        attention(q.data(), kv, out.data(), s.n_head, s.n_head_kv, s.hd, 5, rows, 0.125f, scratch.data(),
                  sinks.data());
        attention_ref(q.data(), kv, want.data(), s.n_head, s.n_head_kv, s.hd, 5, rows, 0.125f, sinks.data());
        for (int64_t h = 0; h < s.n_head; ++h) {
            const int64_t off = (h / group) * s.hd + 5 * stride;
            const double budget = head_budget(&q[size_t(h * s.hd)], &k[size_t(off)], &v[size_t(off)], s.hd,
                                              stride, rows - 5, 0.125f);
            for (int64_t d = 0; d < s.hd; ++d)
                ASSERT_LE(std::fabs(out[size_t(h * s.hd + d)] - want[size_t(h * s.hd + d)]), budget);
        }
        const std::vector<float> none(size_t(s.n_head), -1e30f);
        attention_ref(q.data(), kv, drowned.data(), s.n_head, s.n_head_kv, s.hd, 0, rows, 0.125f,
                      none.data());
        attention_ref(q.data(), kv, plain.data(), s.n_head, s.n_head_kv, s.hd, 0, rows, 0.125f);
        EXPECT_EQ(drowned, plain);
        attention_ref(q.data(), kv, plain.data(), s.n_head, s.n_head_kv, s.hd, 3, 4, 0.125f, sinks.data());
        for (int64_t h = 0; h < s.n_head; ++h) {
            double dot = 0;
            for (int64_t d = 0; d < s.hd; ++d)
                dot += double(q[size_t(h * s.hd + d)]) * k[size_t(3 * stride + (h / group) * s.hd + d)];
            const double sc = 0.125 * dot, w = 1 / (1 + std::exp(double(sinks[size_t(h)]) - sc));
            for (int64_t d = 0; d < s.hd; ++d)
                EXPECT_NEAR(plain[size_t(h * s.hd + d)], w * v[size_t(3 * stride + (h / group) * s.hd + d)],
                            1e-6);
        }
    }
}

// With one row the softmax weight is 1: the output is that row of v. With identical keys the weights
// are uniform: the output is the mean of the v rows.
TEST(Attention, ReferenceClosedForms) {
    std::mt19937 rng(13);
    const int64_t hd = 16, n_head = 4, n_kv = 2, stride = n_kv * hd, rows = 5;
    const auto q = random_floats(rng, n_head * hd, -1.0f, 1.0f);
    auto k = random_floats(rng, rows * stride, -1.0f, 1.0f);
    const auto v = random_floats(rng, rows * stride, -1.0f, 1.0f);
    std::vector<float> out(static_cast<size_t>(n_head * hd));
    attention_ref(q.data(), contiguous(k, v, stride, rows), out.data(), n_head, n_kv, hd, 0, 1, 0.25f);
    for (int64_t h = 0; h < n_head; ++h)
        for (int64_t d = 0; d < hd; ++d) EXPECT_EQ(out[size_t(h * hd + d)], v[size_t((h / 2) * hd + d)]);
    for (int64_t j = 1; j < rows; ++j) std::copy_n(k.begin(), stride, k.begin() + j * stride);
    attention_ref(q.data(), contiguous(k, v, stride, rows), out.data(), n_head, n_kv, hd, 0, rows, 0.25f);
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t d = 0; d < hd; ++d) {
            double mean = 0.0;
            for (int64_t j = 0; j < rows; ++j) mean += v[size_t(j * stride + (h / 2) * hd + d)];
            EXPECT_NEAR(out[size_t(h * hd + d)], mean / rows, 1e-7);
        }
    }
}

// Paged rows: the same logical rows scattered over shuffled blocks of 16 and 32 rows give the contiguous
// layout's result bit for bit (the arithmetic reads rows in logical order whatever their address), for
// the SIMD kernels and the reference alike.
TEST(Attention, PagedRowsMatchContiguousBitForBit) {
    std::mt19937 rng(14);
    for (const Shape& s : {Shape{14, 2, 64, 0}, Shape{8, 4, 128, 0}, Shape{4, 2, 100, 5}}) {
        for (int shift : {4, 5}) {
            for (int64_t rows : {1, 15, 16, 17, 64, 65, 200}) {
                const int64_t stride = s.n_head_kv * s.hd + s.pad, block = int64_t(1) << shift;
                const int64_t n_blocks = (rows + block - 1) / block, slots = (n_blocks + 3) * block;
                const auto q = random_floats(rng, s.n_head * s.hd, -1.0f, 1.0f);
                const auto k = random_floats(rng, rows * stride, -1.0f, 1.0f);
                const auto v = random_floats(rng, rows * stride, -3.0f, 3.0f);
                std::vector<int32_t> table(size_t(n_blocks + 3));
                for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
                std::shuffle(table.begin(), table.end(), rng);
                std::vector<float> pk(size_t(slots * stride)), pv(pk.size());
                const KvRows paged{pk.data(), pv.data(), stride, table.data(), shift};
                for (int64_t j = 0; j < rows; ++j) {
                    std::copy_n(&k[size_t(j * stride)], stride, &pk[size_t(paged.physical(j) * stride)]);
                    std::copy_n(&v[size_t(j * stride)], stride, &pv[size_t(paged.physical(j) * stride)]);
                }
                const KvRows flat = contiguous(k, v, stride, rows);
                std::vector<float> a(q.size()), b(q.size()), ra(q.size()), rb(q.size());
                std::vector<float> scratch(size_t(rows * (s.n_head / s.n_head_kv)));
                for (int64_t first : {int64_t{0}, rows / 3, rows - 1}) {
                    attention(q.data(), flat, a.data(), s.n_head, s.n_head_kv, s.hd, first, rows, 0.125f,
                              scratch.data());
                    attention(q.data(), paged, b.data(), s.n_head, s.n_head_kv, s.hd, first, rows, 0.125f,
                              scratch.data());
                    attention_ref(q.data(), flat, ra.data(), s.n_head, s.n_head_kv, s.hd, first, rows,
                                  0.125f);
                    attention_ref(q.data(), paged, rb.data(), s.n_head, s.n_head_kv, s.hd, first, rows,
                                  0.125f);
                    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
                        << rows << " " << shift << " from " << first;
                    EXPECT_EQ(0, std::memcmp(ra.data(), rb.data(), ra.size() * sizeof(float)));
                }
            }
        }
    }
}

}  // namespace
}  // namespace minfer::cpu
