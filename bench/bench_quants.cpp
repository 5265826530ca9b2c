// Throughput of the decode matrix-vector kernels, single thread: the quantized-row . float-vector dot
// (dot/), the int8 dot against pre-quantized activations (dot_q8/) and the int8x2 dot (dot_x2/, the
// decode default); one iteration is a whole
// matrix-vector product, rows of 4096 weights. bytes_per_second counts weight bytes read. Two sizes: 256 KiB
// of weights (L2 resident: kernel compute speed) and 256 MiB (streamed from DRAM: what decode sees on a real
// model). matmul/ times the threaded matrix multiply (2 threads) with and without `invariant` on
// qwen2.5-0.5B's FFN down projection (4864 in, 896 out) for several token counts.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "quant/quants.h"
#include "util/huge_pages.h"

namespace {

using minfer::GgmlType;
using minfer::QuantTraits;

constexpr int64_t kCols = 4096;

enum class Act { F32, Int8, Int8x2 };

void BM_Dot(benchmark::State& state, GgmlType type, bool reference, Act act) {
    const QuantTraits& q = *minfer::quant_traits(type);
    const size_t row_bytes = minfer::quant_row_bytes(q, kCols);
    const int64_t rows = std::max<int64_t>(1, state.range(0) / int64_t(row_bytes));
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(kCols)), x(static_cast<size_t>(kCols));
    std::vector<float> y(static_cast<size_t>(rows));
    for (float& v : x) v = dist(rng);
    const size_t w_bytes = row_bytes * size_t(rows);
    const minfer::HugePages w_mem(w_bytes);  // on 2 MiB pages, as the CPU backend's weights
    uint8_t* w = w_mem.data();
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : src) v = dist(rng);
        q.from_float_ref(src.data(), w + size_t(r) * row_bytes, kCols);
    }
    std::vector<uint8_t> xq(act == Act::Int8 ? minfer::act_row_bytes(q, kCols)
                                             : minfer::act_x2_row_bytes(kCols));
    if (act == Act::Int8) (reference ? q.quantize_act_ref : q.quantize_act)(x.data(), xq.data(), kCols);
    if (act == Act::Int8x2) (reference ? q.quantize_x2_ref : q.quantize_x2)(x.data(), xq.data(), kCols);
    const auto dot = reference ? q.dot_ref : q.dot;
    const auto dot_q8 = reference ? q.vec_dot_q8_ref : q.vec_dot_q8;
    const auto dot_x2 = reference ? q.vec_dot_x2_ref : q.vec_dot_x2;
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* row = w + size_t(r) * row_bytes;
            y[size_t(r)] = act == Act::Int8     ? dot_q8(row, xq.data(), kCols)
                           : act == Act::Int8x2 ? dot_x2(row, xq.data(), kCols)
                                                : dot(row, x.data(), kCols);
        }
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w_bytes));
    state.counters["weights/s"] =
        benchmark::Counter(double(state.iterations()) * double(rows * kCols), benchmark::Counter::kIsRate);
}

// The multi-column int8x2 dot of batched decode: each weight row against range(1) activation rows
// (vec_dot_x2_cols), 256 KiB of weights (L2 resident: the kernel's compute speed), single thread;
// weights/s counts weight elements times columns.
void BM_DotCols(benchmark::State& state, GgmlType type) {
    const QuantTraits& q = *minfer::quant_traits(type);
    const auto ncols = int(state.range(1));
    const size_t row_bytes = minfer::quant_row_bytes(q, kCols), x_bytes = minfer::act_x2_row_bytes(kCols);
    const int64_t rows = std::max<int64_t>(1, state.range(0) / int64_t(row_bytes));
    std::mt19937 rng(4);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(kCols)), y(static_cast<size_t>(rows * ncols));
    std::vector<uint8_t> w(row_bytes * size_t(rows)), xq(x_bytes * size_t(ncols));
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : src) v = dist(rng);
        q.from_float_ref(src.data(), w.data() + size_t(r) * row_bytes, kCols);
    }
    for (int c = 0; c < ncols; ++c) {
        for (float& v : src) v = dist(rng);
        q.quantize_x2(src.data(), xq.data() + size_t(c) * x_bytes, kCols);
    }
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; ++r)
            q.vec_dot_x2_cols(w.data() + size_t(r) * row_bytes, xq.data(), x_bytes, kCols, ncols,
                              y.data() + size_t(r * ncols));
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.counters["weights/s"] = benchmark::Counter(
        double(state.iterations()) * double(rows * kCols * ncols), benchmark::Counter::kIsRate);
}

