// Randomized op-vs-reference tests for the element-wise kernels and rope. Each error budget is written
// in f32 unit roundoffs (kU) and derived next to the check.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/ops_ref.h"
#include "cpu_test_util.h"

namespace minfer::cpu {
namespace {

using test::kU;
using test::random_floats;

const int64_t kSizes[] = {1, 3, 7, 8, 9, 15, 16, 31, 32, 33, 100, 257, 896, 1000, 4099};

// add/mul are one IEEE operation per element in both versions, so they must agree bit for bit.
TEST(Ops, AddMulExact) {
    std::mt19937 rng(1);
    for (int64_t n : kSizes) {
        const auto a = random_floats(rng, n, -100.0f, 100.0f), b = random_floats(rng, n, -100.0f, 100.0f);
        std::vector<float> y(static_cast<size_t>(n)), r(static_cast<size_t>(n));
        add(a.data(), b.data(), y.data(), n);
        add_ref(a.data(), b.data(), r.data(), n);
        EXPECT_EQ(y, r) << "add n=" << n;
        mul(a.data(), b.data(), y.data(), n);
        mul_ref(a.data(), b.data(), r.data(), n);
        EXPECT_EQ(y, r) << "mul n=" << n;
    }
}

// Budget: the f32 sum of squares runs 32 lanes of n/32 terms, then folds lanes (5 levels) and a tail of
// < 8 terms: relative error <= (n/32 + 12) kU. sqrt halves it; mean, +eps, sqrt, divide and the two output
// multiplies add one rounding each, and the reference's final rounding another: (n/64 + 16) kU covers it.
// The first maximum, as the plain loop finds it, around the 1024-element blocks and 16 lanes, with
// ties inside and across blocks and rows of -inf.
TEST(Ops, ArgmaxMatchesReference) {
    std::mt19937 rng(19);
    std::uniform_int_distribution<int> level(-3, 3);  // few values: many ties
    std::normal_distribution<float> wide(0.0f, 2.0f);
    for (const int64_t n : {1, 15, 16, 17, 1024, 1025, 4097, 151936})
        for (int rep = 0; rep < 6; ++rep) {
            std::vector<float> x(static_cast<size_t>(n));
            for (float& v : x) v = rep == 5 ? -INFINITY : rep % 2 ? float(level(rng)) : wide(rng);
            if (rep == 3) x[size_t(n) - 1] = 10.0f;
            EXPECT_EQ(cpu::argmax(x.data(), n), cpu::argmax_ref(x.data(), n)) << "n " << n << " rep " << rep;
        }
}

TEST(Ops, RmsNormMatchesReference) {
    std::mt19937 rng(2);
    for (int64_t n : kSizes) {
        for (float amp : {1e-3f, 1.0f, 300.0f}) {
            const auto x = random_floats(rng, n, -amp, amp), w = random_floats(rng, n, -2.0f, 2.0f);
            std::vector<float> y(static_cast<size_t>(n)), r(static_cast<size_t>(n));
            rms_norm(x.data(), w.data(), y.data(), n, 1e-6f);
            rms_norm_ref(x.data(), w.data(), r.data(), n, 1e-6f);
            const double budget = (double(n) / 64 + 16) * kU;
            for (int64_t i = 0; i < n; ++i)
                ASSERT_LE(std::fabs(y[size_t(i)] - r[size_t(i)]), budget * std::fabs(r[size_t(i)]) + 1e-30)
                    << "n=" << n << " amp=" << amp << " i=" << i;
        }
    }
}

// Budget: e^-x is good to 4 kU (Taylor truncation < 6e-9 plus Horner roundings), 1 + e^-x and the
// division add a rounding each, swiglu's product one more, the reference's rounding to f32 half of one:
// 8 kU relative. The absolute 1e-30 only matters where |silu| < 1e-36, where e^-x is clamped at e^88.
void check_silu(const std::vector<float>& x, const std::vector<float>& u) {
    const int64_t n = int64_t(x.size());
    std::vector<float> y(x.size()), r(x.size());
    silu(x.data(), y.data(), n);
    silu_ref(x.data(), r.data(), n);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(std::fabs(y[size_t(i)] - r[size_t(i)]), 8 * kU * std::fabs(r[size_t(i)]) + 1e-30)
            << "silu n=" << n << " x=" << x[size_t(i)];
    swiglu(x.data(), u.data(), y.data(), n);
    swiglu_ref(x.data(), u.data(), r.data(), n);
    for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(std::fabs(y[size_t(i)] - r[size_t(i)]), 8 * kU * std::fabs(r[size_t(i)]) + 1e-30)
            << "swiglu n=" << n << " x=" << x[size_t(i)] << " u=" << u[size_t(i)];
}

TEST(Ops, SiluSwigluMatchReference) {
    std::mt19937 rng(3);
    for (int64_t n : kSizes)
        check_silu(random_floats(rng, n, -20.0f, 20.0f), random_floats(rng, n, -5.0f, 5.0f));
    for (int64_t n : kSizes)
        check_silu(random_floats(rng, n, -0.01f, 0.01f), random_floats(rng, n, -5.0f, 5.0f));
    const std::vector<float> extremes = {-1000.0f, -100.0f, -88.5f, -88.0f, -87.0f, -50.0f, -1e-30f, 0.0f,
                                         1e-30f,   50.0f,   87.0f,  88.0f,  88.5f,  100.0f, 1000.0f};
    check_silu(extremes, std::vector<float>(extremes.size(), 1.5f));
}

// Budget, relative: z = sqrt(2/pi) (x + 0.044715 x^3) in f32 is off by at most 4 kU |z|, which moves
// e^(2z) by 8 kU |z| relative and the factor f = e^(2z) / (e^(2z) + 1) by (1 - f) times that; e^x itself 4
// kU, the division, the two products and the reference's rounding 4 more: (12 + 8 |z|) kU. The absolute
// 1e-30 covers the clamped exponential (2z < -87), where gelu(x) is below |x| e^-87.
void check_geglu(const std::vector<float>& x, const std::vector<float>& u) {
    const int64_t n = int64_t(x.size());
    std::vector<float> y(x.size()), r(x.size());
    geglu(x.data(), u.data(), y.data(), n);
    geglu_ref(x.data(), u.data(), r.data(), n);
    for (int64_t i = 0; i < n; ++i) {
        const double xi = x[size_t(i)];
        const double z = std::fabs(0.7978845608028654 * (xi + 0.044715 * xi * xi * xi));
        ASSERT_LE(std::fabs(y[size_t(i)] - r[size_t(i)]), (12 + 8 * z) * kU * std::fabs(r[size_t(i)]) + 1e-30)
            << "geglu n=" << n << " x=" << x[size_t(i)] << " u=" << u[size_t(i)];
    }
}

TEST(Ops, GegluMatchesReference) {
    std::mt19937 rng(5);
    for (int64_t n : kSizes)
        check_geglu(random_floats(rng, n, -20.0f, 20.0f), random_floats(rng, n, -5.0f, 5.0f));
    for (int64_t n : kSizes)
        check_geglu(random_floats(rng, n, -0.01f, 0.01f), random_floats(rng, n, -5.0f, 5.0f));
    const std::vector<float> extremes = {-1000.0f, -100.0f, -20.0f, -9.0f, -3.0f,  -1e-30f, 0.0f,
                                         1e-30f,   3.0f,    9.0f,   20.0f, 100.0f, 1000.0f};
    check_geglu(extremes, std::vector<float>(extremes.size(), 1.5f));
}

// The reference against values known in closed form: gelu(0) = 0, gelu(x) -> x for large x and -> 0 for
// very negative x, and gelu(1) = 0.841191990607...
TEST(Ops, GegluReferenceClosedForms) {
    const std::vector<float> x = {0.0f, 1.0f, 30.0f, -30.0f}, u(4, 1.0f);
    std::vector<float> y(4);
    geglu_ref(x.data(), u.data(), y.data(), 4);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_NEAR(y[1], 0.8411919906082768, 1e-7);
    EXPECT_EQ(y[2], 30.0f);
    EXPECT_EQ(y[3], 0.0f);
}

// Straight from the definition, all in double: pair (i0, i1) rotated by theta_i = pos * base^(-2i/n_rot).
std::vector<double> rope_naive(const std::vector<float>& x, int64_t n_head, int64_t hd, int64_t n_rot,
                               int32_t pos, double base, bool neox) {
    std::vector<double> y(x.begin(), x.end());
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t i = 0; i < n_rot / 2; ++i) {
            const double theta = pos * std::exp(-2.0 * double(i) / double(n_rot) * std::log(base));
            const size_t i0 = size_t(h * hd + (neox ? i : 2 * i));
            const size_t i1 = size_t(h * hd + (neox ? i + n_rot / 2 : 2 * i + 1));
            y[i0] = x[i0] * std::cos(theta) - x[i1] * std::sin(theta);
            y[i1] = x[i0] * std::sin(theta) + x[i1] * std::cos(theta);
        }
    }
    return y;
}

