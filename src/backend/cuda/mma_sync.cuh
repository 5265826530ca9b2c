// The f16 tensor-core instruction the kernels share (quant_mma_f16.cu, attn_prefill_mma.cu): one warp's
// m16n8k16 product, f16 operands and f32 accumulators. Fragments as the PTX ISA lays them out: lane
// (g = lane / 4, t = lane % 4) holds a[0..3] = A rows g, g + 8, g, g + 8 at k 2t, 2t + 1 (+ 8 for a[2],
// a[3]); b0, b1 = B column g at k 2t, 2t + 1 and 2t + 8, 2t + 9; c[e] = row g + 8 (e / 2), column
// 2t + e % 2.
#pragma once
#include <cstdint>

namespace minfer::cuda {

__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace minfer::cuda
