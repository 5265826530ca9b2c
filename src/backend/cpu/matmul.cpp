#include "backend/cpu/matmul.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/gemm_i16.h"
#include "backend/cpu/kernels_avx2.h"
#include "util/error.h"

namespace minfer::cpu {

namespace {

struct MatmulArgs {
    const QuantTraits& q;
    const uint8_t* w;
    size_t row_bytes;
    int64_t n_in, n_out;
    const float* x;
    int64_t nt;
    float* y;
    const float* bias;
};

// Rows [o0, o1) with the quant format's own dot product, one (row, token) at a time: the decode path,
// memory-bound on reading W once.
void dot_rows(const MatmulArgs& a, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
        const uint8_t* row = a.w + size_t(o) * a.row_bytes;
        const float b = a.bias ? a.bias[o] : 0.0f;
        for (int64_t t = 0; t < a.nt; ++t) a.y[t * a.n_out + o] = a.q.dot(row, a.x + t * a.n_in, a.n_in) + b;
    }
}

// The prefill micro-kernels for this CPU: AVX-512 where quants_use_avx512(), else AVX2; both give the
// same bits.
const avx2::PanelMicroFn* panel_micros() {
    return quants_use_avx512() ? avx512::panel_micros() : avx2::panel_micros();
}

// Rows [o0, o1) for many tokens (xp: x packed by avx2::pack_tokens): dequantize 16 rows at a time into
// thread-local f32 scratch, pack them k-major into a panel (which stays in L2 while every token passes
// over it) and run the register-blocked outer-product kernels.
void tiled_rows(const MatmulArgs& a, const float* xp, const avx2::PanelMicroFn* micros, int64_t o0,
                int64_t o1) {
    thread_local std::vector<float> scratch, panel;
    const bool f32 = a.q.type == GgmlType::F32;
    const size_t panel_floats = size_t(avx2::kPanelRows * a.n_in);
    if (panel.size() < panel_floats) panel.resize(panel_floats);
    if (!f32 && scratch.size() < panel_floats) scratch.resize(panel_floats);
    for (int64_t o = o0; o < o1; o += avx2::kPanelRows) {
        const int64_t nr = std::min(avx2::kPanelRows, o1 - o);
        const uint8_t* rows = a.w + size_t(o) * a.row_bytes;
        const float* wf = reinterpret_cast<const float*>(rows);
        if (!f32) {
            for (int64_t r = 0; r < nr; ++r)
                a.q.to_float(rows + size_t(r) * a.row_bytes, &scratch[size_t(r * a.n_in)], a.n_in);
            wf = scratch.data();
        }
        avx2::pack_panel(wf, nr, a.n_in, panel.data());
        avx2::matmul_panel(panel.data(), nr, xp, a.nt, a.n_in, a.y + o, a.n_out, micros);
        if (!a.bias) continue;
        for (int64_t t = 0; t < a.nt; ++t)
            for (int64_t r = 0; r < nr; ++r) a.y[t * a.n_out + o + r] += a.bias[o + r];
    }
}

using QuantizeFn = void (*)(const float*, void*, int64_t);
using VecDotFn = float (*)(const void*, const void*, int64_t);

// Decode (one activation row) for types with integer dots: x quantized once into the calling thread's
// buffer (it only grows, so decode steps after the first allocate nothing), then rows [o0, o1) of W
// dotted with it by each thread.
const uint8_t* quantize_activation(QuantizeFn quantize, size_t bytes, const float* x, int64_t n_in) {
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < bytes) buf.resize(bytes);
    quantize(x, buf.data(), n_in);
    return buf.data();
}

