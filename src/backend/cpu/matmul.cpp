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
    const size_t floats = tile_pack_floats(nt, n_in);
    if (buf.size() < floats) buf.resize(floats);
    float* xp = buf.data();
    pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
        const int64_t t0 = g0 * kGroup;
        avx2::pack_tokens(x + t0 * n_in, std::min(nt, g1 * kGroup) - t0, n_in, xp + t0 * n_in);
    });
    return xp;
}

// Rows per chunk that a thread of the row-wise paths claims at a time: kDotChunkBytes of weights.
int64_t chunk_rows(const MatmulArgs& a) {
    return std::max<int64_t>(1, int64_t(kDotChunkBytes / a.row_bytes));
}

// Each column quantized on its own (columns split between the threads) into the calling thread's
// grow-only buffer.
const uint8_t* quantize_columns(QuantizeFn quantize, size_t bytes, const float* x, int64_t nt, int64_t n_in,
                                ThreadPool& pool) {
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < bytes * size_t(nt)) buf.resize(bytes * size_t(nt));
    uint8_t* xq = buf.data();
    pool.parallel_for(nt, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) quantize(x + t * n_in, xq + size_t(t) * bytes, n_in);
    });
    return xq;
}

// One column: rows [o0, o1) dotted with it.
void int_rows(const IntDot& d, const IntDotProduct& p, size_t row_bytes, int64_t o0, int64_t o1) {
    const auto* w = static_cast<const uint8_t*>(p.w);
    for (int64_t o = o0; o < o1; ++o)
        p.y[o] = d.dot(w + size_t(o) * row_bytes, p.xq, p.n_in) + (p.bias ? p.bias[o] : 0.0f);
}

// Rows [o0, o1) against every column, kX2MaxCols columns per kernel call. Column groups outer: the
// chunk's weight rows come from memory for the first group and from L2 for the others, while each
// group's activations stay in cache across the chunk (row-outer would stream all nt activation rows
// once per weight row). The order changes no bits: each (row, column) is one dot of its own.
void int_rows_cols(const IntDot& d, const IntDotProduct& p, size_t row_bytes, int64_t o0, int64_t o1) {
    float out[kX2MaxCols];
    for (int64_t t0 = 0; t0 < p.nt; t0 += kX2MaxCols) {
        const int nc = int(std::min<int64_t>(kX2MaxCols, p.nt - t0));
        const uint8_t* xg = p.xq + size_t(t0) * p.stride;
        for (int64_t o = o0; o < o1; ++o) {
            const uint8_t* row = static_cast<const uint8_t*>(p.w) + size_t(o) * row_bytes;
            if (d.cols)
                d.cols(row, xg, p.stride, p.n_in, nc, out);
            else
                for (int k = 0; k < nc; ++k) out[k] = d.dot(row, xg + size_t(k) * p.stride, p.n_in);
            const float b = p.bias ? p.bias[o] : 0.0f;
            for (int k = 0; k < nc; ++k) p.y[(t0 + k) * p.n_out + o] = out[k] + b;
        }
    }
}

// Rows per chunk of the many-column integer path: bigger than decode's, so that the activations,
// re-read once per chunk, cost little next to the weights.
constexpr size_t kColsChunkBytes = 128 << 10;

// The integer dots (int8: quantize_act + vec_dot_q8, int8x2: quantize_x2 + vec_dot_x2): decode, and with
// `invariant` every nt, each column exactly as decode computes it.
void int_matmul(const MatmulArgs& a, DecodeDot decode, ThreadPool& pool) {
    const IntDot d = int_dot(a.q, decode, a.n_in);
    const uint8_t* xq = a.nt == 1 ? quantize_activation(d.quantize, d.bytes, a.x, a.n_in)
                                  : quantize_columns(d.quantize, d.bytes, a.x, a.nt, a.n_in, pool);
    const IntDotProduct p{&a.q, a.w, a.n_in, a.n_out, xq, d.bytes, a.nt, a.y, a.bias};
    const size_t chunk = a.nt == 1 ? kDotChunkBytes : kColsChunkBytes;
    pool.parallel_for_stealing(a.n_out, std::max<int64_t>(1, int64_t(chunk / a.row_bytes)),
                               [&](int64_t o0, int64_t o1) { int_dot_rows(d, p, o0, o1); });
}

// Many tokens in f32: x packed once, then 16-row weight panels dequantized and run against every token
// group by the register-blocked kernels.
void tiled_matmul(const MatmulArgs& a, ThreadPool& pool) {
    const float* xp = pack_activations(a.x, a.nt, a.n_in, pool);
    const int64_t panels = (a.n_out + avx2::kPanelRows - 1) / avx2::kPanelRows;
    const avx2::PanelMicroFn* micros = panel_micros();
    pool.for_each_dynamic(panels, [&](int64_t p, int) {
        tiled_rows(a, xp, micros, p * avx2::kPanelRows, std::min(a.n_out, (p + 1) * avx2::kPanelRows));
    });
}

void check_row_length(const QuantTraits& q, int64_t n_in) {
    if (n_in % q.block_size != 0)
        throw Error(std::string("matmul: row length ") + std::to_string(n_in) + " is not a multiple of the " +
                    q.name + " block size " + std::to_string(q.block_size));
}