// Throughput of the activation quantizer (one 4096-element row per iteration); bytes are the f32 input.
void BM_QuantizeAct(benchmark::State& state, GgmlType type) {
    const QuantTraits& q = *minfer::quant_traits(type);
    std::mt19937 rng(2);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(kCols));
    for (float& v : x) v = dist(rng);
    std::vector<uint8_t> xq(minfer::act_row_bytes(q, kCols));
    for (auto _ : state) {
        q.quantize_act(x.data(), xq.data(), kCols);
        benchmark::DoNotOptimize(xq.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * kCols * int64_t(sizeof(float)));
}

// One cpu::matmul of nt = range(0) tokens with int8x2 decode dots; GFLOP/s counts 2 n_in n_out nt.
void BM_Matmul(benchmark::State& state, GgmlType type, bool invariant) {
    constexpr int64_t kIn = 4864, kOut = 896;
    const QuantTraits& q = *minfer::quant_traits(type);
    const int64_t nt = state.range(0);
    const size_t row_bytes = minfer::quant_row_bytes(q, kIn);
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(kIn)), x(static_cast<size_t>(nt * kIn));
    std::vector<float> y(static_cast<size_t>(nt * kOut));
    for (float& v : x) v = dist(rng);
    const minfer::HugePages w(row_bytes * size_t(kOut));
    for (int64_t r = 0; r < kOut; ++r) {
        for (float& v : src) v = dist(rng);
        q.from_float_ref(src.data(), w.data() + size_t(r) * row_bytes, kIn);
    }
    minfer::ThreadPool pool(2);
    for (auto _ : state) {
        minfer::cpu::matmul(q, w.data(), kIn, kOut, x.data(), nt, y.data(), nullptr, pool,
                            minfer::cpu::DecodeDot::Int8x2, invariant);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] = benchmark::Counter(
        double(state.iterations()) * 2e-9 * double(kIn * kOut * nt), benchmark::Counter::kIsRate);
}

void register_all() {
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                              GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    for (GgmlType t : types) {
        const QuantTraits& q = *minfer::quant_traits(t);
        const std::string name = q.name;
        benchmark::RegisterBenchmark(("dot/" + name).c_str(), BM_Dot, t, false, Act::F32)
            ->Arg(256 << 10)
            ->Arg(256 << 20);
        benchmark::RegisterBenchmark(("dot_ref/" + name).c_str(), BM_Dot, t, true, Act::F32)->Arg(256 << 10);
        if (!q.vec_dot_q8) continue;
        benchmark::RegisterBenchmark(("dot_q8/" + name).c_str(), BM_Dot, t, false, Act::Int8)
            ->Arg(256 << 10)
            ->Arg(256 << 20);
        benchmark::RegisterBenchmark(("dot_q8_ref/" + name).c_str(), BM_Dot, t, true, Act::Int8)
            ->Arg(256 << 10);
        if (!q.vec_dot_x2) continue;
        benchmark::RegisterBenchmark(("dot_x2/" + name).c_str(), BM_Dot, t, false, Act::Int8x2)
            ->Arg(256 << 10)
            ->Arg(256 << 20);
        if (q.vec_dot_x2_cols)
            benchmark::RegisterBenchmark(("dot_x2_cols/" + name).c_str(), BM_DotCols, t)
                ->ArgNames({"bytes", "cols"})
                ->Args({256 << 10, 1})
                ->Args({256 << 10, 4});
    }
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0})
        for (bool invariant : {false, true}) {
            const std::string name = std::string("matmul/") + minfer::quant_traits(t)->name +
                                     (invariant ? "/invariant" : "/default");
            benchmark::RegisterBenchmark(name.c_str(), BM_Matmul, t, invariant)
                ->ArgName("nt")
                ->Args({1})
                ->Args({4})
                ->Args({8})
                ->Args({12})
                ->Args({16})
                ->Args({32})
                ->Args({128})
                ->UseRealTime()
                ->Unit(benchmark::kMicrosecond);
        }
    benchmark::RegisterBenchmark("quantize_act/Q8_0", BM_QuantizeAct, GgmlType::Q8_0);
    benchmark::RegisterBenchmark("quantize_act/Q8_K", BM_QuantizeAct, GgmlType::Q4_K);
}

}  // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
