// Internal to the int8x2 SIMD files (quants_q8_avx2.cpp, quants_q8_avx512.cpp): the plumbing that turns
// one kernel template over the column count NC into vec_dot_x2 (its NC = 1 instance) and vec_dot_x2_cols.
// A kernel K has `template <int NC> static void run(const void* w, Cols xs, int64_t n, float* out)`.
//
// Everything here is in an anonymous namespace on purpose: each SIMD file gets its own copy, compiled
// with its own flags, which the linker never hands to code of another file (see quants_impl.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "quant/quants.h"

namespace minfer::quants {
namespace {

// Activation rows of the columns one call dots: row c at xq + c * stride.
struct Cols {
    const char* xq;
    size_t stride;
    const void* operator[](int c) const { return xq + size_t(c) * stride; }
};

// kernel(std::integral_constant<int, NC>) for NC = ncols (1..kX2MaxCols): every column count gets its own
// unrolled kernel, with its accumulators in registers.
template <class F>
inline void by_cols(int ncols, F&& kernel) {
    static_assert(kX2MaxCols == 4);
    switch (ncols) {
        case 1:
            return kernel(std::integral_constant<int, 1>{});
        case 2:
            return kernel(std::integral_constant<int, 2>{});
        case 3:
            return kernel(std::integral_constant<int, 3>{});
        default:
            return kernel(std::integral_constant<int, 4>{});
    }
}

// vec_dot_x2 is the one-column instance of the vec_dot_x2_cols kernel, so the two give the same bits.
template <class K>
float dot_one(const void* w, const void* xq, int64_t n) {
    float out;
    K::template run<1>(w, Cols{static_cast<const char*>(xq), 0}, n, &out);
    return out;
}

template <class K>
void dot_cols(const void* w, const void* xq, size_t stride, int64_t n, int ncols, float* out) {
    by_cols(ncols, [&](auto nc) {
        K::template run<nc()>(w, Cols{static_cast<const char*>(xq), stride}, n, out);
    });
}

}  // namespace
}  // namespace minfer::quants
