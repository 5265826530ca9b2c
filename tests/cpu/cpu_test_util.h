// Shared helpers for the CPU kernel tests: seeded random data and the f32 unit roundoff that the
// error budgets are written in.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace minfer::test {

constexpr double kU = 0x1p-24;  // f32 unit roundoff: one rounding changes a value by at most kU relatively

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(size_t(n > 0 ? n : 0));
    for (auto& x : v) x = dist(rng);
    return v;
}

}  // namespace minfer::test