// Budget against the naive double formula: cos and sin are rounded to f32 (kU each), then a*c - b*s
// costs two products and a difference: every output is within 4 kU * (|a| + |b|) of the exact rotation.
// rope() and rope_ref() do the same arithmetic in a different loop order, so they agree exactly.
TEST(Ops, RopeMatchesNaiveFormula) {
    std::mt19937 rng(4);
    for (bool neox : {false, true}) {
        for (int64_t hd : {64, 128}) {
            for (int64_t n_rot : {hd, hd / 2}) {
                for (int32_t pos : {0, 1, 17, 4095, 100000}) {
                    const int64_t n_head = 3;
                    const auto x = random_floats(rng, n_head * hd, -4.0f, 4.0f);
                    auto y = x, r = x;
                    rope(y.data(), n_head, hd, n_rot, pos, {1e6f}, neox);
                    rope_ref(r.data(), n_head, hd, n_rot, pos, {1e6f}, neox);
                    EXPECT_EQ(y, r) << "neox=" << neox << " hd=" << hd << " n_rot=" << n_rot
                                    << " pos=" << pos;
                    const auto want = rope_naive(x, n_head, hd, n_rot, pos, 1e6, neox);
                    for (size_t i = 0; i < x.size(); ++i) {
                        const size_t in_head = i % size_t(hd);
                        const size_t partner = neox ? (in_head < size_t(n_rot / 2) ? i + size_t(n_rot / 2)
                                                                                   : i - size_t(n_rot / 2))
                                                    : (i ^ 1);
                        const double budget = in_head < size_t(n_rot)
                                                  ? 4 * kU * (std::fabs(x[i]) + std::fabs(x[partner]))
                                                  : 0.0;
                        ASSERT_LE(std::fabs(y[i] - want[i]), budget)
                            << "neox=" << neox << " hd=" << hd << " n_rot=" << n_rot << " pos=" << pos
                            << " i=" << i;
                    }
                }
            }
        }
    }
}