// Prefill activations packed once per matmul (avx2::pack_tokens, token groups split between the
// threads) into the calling thread's grow-only buffer, which every worker then reads.
const float* pack_activations(const float* x, int64_t nt, int64_t n_in, ThreadPool& pool) {
    thread_local std::vector<float> buf;
    constexpr int64_t kGroup = avx2::kPanelTokens;
    const int64_t groups = (nt + kGroup - 1) / kGroup;
    const auto floats = size_t(groups * kGroup * n_in);
    if (buf.size() < floats) buf.resize(floats);
    float* xp = buf.data();
    pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
        const int64_t t0 = g0 * kGroup;
        avx2::pack_tokens(x + t0 * n_in, std::min(nt, g1 * kGroup) - t0, n_in, xp + t0 * n_in);
    });
    return xp;
}

// Rows per chunk that a thread of the row-wise paths claims at a time (ThreadPool::parallel_for_stealing):
// about kChunkBytes of weights, long enough to keep the hardware prefetcher streaming.
constexpr size_t kChunkBytes = 32 << 10;

int64_t chunk_rows(const MatmulArgs& a) {
    return std::max<int64_t>(1, int64_t(kChunkBytes / a.row_bytes));
}

void int_rows(const MatmulArgs& a, VecDotFn dot, const uint8_t* xq, int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
        a.y[o] = dot(a.w + size_t(o) * a.row_bytes, xq, a.n_in) + (a.bias ? a.bias[o] : 0.0f);
}

void check_row_length(const QuantTraits& q, int64_t n_in) {
    if (n_in % q.block_size != 0)
        throw Error(std::string("matmul: row length ") + std::to_string(n_in) + " is not a multiple of the " +
                    q.name + " block size " + std::to_string(q.block_size));
}

}  // namespace

void matmul(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
            float* y, const float* bias, ThreadPool& pool, DecodeDot decode) {
    check_row_length(q, n_in);
    const auto* wb = static_cast<const uint8_t*>(w);
    const MatmulArgs a{q, wb, quant_row_bytes(q, n_in), n_in, n_out, x, nt, y, bias};
    const bool int8 = decode == DecodeDot::Int8 && q.vec_dot_q8,
               x2 = decode == DecodeDot::Int8x2 && q.vec_dot_x2;
    if (nt == 1 && (int8 || x2)) {
        const uint8_t* xq = int8 ? quantize_activation(q.quantize_act, act_row_bytes(q, n_in), x, n_in)
                                 : quantize_activation(q.quantize_x2, act_x2_row_bytes(n_in), x, n_in);
        const VecDotFn dot = int8 ? q.vec_dot_q8 : q.vec_dot_x2;
        pool.parallel_for_stealing(n_out, chunk_rows(a),
                                   [&](int64_t o0, int64_t o1) { int_rows(a, dot, xq, o0, o1); });
    } else if (nt > 1 && decode != DecodeDot::F32 && q.to_levels && quants_use_avx512()) {
        i16::gemm(q, wb, n_in, n_out, x, nt, y, bias, pool);
    } else if (nt > 1 && cpu_has_avx2()) {
        const float* xp = pack_activations(x, nt, n_in, pool);
        const int64_t panels = (n_out + avx2::kPanelRows - 1) / avx2::kPanelRows;
        const avx2::PanelMicroFn* micros = panel_micros();
        pool.for_each_dynamic(panels, [&](int64_t p, int) {
            tiled_rows(a, xp, micros, p * avx2::kPanelRows, std::min(n_out, (p + 1) * avx2::kPanelRows));
        });
    } else {
        pool.parallel_for_stealing(n_out, chunk_rows(a),
                                   [&](int64_t o0, int64_t o1) { dot_rows(a, o0, o1); });
    }
}

void matmul_ref(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
                float* y, const float* bias) {
    check_row_length(q, n_in);
    const size_t row_bytes = quant_row_bytes(q, n_in);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
        q.to_float_ref(static_cast<const uint8_t*>(w) + size_t(o) * row_bytes, row.data(), n_in);
        for (int64_t t = 0; t < nt; ++t) {
            double s = bias ? double(bias[o]) : 0.0;
            for (int64_t i = 0; i < n_in; ++i) s += double(row[size_t(i)]) * double(x[t * n_in + i]);
            y[t * n_out + o] = float(s);
        }
    }
}

}  // namespace minfer::cpu
