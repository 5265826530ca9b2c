// IEEE half and bfloat16 <-> float conversions (scalar, exact; round-to-nearest-even on the way down).
#pragma once
#include <cstdint>
#include <cstring>

namespace minfer {

inline float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float fp16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
        const float v = float(mant) * (1.0f / 16777216.0f);
        return (h & 0x8000) ? -v : v;
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // overflow -> inf
    if (ax < 0x38800000u) {                                 // subnormal or zero in half
        const float v = f32_from_bits(ax) * 16777216.0f;    // scale to units of 2^-24
        const uint32_t m = uint32_t(__builtin_nearbyintf(v));
        return uint16_t(sign | m);
    }
    const uint32_t rounded = ax + 0x0fff + ((ax >> 13) & 1);
    return uint16_t(sign | ((rounded - (112u << 23)) >> 13));
}

inline float bf16_to_f32(uint16_t h) {
    return f32_from_bits(uint32_t(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet NaN
    return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

}  // namespace minfer
