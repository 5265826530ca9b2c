// util/fp16.h: exact half and bfloat16 conversions, checked exhaustively over all 16-bit patterns,
// and round-to-nearest-even at every midpoint between neighbouring representable values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "util/fp16.h"

namespace minfer {
namespace {

// Value of a half from its fields, computed independently in double: (-1)^s * 2^(e - 15) * 1.m for
// normals, 2^-14 * 0.m for subnormals.
double half_value(uint16_t h) {
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), e - 25);
    return (h & 0x8000) ? -mag : mag;
}

bool half_is_nan(uint16_t h) {
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

TEST(Fp16, ToF32IsExactForEveryPattern) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t h = uint16_t(i);
        const float f = fp16_to_f32(h);
        if (half_is_nan(h)) {
            EXPECT_TRUE(std::isnan(f)) << i;
        } else if ((h & 0x7fff) == 0x7c00) {
            EXPECT_TRUE(std::isinf(f)) << i;
            EXPECT_EQ(std::signbit(f), bool(h & 0x8000)) << i;
        } else {
            ASSERT_EQ(double(f), half_value(h)) << "pattern " << i;
            ASSERT_EQ(std::signbit(f), bool(h & 0x8000)) << "pattern " << i;  // keeps -0
        }
    }
}

TEST(Fp16, RoundTripsEveryPattern) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t h = uint16_t(i);
        const uint16_t back = f32_to_fp16(fp16_to_f32(h));
        if (half_is_nan(h)) {
            EXPECT_TRUE(half_is_nan(back)) << i;
        } else {
            ASSERT_EQ(back, h) << "pattern " << i;
        }
    }
}

// For every pair of neighbours (h, h + 1) of either sign, subnormals included: the exact midpoint (which
// needs 12 significant bits, exact in float) goes to the even one, and the floats just either side of it
// go to the nearer neighbour. The last pair is (65504, inf): its midpoint 65520 overflows to infinity.
TEST(Fp16, RoundsToNearestEvenAtEveryMidpoint) {
    for (uint16_t sign : {uint16_t(0), uint16_t(0x8000)}) {
        for (uint32_t m = 0; m < 0x7c00; ++m) {
            const uint16_t lo = uint16_t(sign | m), hi = uint16_t(sign | (m + 1));
            const double mid_d =
                (half_value(lo) + (m + 1 == 0x7c00 ? (sign ? -65536.0 : 65536.0) : half_value(hi))) / 2;
            const float mid = float(mid_d);
            ASSERT_EQ(double(mid), mid_d);
            const float toward_lo = std::nextafter(mid, sign ? 1.0f : -1.0f);
            const float toward_hi = std::nextafter(mid, sign ? -INFINITY : INFINITY);
            ASSERT_EQ(f32_to_fp16(mid), (m & 1) ? hi : lo) << "midpoint above pattern " << lo;
            ASSERT_EQ(f32_to_fp16(toward_lo), lo) << "just below midpoint above " << lo;
            ASSERT_EQ(f32_to_fp16(toward_hi), hi) << "just above midpoint above " << lo;
        }
    }
}

TEST(Fp16, SpecialValues) {
    EXPECT_EQ(f32_to_fp16(0.0f), 0x0000);
    EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(f32_to_fp16(INFINITY), 0x7c00);
    EXPECT_EQ(f32_to_fp16(-INFINITY), 0xfc00);
    EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_fp16(-1e10f), 0xfc00);
    EXPECT_EQ(f32_to_fp16(1e-10f), 0x0000);  // below half the smallest subnormal
    EXPECT_EQ(f32_to_fp16(-1e-10f), 0x8000);
    EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
    EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
    EXPECT_EQ(f32_to_fp16(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
    // NaN stays NaN (a payload only in the low float bits must not turn into infinity); sign kept.
    EXPECT_TRUE(half_is_nan(f32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_TRUE(half_is_nan(f32_to_fp16(f32_from_bits(0x7f800001u))));
    EXPECT_EQ(f32_to_fp16(f32_from_bits(0xffc00000u)) & 0x8000, 0x8000);
}

TEST(Bf16, ToF32IsTheTopHalfOfTheFloat) {
    for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(f32_bits(bf16_to_f32(uint16_t(i))), i << 16) << i;
}

TEST(Bf16, RoundTripsEveryPattern) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const uint16_t h = uint16_t(i);
        const uint16_t back = f32_to_bf16(bf16_to_f32(h));
        if (std::isnan(bf16_to_f32(h))) {
            EXPECT_TRUE(std::isnan(bf16_to_f32(back))) << i;
        } else {
            ASSERT_EQ(back, h) << "pattern " << i;
        }
    }
}

// Midpoint between neighbours (h, h + 1) is the float with bits (h << 16) | 0x8000, for either sign and
// through subnormals; the last positive pair (max finite, inf) rounds its midpoint up to infinity.
TEST(Bf16, RoundsToNearestEvenAtEveryMidpoint) {
    for (uint32_t sign : {0u, 0x8000u}) {
        for (uint32_t m = 0; m < 0x7f80; ++m) {
            const uint32_t lo = sign | m;
            const uint32_t mid = (lo << 16) | 0x8000;
            ASSERT_EQ(f32_to_bf16(f32_from_bits(mid)), (m & 1) ? lo + 1 : lo) << "midpoint above " << lo;
            ASSERT_EQ(f32_to_bf16(f32_from_bits(mid - 1)), lo) << "just below midpoint above " << lo;
            ASSERT_EQ(f32_to_bf16(f32_from_bits(mid + 1)), lo + 1) << "just above midpoint above " << lo;
        }
    }
}

TEST(Bf16, SpecialValues) {
    EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
    EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
    EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_from_bits(0x7f800001u)))));  // not infinity
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f32_from_bits(0xffffffffu)))));  // no carry into sign
}

}  // namespace
}  // namespace minfer
