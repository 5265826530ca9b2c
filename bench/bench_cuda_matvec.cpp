// Decode matrix-vector throughput on the GPU, per weight type and layer shape, with cold caches: each
// timed call reads a different copy of the matrix, and the copies together exceed the L2 cache. Prints
// the weight bytes streamed per second and its fraction of the device-to-device copy bandwidth measured
// in the same run (read + write bytes / time), the practical ceiling of a streaming kernel.
//
//   bench_cuda_matvec [iterations] [shape] [type] [warm]   (shape and type, e.g. 7b.gate_up Q4_K, select
//   rows; "" for all; warm: every call reads the same copy, so a matrix smaller than L2 is read from L2)
//
// Q4_K shapes that fit the tiled layout get a second row, "Q4_K/t": the tensor-core kernels, and one for
// the int8 kernels with x staged by every block, "Q4_K/i" (one level) and "/i2" (two), and with x quantized
// once, "/o" and "/o2"; Q6_K one in the padded layout, "Q6_K/p", and the same int8 rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/quant_cuda.h"
#include "cuda_bench_util.h"
#include "quant/quants.h"

namespace {

using namespace minfer;
using cuda_bench::check;
using cuda_bench::host_matrix;

struct Shape {
    const char* name;
    int64_t n_in, n_out;
    bool swiglu;
};

// Qwen2.5-7B's decode matrices (FusedQKV, O, FusedFFN gate|up, down, lm_head) and Qwen2.5-0.5B's FFN.
const Shape kShapes[] = {{"7b.qkv", 3584, 4608, false},       {"7b.o", 3584, 3584, false},
                         {"7b.gate_up", 3584, 18944, true},   {"7b.down", 18944, 3584, false},
                         {"7b.lm_head", 3584, 152064, false}, {"0.5b.gate_up", 896, 4864, true},
                         {"0.5b.down", 4864, 896, false},     {"1.5b.qkv", 1536, 2048, false},
                         {"1.5b.o", 1536, 1536, false},       {"1.5b.gate_up", 1536, 8960, true},
                         {"1.5b.down", 8960, 1536, false}};

const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0,
                           GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::F16};