// Whether matmul's wide products of q take the int16 GEMM (matmul.h).
bool int16_gemm_runs(const QuantTraits& q, DecodeDot decode) {
    return decode != DecodeDot::F32 && q.to_levels && quants_use_avx512();
}

// matmul's arithmetic for nt columns of q (matmul.h): the int16 GEMM (gemv or GEMM), the integer dots,
// the f32 tiles, or the f32 quant dot.
enum class Path { Int16, IntDots, Tiles, Dots };

Path matmul_path(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant) {
    const bool int8 = decode == DecodeDot::Int8 && q.vec_dot_q8,
               x2 = decode == DecodeDot::Int8x2 && q.vec_dot_x2;
    if (int16_gemm_runs(q, decode) && (invariant ? x2 : nt > 1)) return Path::Int16;
    if ((nt <= int_dot_max_tokens(q, decode) || invariant) && (int8 || x2)) return Path::IntDots;
    if ((nt > 1 || invariant) && cpu_has_avx2()) return Path::Tiles;
    return Path::Dots;
}

}  // namespace

int64_t int_dot_max_tokens(const QuantTraits& q, DecodeDot decode) {
    return int16_gemm_runs(q, decode) ? 1 : kIntDotMaxTokens;
}

int64_t gemv_max_tokens(const QuantTraits& q) {
    return q.block_size == 32 ? kGemvMaxTokens32 : kGemvMaxTokensK;  // 32-element formats, else K-quants
}

bool int_dots_run(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant) {
    return matmul_path(q, nt, decode, invariant) == Path::IntDots;
}

bool int16_runs(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant) {
    return matmul_path(q, nt, decode, invariant) == Path::Int16;
}

bool tiles_run(const QuantTraits& q, int64_t nt, DecodeDot decode, bool invariant) {
    return matmul_path(q, nt, decode, invariant) == Path::Tiles;
}

size_t tile_pack_floats(int64_t nt, int64_t n_in) {
    return size_t((nt + avx2::kPanelTokens - 1) / avx2::kPanelTokens * avx2::kPanelTokens * n_in);
}

void tile_pack(const float* x, int64_t nt, int64_t n_in, float* xp) {
    avx2::pack_tokens(x, nt, n_in, xp);
}

void tile_panel(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* xp, int64_t nt,
                int64_t p, float* y, const float* bias) {
    static_assert(kTileRows == avx2::kPanelRows);
    const MatmulArgs a{
        q, static_cast<const uint8_t*>(w), quant_row_bytes(q, n_in), n_in, n_out, nullptr, nt, y, bias};
    tiled_rows(a, xp, panel_micros(), p * kTileRows, std::min(n_out, (p + 1) * kTileRows));
}

IntDot int_dot(const QuantTraits& q, DecodeDot decode, int64_t n_in) {
    if (decode == DecodeDot::Int8 && q.vec_dot_q8)
        return {q.quantize_act, act_row_bytes(q, n_in), q.vec_dot_q8, nullptr};
    return {q.quantize_x2, act_x2_row_bytes(n_in), q.vec_dot_x2, q.vec_dot_x2_cols};
}

void int_dot_rows(const IntDot& d, const IntDotProduct& p, int64_t o0, int64_t o1) {
    const size_t row_bytes = quant_row_bytes(*p.q, p.n_in);
    if (p.nt == 1)
        int_rows(d, p, row_bytes, o0, o1);
    else
        int_rows_cols(d, p, row_bytes, o0, o1);
}

// With `invariant`, the types the int16 GEMM takes run its arithmetic for every nt (gemv for a few
// columns, the GEMM for more: the same bits); other integer types keep decode's dots for every nt, and
// the rest the f32 tiles for every nt (where AVX2 runs them): each output of the tiles is one f32 FMA
// chain per k block of 64, in k order, the blocks summed in order and the bias added last, whichever
// micro-kernel (1..6 or 12 tokens, AVX2 or AVX-512) and whatever position in its token group the column
// gets, so its bits do not depend on nt; dot_rows (q.dot per column) serves where AVX2 is missing.
void matmul(const QuantTraits& q, const void* w, int64_t n_in, int64_t n_out, const float* x, int64_t nt,
            float* y, const float* bias, ThreadPool& pool, DecodeDot decode, bool invariant) {
    check_row_length(q, n_in);
    const auto* wb = static_cast<const uint8_t*>(w);
    const MatmulArgs a{q, wb, quant_row_bytes(q, n_in), n_in, n_out, x, nt, y, bias};
    switch (matmul_path(q, nt, decode, invariant)) {
        case Path::Int16:
            if (nt <= gemv_max_tokens(q)) return i16::gemv(q, wb, n_in, n_out, x, nt, y, bias, pool);
            return i16::gemm(q, wb, n_in, n_out, x, nt, y, bias, pool);
        case Path::IntDots:
            return int_matmul(a, decode, pool);
        case Path::Tiles:
            return tiled_matmul(a, pool);
        case Path::Dots:
            return pool.parallel_for_stealing(n_out, chunk_rows(a),
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
