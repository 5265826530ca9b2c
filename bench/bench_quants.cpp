// Throughput of the quantized-row . float-vector dot (the decode matrix-vector kernel), single thread:
// one iteration is a whole matrix-vector product, rows of 4096 weights. bytes_per_second counts weight
// bytes read. Two sizes: 256 KiB of weights (L2 resident: kernel compute speed) and 256 MiB
// (streamed from DRAM: what decode sees on a real model).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quants.h"

namespace {

using minfer::GgmlType;
using minfer::QuantTraits;

constexpr int64_t kCols = 4096;

void BM_Dot(benchmark::State& state, GgmlType type, bool reference) {
    const QuantTraits& q = *minfer::quant_traits(type);
    const size_t row_bytes = minfer::quant_row_bytes(q, kCols);
    const int64_t rows = std::max<int64_t>(1, state.range(0) / int64_t(row_bytes));
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(kCols)), x(static_cast<size_t>(kCols));
    std::vector<float> y(static_cast<size_t>(rows));
    for (float& v : x) v = dist(rng);
    std::vector<uint8_t> w(row_bytes * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : src) v = dist(rng);
        q.from_float_ref(src.data(), w.data() + size_t(r) * row_bytes, kCols);
    }
    const auto dot = reference ? q.dot_ref : q.dot;
    for (auto _ : state) {
        for (int64_t r = 0; r < rows; ++r)
            y[size_t(r)] = dot(w.data() + size_t(r) * row_bytes, x.data(), kCols);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(w.size()));
    state.counters["weights/s"] =
        benchmark::Counter(double(state.iterations()) * double(rows * kCols), benchmark::Counter::kIsRate);
}

void register_all() {
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
    for (GgmlType t : types) {
        const std::string name = minfer::quant_traits(t)->name;
        benchmark::RegisterBenchmark(("dot/" + name).c_str(), BM_Dot, t, false)
            ->Arg(256 << 10)
            ->Arg(256 << 20);
        benchmark::RegisterBenchmark(("dot_ref/" + name).c_str(), BM_Dot, t, true)->Arg(256 << 10);
    }
}

}  // namespace

int main(int argc, char** argv) {
    register_all();
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