double copy_bandwidth(cudaStream_t s) {
    const size_t n = size_t(1) << 30;
    void *a, *b;
    check(cudaMalloc(&a, n));
    check(cudaMalloc(&b, n));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0), cudaEventCreate(&e1);
    check(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
    cudaEventRecord(e0, s);
    for (int i = 0; i < 10; ++i) check(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
    cudaEventRecord(e1, s);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    cudaFree(a), cudaFree(b);
    return 2.0 * 10 * double(n) / (ms * 1e-3);
}

// Int8 layouts: x staged by every block or quantized once (Once), one level or two (X2).
enum class Layout { kBlocks, kTiled, kPadded, kInt8, kInt8Once, kInt8X2, kInt8X2Once };

// The matrix in the block layout, or as the backend uploads Q4_K (tile_matrix, read by the tensor-core
// kernels; or taking x as int8, read by the int8 kernels with x staged by each block or quantized once by
// quantize_x8, whose time counts) or Q6_K (pad_matrix). Bandwidth counts the bytes
// read, padding included.
void bench(const Shape& sh, GgmlType t, Layout layout, int iters, double peak, bool warm, cudaStream_t s,
           std::mt19937& rng) {
    const bool once = layout == Layout::kInt8Once || layout == Layout::kInt8X2Once;
    const bool x2 = layout == Layout::kInt8X2 || layout == Layout::kInt8X2Once;
    const bool i8 = once || x2 || layout == Layout::kInt8;
    const cuda::XQuant xq = !i8 ? cuda::XQuant::kF32 : x2 ? cuda::XQuant::kInt8x2 : cuda::XQuant::kInt8;
    const bool tiled = layout == Layout::kTiled,
               padded = layout == Layout::kPadded || (i8 && t == GgmlType::Q6_K);
    const std::vector<uint8_t> host = host_matrix(t, sh.n_in, sh.n_out, rng);
    const size_t stored = padded ? size_t(cuda::padded_row_bytes(t, sh.n_in) * sh.n_out) : host.size();
    const int64_t parts = sh.swiglu ? 2 : 1, bytes = int64_t(stored) * parts;
    const int copies = warm ? 1 : int(std::max<int64_t>(2, (int64_t(512) << 20) / bytes + 1));
    std::vector<uint8_t*> mats(size_t(copies * parts));
    uint8_t* raw = nullptr;
    check(cudaMalloc(&raw, host.size()));
    check(cudaMemcpy(raw, host.data(), host.size(), cudaMemcpyHostToDevice));
    for (auto& m : mats) {
        check(cudaMalloc(&m, stored));
        if (tiled)
            cuda::tile_matrix({t, raw, sh.n_in, sh.n_out}, m, s);
        else if (padded)
            cuda::pad_matrix({t, raw, sh.n_in, sh.n_out}, m, s);
        else
            check(cudaMemcpy(m, raw, host.size(), cudaMemcpyDeviceToDevice));
    }
    check(cudaStreamSynchronize(s));
    cudaFree(raw);
    float *x, *y;
    std::vector<float> hx(size_t(sh.n_in));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (float& v : hx) v = dist(rng);
    check(cudaMalloc(&x, hx.size() * 4));
    check(cudaMalloc(&y, size_t(sh.n_out) * 4));
    check(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
    void* x8 = nullptr;
    check(cudaMalloc(&x8, cuda::int8_x_bytes(cuda::XQuant::kInt8x2, sh.n_in)));
    const auto call = [&](int i) {
        const int c = i % copies;
        const cuda::QMatrix w{t, mats[size_t(c * parts)], sh.n_in, sh.n_out, tiled, padded, xq};
        if (sh.swiglu)
            cuda::matvec_swiglu(w, {t, mats[size_t(c * parts + 1)], sh.n_in, sh.n_out, tiled, padded, xq}, x,
                                1, y, s);
        else if (once)
            cuda::quantize_x8(x, sh.n_in, xq, x8, s), cuda::matvec_x8(w, x8, y, nullptr, nullptr, s);
        else
            cuda::matvec(w, x, 1, y, nullptr, nullptr, s);
    };
    const double us = cuda_bench::us_per_call(call, copies, iters, s),
                 gbs = double(bytes) / (us * 1e-6) / 1e9;
    const char* suffix = once     ? (x2 ? "/o2" : "/o")
                         : i8     ? (x2 ? "/i2" : "/i")
                         : tiled  ? "/t"
                         : padded ? "/p"
                                  : "";
    const std::string name = std::string(quant_traits(t)->name) + suffix;
    std::printf("| %-13s | %-6s | %8.2f | %7.0f | %5.2f |\n", sh.name, name.c_str(), us, gbs,
                gbs * 1e9 / peak);
    for (auto& m : mats) cudaFree(m);
    cudaFree(x), cudaFree(y), cudaFree(x8);
}

}  // namespace

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 200;
    const std::string only_shape = argc > 2 ? argv[2] : "", only_type = argc > 3 ? argv[3] : "";
    const bool warm = argc > 4 && std::string(argv[4]) == "warm";
    cudaStream_t s;
    check(cudaStreamCreate(&s));
    const double peak = copy_bandwidth(s);
    std::printf("device-to-device copy bandwidth: %.0f GB/s\n\n", peak / 1e9);
    std::printf("| shape | type | us/call | GB/s | of copy |\n|---|---|---:|---:|---:|\n");
    std::mt19937 rng(7);
    for (const Shape& sh : kShapes)
        for (GgmlType t : kTypes) {
            const bool picked = (only_shape.empty() || only_shape == sh.name) &&
                                (only_type.empty() || only_type == quant_traits(t)->name);
            if (!picked || sh.n_in % quant_traits(t)->block_size != 0) continue;
            bench(sh, t, Layout::kBlocks, iters, peak, warm, s, rng);
            if (cuda::tiles_fit(t, sh.n_in, sh.n_out))
                bench(sh, t, Layout::kTiled, iters, peak, warm, s, rng);
            if (cuda::pads_fit(t)) bench(sh, t, Layout::kPadded, iters, peak, warm, s, rng);
            if (!cuda::dp4a_fits(t, sh.n_in)) continue;
            for (Layout l : {Layout::kInt8, Layout::kInt8X2, Layout::kInt8Once, Layout::kInt8X2Once})
                if (!sh.swiglu || l == Layout::kInt8 || l == Layout::kInt8X2)
                    bench(sh, t, l, iters, peak, warm, s, rng);
        }
    return 0;
}