// Linear RoPE scaling multiplies the position: at scale 1/2, position 2p turns exactly as p does unscaled
// (2p / 2 = p is exact, so the angles are the same doubles), and position 2p + 1 differently.
TEST(Ops, RopeScaleDividesThePosition) {
    std::mt19937 rng(6);
    for (bool neox : {false, true}) {
        for (int32_t pos : {1, 17, 4095}) {
            const auto x = random_floats(rng, 2 * 64, -4.0f, 4.0f);
            auto scaled = x, plain = x, odd = x, odd_ref = x;
            rope(scaled.data(), 2, 64, 64, 2 * pos, {1e6f, 0.5f}, neox);
            rope(plain.data(), 2, 64, 64, pos, {1e6f}, neox);
            EXPECT_EQ(scaled, plain) << pos;
            rope(odd.data(), 2, 64, 64, 2 * pos + 1, {1e6f, 0.5f}, neox);
            rope_ref(odd_ref.data(), 2, 64, 64, 2 * pos + 1, {1e6f, 0.5f}, neox);
            EXPECT_EQ(odd, odd_ref);
            EXPECT_NE(odd, plain);
        }
    }
}

// YaRN against HF transformers' construction, written out here in double: inv_freq = interpolation *
// (1 - e) + extrapolation * e, e = 1 - clamp((i - low) / (high - low)), interpolation = extrapolation /
// factor; cos and sin times 0.1 ln(factor) + 1. gpt-oss's numbers: base 150000, factor 32, original
// context 4096, betas 32 and 1, head_dim 64 (low 8.09, high 17.40). Budget as the naive formula's.
TEST(Ops, RopeYarnMatchesItsConstruction) {
    std::mt19937 rng(7);
    const int64_t hd = 64, half = hd / 2;
    const double base = 150000, factor = 32, pi = 3.14159265358979323846;
    const auto dim = [&](double rot) { return hd * std::log(4096 / (rot * 2 * pi)) / (2 * std::log(base)); };
    const double low = dim(32), high = dim(1), mscale = 0.1 * std::log(factor) + 1;
    const RopeFreq f{float(base), float(1 / factor), low, high, mscale};
    for (int32_t pos : {0, 1, 37, 4095, 70000}) {
        const auto x = random_floats(rng, hd, -4.0f, 4.0f);
        auto y = x, r = x;
        rope(y.data(), 1, hd, hd, pos, f, true);
        rope_ref(r.data(), 1, hd, hd, pos, f, true);
        EXPECT_EQ(y, r);
        for (int64_t i = 0; i < half; ++i) {
            const double extrap = std::pow(base, -2.0 * double(i) / hd), interp = extrap / factor;
            const double e = 1 - std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
            const double theta = pos * (interp * (1 - e) + extrap * e);
            const double c = std::cos(theta) * mscale, s = std::sin(theta) * mscale;
            const double a = x[size_t(i)], b = x[size_t(i + half)];
            const double budget = 4 * kU * mscale * (std::fabs(a) + std::fabs(b));
            EXPECT_NEAR(y[size_t(i)], a * c - b * s, budget) << pos << " " << i;
            EXPECT_NEAR(y[size_t(i + half)], a * s + b * c, budget) << pos << " " << i;
        }
    }
}

TEST(Ops, RopePositionZeroIsIdentity) {
    std::mt19937 rng(5);
    const auto x = random_floats(rng, 2 * 128, -1.0f, 1.0f);
    for (bool neox : {false, true}) {
        auto y = x;
        rope(y.data(), 2, 128, 128, 0, {10000.0f}, neox);
        EXPECT_EQ(y, x);
    }
}

}  // namespace
}  // namespace minfer::cpu
