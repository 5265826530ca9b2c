// Dequantization of whole GGUF-layout matrices to f32 / half (for the cuBLAS prefill GEMM) and gathers of
// dequantized rows (embedding lookups). Each warp decodes one warp step of one row (see quant_blocks.cuh):
// fully parallel, every value bit-exact with the CPU reference to_float_ref (then rounded to nearest
// even for half).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "backend/cuda/cuda_util.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_blocks.cuh"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_tiled.h"

namespace minfer::cuda {
namespace qblocks {

void check_layout(GgmlType t, int64_t n_in, const void* p, int align, const char* what) {
    const GgmlTypeLayout l = ggml_type_layout(t);
    if (l.block_size <= 0 || n_in % l.block_size != 0)
        throw Error(std::string("CUDA ") + what + ": row length " + std::to_string(n_in) +
                    " is not a whole number of " + ggml_type_name(t) + " blocks");
    if (reinterpret_cast<uintptr_t>(p) % uintptr_t(align) != 0)
        throw Error(std::string("CUDA ") + what + ": pointer not " + std::to_string(align) + "-byte aligned");
}

}  // namespace qblocks

namespace {

using namespace qblocks;

constexpr int kWarps = 8;

// Stores N consecutive values, 16 bytes at a time where N of them fill 16 bytes (p then 16-byte aligned:
// the groups' offsets in a block are multiples of N).
template <int N>
__device__ __forceinline__ void store(float* p, const float (&v)[N]) {
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4)
            *reinterpret_cast<float4*>(p + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) p[i] = v[i];
    }
}

__device__ __forceinline__ uint32_t half2_bits(float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
}

template <int N>
__device__ __forceinline__ void store(__half* p, const float (&v)[N]) {
    if constexpr (N % 8 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 8)
            *reinterpret_cast<uint4*>(p + i) =
                make_uint4(half2_bits(v[i], v[i + 1]), half2_bits(v[i + 2], v[i + 3]),
                           half2_bits(v[i + 4], v[i + 5]), half2_bits(v[i + 6], v[i + 7]));
    } else if constexpr (N == 4) {
        *reinterpret_cast<uint2*>(p) = make_uint2(half2_bits(v[0], v[1]), half2_bits(v[2], v[3]));
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) p[i] = __float2half_rn(v[i]);
    }
}

// Copies n values from shared memory to global memory, 16 bytes per lane and instruction where `dst` is
// 16-byte aligned and n fills whole 16-byte words (one warp, all lanes calling).
template <class Out>
__device__ __forceinline__ void copy_out(const Out* src, Out* dst, int n, int lane) {
    constexpr int kPer = 16 / int(sizeof(Out));
    if (n % kPer == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
        for (int i = lane; i < n / kPer; i += 32)
            reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    } else {
        for (int i = lane; i < n; i += 32) dst[i] = src[i];
    }
}

// out[t] = row (ids ? ids[t] : t) of w, for t < n_rows; one warp step per warp. The lanes decode their
// groups into the warp's slice of shared memory (adjacent groups together), then the warp writes the
// step's values out contiguously, 512 bytes per instruction.
template <class D, class Out>
__global__ void __launch_bounds__(kWarps * 32)
    dequant_kernel(const uint8_t* w, int64_t n_in, int64_t row_bytes, const int32_t* ids, int64_t n_rows,
                   Out* out) {
    begin_kernel();
    constexpr int kBlocksPerWarp = 32 / D::kLanes, kStepElems = kBlocksPerWarp * D::kElems;
    __shared__ __align__(16) Out stage[kWarps][kStepElems];
    const int64_t nb = n_in / D::kElems;
    const int64_t steps = (nb + kBlocksPerWarp - 1) / kBlocksPerWarp;
    const int64_t gw = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32, sub = lane % D::kLanes, warp = threadIdx.x / 32;
    const int64_t t = gw / steps, b0 = gw % steps * kBlocksPerWarp, b = b0 + lane / D::kLanes;
    if (t >= n_rows) return;  // the same for the whole warp
    if (b < nb) {
        const int64_t r = ids ? int64_t(ids[t]) : t;
        const typename D::Raw raw = D::load(w + r * row_bytes + b * D::kBytes, sub);
        const typename D::Scales sc = D::scales(raw, sub);
        Out* block = stage[warp] + (lane / D::kLanes) * D::kElems;
#pragma unroll
        for (int g0 = 0; g0 < D::kGroups; g0 += D::kContig) {  // kContig adjacent groups, stored at once
            float v[D::kContig * D::kWidth];
#pragma unroll
            for (int c = 0; c < D::kContig; ++c)
                D::group(raw, sc, sub, g0 + c, reinterpret_cast<float(&)[D::kWidth]>(v[c * D::kWidth]));
            store<D::kContig * D::kWidth>(block + D::offset(sub, g0), v);
        }
    }
    __syncwarp();
    const int n = int(min(int64_t(kBlocksPerWarp), nb - b0)) * D::kElems;
    copy_out(stage[warp], out + t * n_in + b0 * D::kElems, n, lane);
}

