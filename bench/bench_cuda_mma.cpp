// The tensor-core products (backend/cuda/quant_mma.h: the int8 kernels, direct and staged;
// quant_mma_f16.h: the f16 one) per layer shape, weight type and column count: microseconds per call
// (x's quantization or conversion to half included) and the weight bytes streamed per second. Each timed
// call reads a different copy of the matrix (together larger than L2), as a decode step reads every
// layer's weights once.
//
//   bench_cuda_mma [iterations] [columns, e.g. 1,8,64] [shape]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_f16.h"
#include "cuda_bench_util.h"
#include "quant/quants.h"

namespace {

using namespace minfer;
using cuda_bench::check;
using cuda_bench::host_matrix;

struct Shape {
    const char* name;
    int64_t n_in, n_out;
    GgmlType type;
};

// Qwen2.5-7B Q4_K_M's products (Q, K and V concatenated; gate or up; the Q6_K output) and Qwen2.5-0.5B
// Q4_K_M's (Q5_0 gate or up, Q4_K down, Q8_0 output).
const Shape kShapes[] = {
    {"7b.qkv", 3584, 4608, GgmlType::Q4_K},       {"7b.o", 3584, 3584, GgmlType::Q4_K},
    {"7b.gate", 3584, 18944, GgmlType::Q4_K},     {"7b.down", 18944, 3584, GgmlType::Q4_K},
    {"7b.down6", 18944, 3584, GgmlType::Q6_K},    {"7b.lm_head", 3584, 152064, GgmlType::Q6_K},
    {"0.5b.gate", 896, 4864, GgmlType::Q5_0},     {"0.5b.down", 4864, 896, GgmlType::Q4_K},
    {"0.5b.lm_head", 896, 151936, GgmlType::Q8_0}};

void bench(const Shape& sh, const std::vector<int64_t>& cols, int iters, cudaStream_t s, std::mt19937& rng) {
    const bool pad = sh.type == GgmlType::Q6_K;
    const std::vector<uint8_t> host = host_matrix(sh.type, sh.n_in, sh.n_out, rng);
    const size_t stored = pad ? size_t(cuda::padded_row_bytes(sh.type, sh.n_in) * sh.n_out) : host.size();
    const int copies = int(std::max<int64_t>(2, (int64_t(512) << 20) / int64_t(stored) + 1));
    uint8_t* raw = nullptr;
    check(cudaMalloc(&raw, host.size()));
    check(cudaMemcpy(raw, host.data(), host.size(), cudaMemcpyHostToDevice));
    std::vector<uint8_t*> mats(static_cast<size_t>(copies));
    for (auto& m : mats) {
        check(cudaMalloc(&m, stored));
        if (pad)
            cuda::pad_matrix({sh.type, raw, sh.n_in, sh.n_out}, m, s);
        else
            check(cudaMemcpy(m, raw, host.size(), cudaMemcpyDeviceToDevice));
    }
    check(cudaStreamSynchronize(s));
    cudaFree(raw);
    for (int64_t nt : cols)
        for (const char* kname : {"direct", "staged", "f16"}) {
            const bool f16 = kname[0] == 'f';
            const auto kernel = kname[0] == 'd' ? cuda::MmaKernel::Direct : cuda::MmaKernel::Staged;
            const cuda::QMatrix w0{sh.type, mats[0], sh.n_in, sh.n_out, false, pad};
            float *x, *y, *scratch;
            void* xq;
            unsigned* tickets;
            std::vector<float> hx(size_t(nt * sh.n_in));
            std::normal_distribution<float> dist(0.0f, 1.0f);
            for (float& v : hx) v = dist(rng);
            check(cudaMalloc(&x, hx.size() * 4));
            check(cudaMalloc(&y, size_t(nt * sh.n_out) * 4));
            const size_t floats =
                f16 ? cuda::mma_f16_scratch_floats(w0, nt) : cuda::mma_scratch_floats(w0, nt);
            check(cudaMalloc(&scratch, std::max<size_t>(floats, 1) * 4));
            const size_t n_tickets = f16 ? cuda::mma_f16_tickets(w0, nt) : 1;
            check(cudaMalloc(&tickets, n_tickets * sizeof(unsigned)));
            check(cudaMemset(tickets, 0, n_tickets * sizeof(unsigned)));
            check(cudaMalloc(&xq, std::max(cuda::mma_x_bytes(sh.n_in, nt), size_t(nt * sh.n_in) * 2)));
            check(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
            const auto call = [&](int i) {
                const cuda::QMatrix w{sh.type, mats[size_t(i % copies)], sh.n_in, sh.n_out, false, pad};
                if (f16) {
                    cuda::split_f16(x, xq, nullptr, nt * sh.n_in, s);
                    return cuda::matmul_mma_f16(w, xq, nt, y, nullptr, nullptr, scratch, tickets, s);
                }
                cuda::quantize_x_mma(x, sh.n_in, nt, xq, s);
                cuda::matmul_mma(w, xq, nt, y, nullptr, nullptr, scratch, s, kernel);
            };
            const double us = cuda_bench::us_per_call(call, copies, iters, s),
                         gbs = double(stored) / (us * 1e-6) / 1e9;
            const double outs = double(sh.n_out) * double(nt) * double(sh.n_in / 32) / (us * 1e-6);
            std::printf("| %-12s | %-4s | %-6s | %4lld | %8.2f | %6.0f | %7.1f |\n", sh.name,
                        quant_traits(sh.type)->name, kname, (long long)nt, us, gbs, outs / 1e9);
            cudaFree(x), cudaFree(y), cudaFree(scratch), cudaFree(xq), cudaFree(tickets);
        }
    for (auto& m : mats) cudaFree(m);
}

}  // namespace

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 50;
    std::vector<int64_t> cols;
    std::stringstream ss(argc > 2 ? argv[2] : "1,8,16,32,64");
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(std::stoll(c));
    const std::string only = argc > 3 ? argv[3] : "";
    cudaStream_t s;
    check(cudaStreamCreate(&s));
    std::printf("| shape | type | kernel | columns | us/call | weight GB/s | G block-products/s |\n");
    std::printf("| --- | --- | --- | ---: | ---: | ---: | ---: |\n");
    std::mt19937 rng(7);
    for (const Shape& sh : kShapes)
        if (only.empty() || only == sh.name) bench(sh, cols, iters, s, rng);
    return 0;
}
