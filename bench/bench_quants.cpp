// Throughput of the decode matrix-vector kernels, single thread: the quantized-row . float-vector dot
// (dot/), the int8 dot against pre-quantized activations (dot_q8/) and the int8x2 dot (dot_x2/, the
// decode default); one iteration is a whole
// matrix-vector product, rows of 4096 weights. bytes_per_second counts weight bytes read. Two sizes: 256 KiB
// of weights (L2 resident: kernel compute speed) and 256 MiB (streamed from DRAM: what decode sees on a real
// model). matmul/ times the threaded matrix multiply (2 threads) with and without `invariant` on
// qwen2.5-0.5B's FFN down projection (4864 in, 896 out) for several token counts. The low-bit formats take
// their int8x2 dots only where AVX-512 runs (dot_x2/ is then missing for them). moe/ times cpu::moe_ffn
// (2 threads) at Qwen3-30B-A3B's shapes (128 experts of 768, 8 used, n_embd 2048) for a prefill's tokens.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
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

// One cpu::moe_ffn of nt = range(0) tokens, router logits N(0, 1) (about nt * 8 / 128 tokens per expert),
// gate and up in Q4_K, down in `down`; GFLOP/s counts the routed products, 2 * 3 * 2048 * 768 * 8 per token.
void BM_Moe(benchmark::State& state, GgmlType down) {
    constexpr int64_t kEmbd = 2048, kFf = 768, kExperts = 128, kUsed = 8;
    const QuantTraits &q4 = *minfer::quant_traits(GgmlType::Q4_K), &qd = *minfer::quant_traits(down);
    const int64_t nt = state.range(0);
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const auto fill = [&](const QuantTraits& q, int64_t n_in, int64_t rows) {  // 61 rows quantized, repeated
        const size_t row_bytes = minfer::quant_row_bytes(q, n_in);
        minfer::HugePages w(row_bytes * size_t(rows));
        std::vector<float> src(static_cast<size_t>(n_in));
        for (int64_t r = 0; r < rows; ++r) {
            if (r >= 61) {
                std::copy_n(w.data() + size_t(r - 61) * row_bytes, row_bytes,
                            w.data() + size_t(r) * row_bytes);
                continue;
            }
            for (float& v : src) v = dist(rng);
            q.from_float_ref(src.data(), w.data() + size_t(r) * row_bytes, n_in);
        }
        return w;
    };
    const minfer::HugePages gate = fill(q4, kEmbd, kFf * kExperts), up = fill(q4, kEmbd, kFf * kExperts),
                            dn = fill(qd, kFf, kEmbd * kExperts);
    const minfer::cpu::MoeExperts w{&q4, &q4, &qd, gate.data(), up.data(), dn.data(), kEmbd, kFf, kExperts};
    const minfer::op::MoeFfn o{kExperts, kUsed, minfer::ExpertGating::Softmax, true};
    std::vector<float> x(static_cast<size_t>(nt * kEmbd)), logits(static_cast<size_t>(nt * kExperts));
    std::vector<float> y(x.size());
    for (float& v : x) v = dist(rng);
    for (float& v : logits) v = dist(rng);
    minfer::ThreadPool pool(2);
    minfer::cpu::MoeScratch s;
    for (auto _ : state) {
        minfer::cpu::moe_ffn(w, o, x.data(), logits.data(), nt, y.data(), pool,
                             minfer::cpu::DecodeDot::Int8x2, false, s);
        benchmark::DoNotOptimize(y.data());
        benchmark::ClobberMemory();
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(double(state.iterations()) * 2e-9 * double(3 * kEmbd * kFf * kUsed * nt),
                           benchmark::Counter::kIsRate);
}

void register_all() {
    const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,   GgmlType::Q8_0,
                              GgmlType::Q4_0, GgmlType::Q4_1,   GgmlType::Q5_0,   GgmlType::Q5_1,
                              GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K,   GgmlType::Q2_K,
                              GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4};
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
    for (GgmlType t :
         {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::MXFP4, GgmlType::IQ4_XS, GgmlType::Q2_K})
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
    for (GgmlType down : {GgmlType::Q4_K, GgmlType::Q6_K})
        benchmark::RegisterBenchmark((std::string("moe/down:") + minfer::quant_traits(down)->name).c_str(),
                                     BM_Moe, down)
            ->ArgName("nt")
            ->Args({1})
            ->Args({8})
            ->Args({128})
            ->Args({512})
            ->MinTime(1.0)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
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