// Block j of `raw` (kRaw bytes, 2-byte aligned) into bytes [kPad j, kPad j + kRaw) of dst, zeros after:
// one thread per 16-bit word of dst.
template <int kRaw, int kPad>
__global__ void pad_kernel(const uint16_t* raw, int64_t blocks, uint16_t* dst) {
    begin_kernel();
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= blocks * (kPad / 2)) return;
    const int64_t j = k / (kPad / 2), h = k % (kPad / 2);
    dst[k] = h < kRaw / 2 ? raw[j * (kRaw / 2) + h] : uint16_t(0);
}

template <class Out>
void run(const QMatrix& w, const int32_t* ids, int64_t n_rows, Out* out, Stream s, const char* what) {
    with_decoder(w.type, w.n_in, w.padded, [&](auto d) {
        using D = decltype(d);
        check_layout(w.type, w.n_in, w.data, 16, what);
        check_layout(w.type, w.n_in, out, int(sizeof(Out)), what);
        const int64_t nb = w.n_in / D::kElems;
        const int64_t steps = (nb + 32 / D::kLanes - 1) / (32 / D::kLanes);
        const int64_t blocks = (n_rows * steps + kWarps - 1) / kWarps;
        if (blocks == 0) return;
        launch("dequant kernel", dequant_kernel<D, Out>, unsigned(blocks), kWarps * 32, 0, s,
               static_cast<const uint8_t*>(w.data), w.n_in, row_bytes<D>(w.n_in), ids, n_rows, out);
    });
}

}  // namespace

bool quant_supported(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
        case GgmlType::F16:
        case GgmlType::BF16:
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::IQ4_NL:
        case GgmlType::IQ4_XS:
        case GgmlType::MXFP4:
            return true;
        default:
            return false;
    }
}

bool pads_fit(GgmlType t) {
    return t == GgmlType::Q6_K;
}

int64_t padded_row_bytes(GgmlType t, int64_t n_in) {
    if (!pads_fit(t)) throw Error(std::string("padded_row_bytes: no padded layout for ") + ggml_type_name(t));
    return row_bytes<DecQ6KT<true>>(n_in);
}

void pad_matrix(const QMatrix& raw, void* dst, Stream s) {
    if (raw.tiled || raw.padded || !pads_fit(raw.type))
        throw Error("pad_matrix: not a Q6_K matrix in the block layout");
    check_layout(raw.type, raw.n_in, raw.data, 2, "pad_matrix");
    check_layout(raw.type, raw.n_in, dst, 16, "pad_matrix");
    using Raw = DecQ6KT<false>;
    using Pad = DecQ6KT<true>;
    const int64_t blocks = raw.n_in / Raw::kElems * raw.n_out, words = blocks * (Pad::kBytes / 2);
    if (blocks > 0)
        launch("pad kernel", pad_kernel<Raw::kBytes, Pad::kBytes>, unsigned((words + 255) / 256), 256, 0, s,
               static_cast<const uint16_t*>(raw.data), blocks, static_cast<uint16_t*>(dst));
}

void dequant_f16(const QMatrix& w, void* out, Stream s) {
    if (w.tiled) return dequant_tiled_f16(w, out, s);
    run(w, nullptr, w.n_out, static_cast<__half*>(out), s, "dequant_f16");
}

void dequant_f32(const QMatrix& w, float* out, Stream s) {
    if (w.tiled) return dequant_tiled_f32(w, out, s);
    run(w, nullptr, w.n_out, out, s, "dequant_f32");
}

void get_rows(const QMatrix& w, const int32_t* ids, int64_t nt, float* out, Stream s) {
    if (w.tiled) throw Error("CUDA get_rows: tiled matrices are not supported");
    run(w, ids, nt, out, s, "get_rows");
}

}  // namespace minfer::cuda
