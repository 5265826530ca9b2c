// CUDA non-matmul ops (backend/cuda/ops_cuda.h) against the CPU scalar references (backend/cpu/ops_ref.h)
// on random inputs and shapes. The kernels compute in f32 and the references in double, so each test
// states a budget derived from the f32 roundings along the kernel's longest chain (u = 2^-24), with a
// margin; ops that are a copy or a single f32 add/multiply are compared exactly. Every output buffer
// starts as NaN, so an element the kernel fails to write fails the comparison. Skipped without a GPU.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/ops_ref.h"
#include "backend/cuda/ops_cuda.h"
#include "cuda/attn_test_util.h"
#include "cuda/cuda_test_util.h"

namespace minfer::test {
namespace {

Pos random_positions(std::mt19937& rng, int64_t n, int32_t lo, int32_t hi) {
    std::uniform_int_distribution<int32_t> dist(lo, hi);
    Pos p(static_cast<size_t>(n));
    for (auto& x : p) x = dist(rng);
    return p;
}

double max_abs(const float* x, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(x[i])));
    return m;
}

size_t sz(int64_t n) {
    return static_cast<size_t>(n);
}

void expect_exact(const Vec& got, const Vec& want, const std::string& what) {
    expect_within(got, want, Tol(want.size(), 0.0), what);
}

// ---- rms_norm

// Budget: the sum of squares is a chain of at most d/blockDim + 10 f32 roundings of positive terms (<= 14
// for d = 4096: relative error <= 8.3e-7, halved through the square root), rsqrtf is within 2 ulp and
// x * scale * w adds two roundings, so |y - ref| <= ~1e-6 * max|y|. Budget per row: 1e-5 * max|y| + 1e-6.
// Rows are scaled by 1, 1e-3 (mean square ~ eps, so eps is tested) or 40; a wrong eps, divisor or weight
// index gives errors of order max|y|.
void check_rms_norm(int64_t d, int64_t rows, float eps, std::mt19937& rng) {
    SCOPED_TRACE("d " + std::to_string(d) + ", rows " + std::to_string(rows));
    Vec x = uniform(rng, d * rows, -2.0f, 2.0f);
    const Vec w = uniform(rng, d, 0.5f, 1.5f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < d; ++i)
            x[size_t(r * d + i)] *= r % 3 == 0 ? 1.0f : r % 3 == 1 ? 1e-3f : 40.0f;
    DeviceBuffer<float> dx(x), dw(w), dy(size_t(d * rows));
    fill_nan(dy, d * rows);
    cuda::rms_norm(dx.get(), dw.get(), dy.get(), d, rows, eps, nullptr);
    sync();
    Vec want(x.size());
    Tol tol(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        cpu::rms_norm_ref(x.data() + r * d, w.data(), want.data() + r * d, d, eps);
        const double m = max_abs(want.data() + r * d, d);
        std::fill_n(tol.begin() + r * d, d, 1e-5 * m + 1e-6);
    }
    expect_within(dy.download(), want, tol, "rms_norm");
}

TEST(CudaOps, RmsNorm) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(101);
    for (int64_t d : {64, 256, 896, 1000, 4096})
        for (int64_t rows : {1, 3, 7}) check_rms_norm(d, rows, 1e-6f, rng);
    // QkNorm: rows = nt * n_head of head_dim.
    check_rms_norm(128, 5 * 16, 1e-6f, rng);
    check_rms_norm(64, 1 * 14, 1e-5f, rng);
}

// ---- rope

struct RopeCase {
    int64_t n_head, head_dim, n_rot;
    bool neox;
    float base;
    bool yarn =
        false;  // gpt-oss's YaRN (x32 over 4096 positions, betas 32 and 1, correction range unrounded)
};

// The YaRN parameters of RopeCase::yarn for a rotation over n_rot dimensions at base `base`.
cpu::RopeFreq yarn_freq(const RopeCase& c) {
    const auto dim = [&](double rot) {
        return double(c.n_rot) * std::log(4096 / (rot * 2 * 3.14159265358979323846)) /
               (2 * std::log(double(c.base)));
    };
    return {c.base, 1.0f / 32, std::max(0.0, dim(32)), std::min(double(c.n_rot - 1), dim(1)),
            0.1 * std::log(32.0) + 1};
}

// Budget: c and s are the f32 roundings of the same double angle on both sides (they can differ by 1 ulp
// only at a rounding boundary) and a * c - b * s is at most three roundings (two with FMA), so
// |y - ref| <= 5u (|a| + |b|) <= 6e-7 * max|x| over the token row. Budget: 2e-6 * max|x|. The
// pass-through dimensions (>= n_rot) are copies and must be exact. Swapped pairs, a wrong sign or an
// angle over head_dim instead of n_rot give errors of order max|x|.
void check_rope(const RopeCase& c, int64_t nt, bool in_place, std::mt19937& rng) {
    SCOPED_TRACE("n_head " + std::to_string(c.n_head) + ", head_dim " + std::to_string(c.head_dim) +
                 ", n_rot " + std::to_string(c.n_rot) + (c.neox ? ", neox" : ", normal") + ", nt " +
                 std::to_string(nt) + (in_place ? ", in place" : ", out of place"));
    const int64_t row = c.n_head * c.head_dim;
    const Vec x = uniform(rng, nt * row, -3.0f, 3.0f);
    Pos pos = random_positions(rng, nt, 0, 4095);
    if (nt > 1) pos[1] = 0;  // the identity rotation
    DeviceBuffer<float> dx(x), dy(size_t(nt * row));
    DeviceBuffer<int32_t> dpos(pos);
    fill_nan(dy, nt * row);
    float* y = in_place ? dx.get() : dy.get();
    const cpu::RopeFreq f = c.yarn ? yarn_freq(c) : cpu::RopeFreq{c.base};
    cuda::rope(dx.get(), y, dpos.get(), nt,
               cuda::RopeShape{c.n_head, c.head_dim, c.n_rot, c.base, c.neox, f.scale, f.yarn_low,
                               f.yarn_high, f.mscale},
               nullptr);
    sync();
    Vec want = x;
    Tol tol(want.size());
    for (int64_t t = 0; t < nt; ++t) {
        cpu::rope_ref(want.data() + t * row, c.n_head, c.head_dim, c.n_rot, pos[size_t(t)], f, c.neox);
        const double m = max_abs(x.data() + t * row, row);
        for (int64_t i = 0; i < row; ++i)
            tol[size_t(t * row + i)] = i % c.head_dim < c.n_rot ? 2e-6 * m : 0.0;
    }
    expect_within(in_place ? dx.download() : dy.download(), want, tol, "rope");
    if (!in_place) expect_exact(dx.download(), x, "rope input (must be left unchanged)");
}

TEST(CudaOps, Rope) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(202);
    const RopeCase cases[] = {
        {14, 64, 64, true, 1e6f},         {4, 128, 128, false, 1e4f},
        {3, 128, 64, true, 1e4f},         {3, 128, 64, false, 5e5f},
        {5, 96, 48, true, 1e4f},          {2, 80, 32, false, 1e4f},
        {16, 128, 128, true, 1e6f},       {8, 64, 64, true, 150000.0f, true},
        {4, 128, 128, false, 1e4f, true},
    };
    for (const RopeCase& c : cases)
        for (int64_t nt : {1, 5})
            for (bool in_place : {false, true}) check_rope(c, nt, in_place, rng);
}

// ---- element-wise

enum class Ew { Add, Mul, Silu, SwiGLU, GeGLU, Scale };

// Budget: add, mul and scale are one f32 operation on both sides: exact. silu = x / (1 + expf(-x)): expf is
// within 2 ulp, and its relative error reaches the result at most once (E / (1 + E) <= 1), plus the add,
// the division and the reference's rounding to f32: <= 5u = 3e-7 relative; swiglu adds one multiply.
// Budget: 1e-6 * |ref| (x in [-12, 12], so nothing is subnormal). geglu: cpu::geglu's budget, (12 + 8 |z|)
// u relative with z = sqrt(2/pi) (x + 0.044715 x^3), whose f32 rounding moves e^(2z).
void check_elementwise(Ew op, int64_t n, std::mt19937& rng) {
    static const char* const kNames[] = {"add", "mul", "silu", "swiglu", "geglu", "scale"};
    const std::string name = kNames[int(op)];
    SCOPED_TRACE(name + ", n " + std::to_string(n));
    const Vec a = uniform(rng, n, -12.0f, 12.0f), b = uniform(rng, n, -3.0f, 3.0f);
    DeviceBuffer<float> da(a), db(b), dy(sz(n));
    fill_nan(dy, n);
    Vec want(sz(n));
    switch (op) {
        case Ew::Add:
            cuda::add(da.get(), db.get(), dy.get(), n, nullptr),
                cpu::add_ref(a.data(), b.data(), want.data(), n);
            break;
        case Ew::Mul:
            cuda::mul(da.get(), db.get(), dy.get(), n, nullptr),
                cpu::mul_ref(a.data(), b.data(), want.data(), n);
            break;
        case Ew::Silu:
            cuda::silu(da.get(), dy.get(), n, nullptr), cpu::silu_ref(a.data(), want.data(), n);
            break;
        case Ew::SwiGLU:
            cuda::swiglu(da.get(), db.get(), dy.get(), n, nullptr);
            cpu::swiglu_ref(a.data(), b.data(), want.data(), n);
            break;
        case Ew::GeGLU:
            cuda::geglu(da.get(), db.get(), dy.get(), n, nullptr);
            cpu::geglu_ref(a.data(), b.data(), want.data(), n);
            break;
        case Ew::Scale:
            cuda::scale(da.get(), 11.3137085f, dy.get(), n, nullptr);
            for (int64_t i = 0; i < n; ++i) want[size_t(i)] = a[size_t(i)] * 11.3137085f;
            break;
    }
    sync();
    Tol tol(size_t(n), 0.0);
    if (op == Ew::Silu || op == Ew::SwiGLU)
        for (size_t i = 0; i < tol.size(); ++i) tol[i] = 1e-6 * std::fabs(double(want[i]));
    if (op == Ew::GeGLU)
        for (size_t i = 0; i < tol.size(); ++i) {
            const double x = a[i], z = std::fabs(0.7978845608028654 * (x + 0.044715 * x * x * x));
            tol[i] = (12 + 8 * z) * 0x1p-24 * std::fabs(double(want[i])) + 1e-30;
        }
    expect_within(dy.download(), want, tol, name);
}

TEST(CudaOps, Elementwise) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(303);
    for (Ew op : {Ew::Add, Ew::Mul, Ew::Silu, Ew::SwiGLU, Ew::GeGLU, Ew::Scale})
        for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1) << 20}) check_elementwise(op, n, rng);
}

// add_bias: y[t][i] + b[i] is one f32 add on both sides: exact.
TEST(CudaOps, AddBias) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(404);
    for (int64_t d : {1, 1000, 4864})
        for (int64_t nt : {1, 5}) {
            SCOPED_TRACE("d " + std::to_string(d) + ", nt " + std::to_string(nt));
            const Vec y = uniform(rng, d * nt, -4.0f, 4.0f), b = uniform(rng, d, -1.0f, 1.0f);
            DeviceBuffer<float> dy(y), db(b);
            cuda::add_bias(dy.get(), db.get(), d, nt, nullptr);
            sync();
            Vec want = y;
            for (int64_t t = 0; t < nt; ++t)
                for (int64_t i = 0; i < d; ++i) want[size_t(t * d + i)] += b[size_t(i)];
            expect_exact(dy.download(), want, "add_bias");
        }
}

// ---- split_f16

uint16_t half_bits(float x) {
    const __half_raw r = __float2half_rn(x);
    return r.x;
}

float half_value(uint16_t bits) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
}

// Values over the normal half range 2^-14 .. 65504 (log-uniform, both signs) plus zeros, the range's
// ends and halfway cases (1 + 2^-11 rounds to even, 1 + 3 * 2^-11 rounds up).
Vec split_inputs(std::mt19937& rng, int64_t n) {
    std::uniform_real_distribution<double> e(-14.0, 15.99);
    std::bernoulli_distribution neg(0.5);
    Vec x(sz(n));
    for (auto& v : x) v = float(std::exp2(e(rng))) * (neg(rng) ? -1.0f : 1.0f);
    const float special[] = {0.0f,     -0.0f,           65504.0f,           -65504.0f,
                             0x1p-14f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
    for (size_t i = 0; i < std::size(special) && i < x.size(); ++i) x[i] = special[i];
    return x;
}

// hi must be the round-to-nearest-even half of x and lo that of x - hi, bit for bit (x - hi is exact in
// f32 by Sterbenz). Then |x - (hi + lo)| <= half an ulp of the half nearest x - hi: <= 2^-22 |x| while
// x - hi is a normal half, else the subnormal half step 2^-25; the budget is exactly that bound.
TEST(CudaOps, SplitF16) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(505);
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1) << 20}) {
        SCOPED_TRACE("n " + std::to_string(n));
        const Vec x = split_inputs(rng, n);
        DeviceBuffer<float> dx(x);
        DeviceBuffer<uint16_t> dhi(sz(n)), dlo(sz(n)), dhi_only(sz(n));
        cuda::split_f16(dx.get(), dhi.get(), dlo.get(), n, nullptr);
        cuda::split_f16(dx.get(), dhi_only.get(), nullptr, n, nullptr);
        sync();
        const std::vector<uint16_t> hi = dhi.download(), lo = dlo.download(), hi_only = dhi_only.download();
        size_t bad_hi = 0, bad_lo = 0, bad_sum = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const uint16_t want_hi = half_bits(x[i]);
            const uint16_t want_lo = half_bits(x[i] - half_value(want_hi));
            bad_hi += hi[i] != want_hi || hi_only[i] != want_hi;
            bad_lo += lo[i] != want_lo;
            const double sum = double(half_value(hi[i])) + double(half_value(lo[i]));
            bad_sum += !(std::fabs(sum - double(x[i])) <= 0x1p-22 * std::fabs(double(x[i])) + 0x1p-25);
        }
        EXPECT_EQ(bad_hi, 0u) << "hi differs from __float2half_rn(x)";
        EXPECT_EQ(bad_lo, 0u) << "lo differs from __float2half_rn(x - hi)";
        EXPECT_EQ(bad_sum, 0u) << "hi + lo is not within 2^-22 |x| + 2^-25 of x";
    }
}

// rms_norm and swiglu with y_hi (a GEMM's half x written by its producer) must write the y they write
// without it, bit for bit, and y_hi must be split_f16's hi of that y: the GEMM then reads the halves it
// would have split. Rows of 896 and 4096 (kept in registers) and 5000 (read again), 1000 and 2^20
// elements.
TEST(CudaOps, HalfOutputsAreTheSplitsHi) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(515);
    const auto check = [](const Vec& y, const Vec& y_alone, const std::vector<uint16_t>& hi) {
        ASSERT_EQ(y.size(), y_alone.size());
        EXPECT_EQ(std::memcmp(y.data(), y_alone.data(), y.size() * sizeof(float)), 0) << "y changed";
        size_t bad = 0;
        for (size_t i = 0; i < y.size(); ++i) bad += hi[i] != half_bits(y[i]);
        EXPECT_EQ(bad, 0u) << "y_hi differs from __float2half_rn(y)";
    };
    for (int64_t d : {896, 4096, 5000}) {
        SCOPED_TRACE("rms_norm d " + std::to_string(d));
        const int64_t rows = 3;
        const Vec x = uniform(rng, d * rows, -2.0f, 2.0f), w = uniform(rng, d, 0.5f, 1.5f);
        DeviceBuffer<float> dx(x), dw(w), dy(sz(d * rows)), dy_alone(sz(d * rows));
        DeviceBuffer<uint16_t> dhi(sz(d * rows));
        cuda::rms_norm(dx.get(), dw.get(), dy.get(), d, rows, 1e-6f, nullptr, dhi.get());
        cuda::rms_norm(dx.get(), dw.get(), dy_alone.get(), d, rows, 1e-6f, nullptr);
        sync();
        check(dy.download(), dy_alone.download(), dhi.download());
    }
    for (int64_t n : {int64_t(1000), int64_t(1) << 20}) {
        SCOPED_TRACE("swiglu n " + std::to_string(n));
        const Vec a = uniform(rng, n, -12.0f, 12.0f), b = uniform(rng, n, -3.0f, 3.0f);
        DeviceBuffer<float> da(a), db(b), dy(sz(n)), dy_alone(sz(n));
        DeviceBuffer<uint16_t> dhi(sz(n));
        cuda::swiglu(da.get(), db.get(), dy.get(), n, nullptr, dhi.get());
        cuda::swiglu(da.get(), db.get(), dy_alone.get(), n, nullptr);
        sync();
        check(dy.download(), dy_alone.download(), dhi.download());
    }
}

// ---- get_rows_f32 and kv_store

// get_rows_f32 is a copy: exact, ids with repeats and both ends of the table.
// argmax_rows picks the CPU's first maximum of every row: ties (few distinct values), rows of -inf,
// a maximum in the last element, lengths below and above the block's 1024 threads.
TEST(CudaOps, ArgmaxRowsMatchCpu) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(707);
    std::uniform_int_distribution<int> level(-3, 3);
    for (const int64_t n : {1, 31, 1024, 1025, 151936}) {
        SCOPED_TRACE("n " + std::to_string(n));
        const int64_t rows = 9;
        Vec x(size_t(rows * n));
        for (float& v : x) v = float(level(rng));
        for (int64_t i = 0; i < n; ++i) x[size_t(n + i)] = -INFINITY;  // row 1
        x[size_t(3 * n - 1)] = 9.0f;                                   // row 2's last
        DeviceBuffer<float> dx(x);
        DeviceBuffer<int32_t> dids(static_cast<size_t>(rows));
        cuda::argmax_rows(dx.get(), n, rows, dids.get(), nullptr);
        sync();
        const std::vector<int32_t> got = dids.download();
        for (int64_t r = 0; r < rows; ++r)
            EXPECT_EQ(got[size_t(r)], cpu::argmax_ref(x.data() + r * n, n)) << "row " << r;
    }
}

TEST(CudaOps, GetRowsF32) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(606);
    for (int64_t d : {1, 1000, 4864}) {
        SCOPED_TRACE("d " + std::to_string(d));
        const int64_t n_rows = 37, nt = 9;
        const Vec src = uniform(rng, n_rows * d, -1.0f, 1.0f);
        Pos ids = random_positions(rng, nt, 0, int32_t(n_rows - 1));
        ids[0] = 0, ids[1] = int32_t(n_rows - 1), ids[2] = ids[3];
        DeviceBuffer<float> dsrc(src), dout(size_t(nt * d));
        DeviceBuffer<int32_t> dids(ids);
        fill_nan(dout, nt * d);
        cuda::get_rows_f32(dsrc.get(), d, dids.get(), nt, dout.get(), nullptr);
        sync();
        Vec want(size_t(nt * d));
        for (int64_t t = 0; t < nt; ++t)
            std::copy_n(src.begin() + ids[size_t(t)] * d, d, want.begin() + t * d);
        expect_exact(dout.download(), want, "get_rows_f32");
    }
}

// interleave_ranks is a copy: exact, every rank's block of every row in place, for one row (decode), a
// few and more threads than a block has.
TEST(CudaOps, InterleaveRanks) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(808);
    for (const int ranks : {1, 2, 3, 8})
        for (const auto& [n, rows] : {std::pair<int64_t, int64_t>{1, 1}, {7, 5}, {300, 1}, {1000, 9}}) {
            SCOPED_TRACE("ranks " + std::to_string(ranks) + ", n " + std::to_string(n) + ", rows " +
                         std::to_string(rows));
            const int64_t total = ranks * rows * n;
            const Vec src = uniform(rng, total, -1.0f, 1.0f);  // [ranks][rows][n]
            DeviceBuffer<float> dsrc(src), dout(sz(total));
            fill_nan(dout, total);
            cuda::interleave_ranks(dsrc.get(), n, rows, ranks, dout.get(), nullptr);
            sync();
            Vec want(sz(total));  // [rows][ranks * n]
            for (int k = 0; k < ranks; ++k)
                for (int64_t t = 0; t < rows; ++t)
                    std::copy_n(src.begin() + (k * rows + t) * n, n, want.begin() + (t * ranks + k) * n);
            expect_exact(dout.download(), want, "interleave_ranks");
        }
}

// kv_store is a copy: rows at valid positions must equal the inputs exactly; out-of-range positions
// (-1, n_ctx, far past) are skipped, and every other row of the region keeps its previous contents, as
// do two guard rows past the region's n_ctx rows (where position n_ctx would land if the bound were off).
TEST(CudaOps, KvStore) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(707);
    for (int64_t n_embd : {128, 120, 1024}) {
        SCOPED_TRACE("n_embd " + std::to_string(n_embd));
        const int64_t n_ctx = 64;
        const Pos pos = {5, -1, 0, int32_t(n_ctx), int32_t(n_ctx - 1), 1000, 17};
        const int64_t nt = int64_t(pos.size());
        const Vec k = uniform(rng, nt * n_embd, -1.0f, 1.0f), v = uniform(rng, nt * n_embd, -1.0f, 1.0f);
        const int64_t n_alloc = (n_ctx + 2) * n_embd;  // the region and two guard rows
        const Vec k0 = uniform(rng, n_alloc, 5.0f, 6.0f), v0 = uniform(rng, n_alloc, 7.0f, 8.0f);
        DeviceBuffer<float> dk(k), dv(v), rk(k0), rv(v0);
        DeviceBuffer<int32_t> dpos(pos);
        cuda::kv_store(dk.get(), dv.get(), dpos.get(), nt, cuda::KvRegion{rk.get(), rv.get(), n_embd, n_ctx},
                       nullptr);
        sync();
        Vec want_k = k0, want_v = v0;
        for (int64_t t = 0; t < nt; ++t) {
            const int64_t p = pos[size_t(t)];
            if (p < 0 || p >= n_ctx) continue;
            std::copy_n(k.begin() + t * n_embd, n_embd, want_k.begin() + p * n_embd);
            std::copy_n(v.begin() + t * n_embd, n_embd, want_v.begin() + p * n_embd);
        }
        expect_exact(rk.download(), want_k, "kv_store K region");
        expect_exact(rv.download(), want_v, "kv_store V region");
    }
}

// ---- attention (AttnCase, kAttnShapes, TestRegion, the budgets and check_attention: attn_test_util.h)

// Decode (nt == 1) with n_ctx 2048, so the keys are split over several blocks (split-K): positions
// up to 63 fit one split (8 tiles of 8 keys), 64 takes a second, 1000 and 2047 (the region's last row)
// use every split; q_stride is wider for every other shape; one short region (fewer rows than the usual
// split count) and one sharp softmax (large q).
TEST(CudaOps, AttentionDecode) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(808);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i) {
        const AttnCase& c = kAttnShapes[i];
        const cuda::AttnShape a{c.n_head, c.n_head_kv, c.head_dim, c.n_head * c.head_dim, 1.0f};
        EXPECT_GT(cuda::attention_splits(a, 1, 2048), 1)
            << "decode at n_ctx 2048 is meant to exercise split-K";
        for (int32_t p : {0, 1, 7, 37, 63, 64, 1000, 2047})
            check_attention(c, {p}, 2048, i % 2 == 1, 1.0f, rng);
        check_attention(c, {4}, 5, i % 2 == 0, 1.0f, rng);
    }
    check_attention(kAttnShapes[0], {1000}, 2048, false, 8.0f, rng);
    check_attention(kAttnShapes[3], {1500}, 2048, true, 6.0f, rng);
}

// Prefill (nt > 1): causal, pos[t] = n_past + t, over a region whose later rows hold random data.
TEST(CudaOps, AttentionPrefill) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(909);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i)
        for (auto [nt, n_past] : {std::pair<int, int>{5, 0}, {17, 45}, {2, 300}}) {
            Pos pos(static_cast<size_t>(nt));
            for (int t = 0; t < nt; ++t) pos[size_t(t)] = n_past + t;
            check_attention(kAttnShapes[i], pos, 512, i % 2 == 1, 1.0f, rng);
        }
}

// A sliding window: each query sees its last `window` positions only; windows that start inside and on
// the kernel's 8-key tiles, shorter and longer than a split's share, decode and prefill rows.
TEST(CudaOps, AttentionSlidingWindow) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(919);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i)
        for (int64_t window : {1, 5, 16, 100, 1024}) {
            for (int32_t p : {0, 3, 17, 64, 1000, 2047})
                check_attention(kAttnShapes[i], {p}, 2048, i % 2 == 1, 1.0f, rng, AttnKernel::Decode, window);
            Pos pos(9);
            for (int t = 0; t < 9; ++t) pos[size_t(t)] = 290 + t;
            check_attention(kAttnShapes[i], pos, 512, i % 2 == 0, 1.0f, rng, AttnKernel::Decode, window);
        }
}

// Attention sinks (gpt-oss): decode rows (split and unsplit keys), with and without a window, and the
// query-tiled prefill kernel; each against attention_ref with the same sinks, in the kernel's budget (a
// sink only adds a term to the softmax's sum).
TEST(CudaOps, AttentionSinks) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(929);
    for (size_t i = 0; i < std::size(kAttnShapes); ++i)
        for (int64_t window : {0, 16}) {
            for (int32_t p : {0, 5, 64, 1500})
                check_attention(kAttnShapes[i], {p}, 2048, i % 2 == 1, 1.0f, rng, AttnKernel::Decode, window,
                                true);
            Pos pos(70);
            for (int t = 0; t < 70; ++t) pos[size_t(t)] = 100 + t;
            check_attention(kAttnShapes[i], pos, 512, i % 2 == 0, 1.0f, rng, AttnKernel::Prefill, window,
                            true);
        }
}

// ---- qkv_epilogue

struct EpiCase {
    const char* name;
    int64_t n_head, n_head_kv, head_dim, n_rot;
    bool neox;
    float base;
    bool biases, norms, fused;  // fused: Q, K, V are column ranges of one [nt][q + k + v] buffer
};

// Where each of Q, K, V starts in the one input buffer, and its row stride.
struct EpiLayout {
    int64_t q_base, q_stride, k_base, k_stride, v_base, v_stride, size;
};

EpiLayout epi_layout(const EpiCase& c, int64_t nt) {
    const int64_t nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim;
    if (c.fused) {
        const int64_t w = nq + 2 * nkv;
        return {0, w, nq, w, nq + nkv, w, nt * w};
    }
    const int64_t qs = nq + 3, ks = nkv + 1, vs = nkv;  // padded and unpadded strides
    return {0, qs, nt * qs, ks, nt * (qs + ks), vs, nt * (qs + ks + vs)};
}

// One head as the epilogue should leave it: bias (an f32 add, as the kernel does), RMSNorm, RoPE.
Vec expected_head(const float* src, const float* bias, const float* norm, const EpiCase& c, float eps,
                  int32_t pos, bool rope) {
    const int64_t hd = c.head_dim;
    Vec x(src, src + hd);
    if (bias)
        for (int64_t d = 0; d < hd; ++d) x[size_t(d)] += bias[d];
    if (norm) {
        Vec y(sz(hd));
        cpu::rms_norm_ref(x.data(), norm, y.data(), hd, eps);
        x = y;
    }
    if (rope) cpu::rope_ref(x.data(), 1, hd, c.n_rot, pos, {c.base}, c.neox);
    return x;
}

// Host inputs of one epilogue test and the expected results with their budgets.
struct EpiData {
    Vec in, bq, bk, bv, qn, kn;
    Vec q_out, k_reg, v_reg;  // expected
    Tol q_tol, k_tol, v_tol;
};

// Budget for the rotated heads: the bias add is the same f32 add on both sides; RMSNorm over hd <= 128
// is <= ~12 roundings on the sum of squares (halved through the rsqrt) + 2 ulp rsqrtf + 2 multiplies:
// <= 6e-7 |y|; RoPE adds <= 6e-7 max|y| (see Rope) and carries the norm's error through a rotation:
// <= 1.5e-6 * max|head| in all. Budget: 5e-6 * max|expected head|. V is a copy or one f32 add: exact.
void set_expected_head(const Vec& head, Vec& want, Tol& tol, int64_t at, bool exact) {
    std::copy(head.begin(), head.end(), want.begin() + at);
    const double m = max_abs(head.data(), int64_t(head.size()));
    std::fill_n(tol.begin() + at, head.size(), exact ? 0.0 : 5e-6 * m);
}

void expected_epilogue(const EpiCase& c, const EpiLayout& l, const Pos& pos, int64_t n_ctx, float eps,
                       EpiData& e) {
    const int64_t hd = c.head_dim, nq = c.n_head * hd, nkv = c.n_head_kv * hd;
    e.q_out.assign(size_t(int64_t(pos.size()) * nq), 0.0f);
    e.q_tol.assign(e.q_out.size(), 0.0);
    e.k_tol.assign(e.k_reg.size(), 0.0);
    e.v_tol.assign(e.v_reg.size(), 0.0);
    const float* qn = c.norms ? e.qn.data() : nullptr;
    const float* kn = c.norms ? e.kn.data() : nullptr;
    for (size_t t = 0; t < pos.size(); ++t) {
        const int64_t ti = int64_t(t), p = pos[t];
        const bool stored = p >= 0 && p < n_ctx;
        for (int64_t h = 0; h < c.n_head; ++h) {
            const float* src = e.in.data() + l.q_base + ti * l.q_stride + h * hd;
            const Vec x =
                expected_head(src, c.biases ? e.bq.data() + h * hd : nullptr, qn, c, eps, pos[t], true);
            set_expected_head(x, e.q_out, e.q_tol, ti * nq + h * hd, false);
        }
        for (int64_t h = 0; h < c.n_head_kv && stored; ++h) {
            const float* ks = e.in.data() + l.k_base + ti * l.k_stride + h * hd;
            const float* vs = e.in.data() + l.v_base + ti * l.v_stride + h * hd;
            const Vec k =
                expected_head(ks, c.biases ? e.bk.data() + h * hd : nullptr, kn, c, eps, pos[t], true);
            const Vec v =
                expected_head(vs, c.biases ? e.bv.data() + h * hd : nullptr, nullptr, c, eps, 0, false);
            set_expected_head(k, e.k_reg, e.k_tol, p * nkv + h * hd, false);
            set_expected_head(v, e.v_reg, e.v_tol, p * nkv + h * hd, true);
        }
    }
}

// Scales the last token's Q, K and V by 1e-3, so that its mean squares (~1e-6) make eps matter.
void scale_last_token(const EpiCase& c, const EpiLayout& l, int64_t nt, Vec& in) {
    const int64_t nq = c.n_head * c.head_dim, nkv = c.n_head_kv * c.head_dim;
    const int64_t parts[3][3] = {
        {l.q_base, l.q_stride, nq}, {l.k_base, l.k_stride, nkv}, {l.v_base, l.v_stride, nkv}};
    for (const auto& p : parts)
        for (int64_t i = 0; i < p[2]; ++i) in[sz(p[0] + (nt - 1) * p[1] + i)] *= 1e-3f;
}

// Runs the epilogue for tokens at `pos` (one may be out of range: its Q is still produced, its K and V
// are not stored) and checks q_out and the whole region (rows not written keep their contents, as do
// two guard rows past n_ctx).
void check_epilogue(const EpiCase& c, const Pos& pos, bool table, std::mt19937& rng) {
    const int64_t nt = int64_t(pos.size()), hd = c.head_dim, nq = c.n_head * hd, nkv = c.n_head_kv * hd;
    const int64_t n_ctx = 32;
    const float eps = 1e-6f;
    SCOPED_TRACE(std::string(c.name) + ", nt " + std::to_string(nt) +
                 (table ? ", RoPE table" : ", angles evaluated"));
    const EpiLayout l = epi_layout(c, nt);
    EpiData e;
    e.in = uniform(rng, l.size, -2.0f, 2.0f);
    e.bq = uniform(rng, nq, -0.5f, 0.5f), e.bk = uniform(rng, nkv, -0.5f, 0.5f),
    e.bv = uniform(rng, nkv, -0.5f, 0.5f);
    e.qn = uniform(rng, hd, 0.5f, 1.5f), e.kn = uniform(rng, hd, 0.5f, 1.5f);
    if (nt > 1) scale_last_token(c, l, nt, e.in);
    const int64_t n_alloc = (n_ctx + 2) * nkv;  // the region and two guard rows
    const Vec k0 = uniform(rng, n_alloc, 5.0f, 6.0f), v0 = uniform(rng, n_alloc, 7.0f, 8.0f);
    e.k_reg = k0, e.v_reg = v0;
    expected_epilogue(c, l, pos, n_ctx, eps, e);

    DeviceBuffer<float> din(e.in), dbq(e.bq), dbk(e.bk), dbv(e.bv), dqn(e.qn), dkn(e.kn);
    DeviceBuffer<float> dq_out(size_t(nt * nq)), rk(k0), rv(v0);
    DeviceBuffer<int32_t> dpos(pos);
    fill_nan(dq_out, nt * nq);
    cuda::QkvEpilogue ep{cuda::RopeShape{c.n_head, hd, c.n_rot, c.base, c.neox},
                         c.n_head_kv,
                         c.biases ? dbq.get() : nullptr,
                         c.biases ? dbk.get() : nullptr,
                         c.biases ? dbv.get() : nullptr,
                         c.norms ? dqn.get() : nullptr,
                         c.norms ? dkn.get() : nullptr,
                         eps,
                         l.q_stride,
                         l.k_stride,
                         l.v_stride,
                         {}};
    DeviceBuffer<float> cs(sz(n_ctx * c.n_rot));
    if (table) cuda::rope_table(ep.rope, n_ctx, cs.get(), nullptr);
    ep.table = {table ? cs.get() : nullptr, n_ctx};
    const float* base = din.get();
    cuda::qkv_epilogue(base + l.q_base, base + l.k_base, base + l.v_base, dpos.get(), nt, ep, dq_out.get(),
                       cuda::KvRegion{rk.get(), rv.get(), nkv, n_ctx}, nullptr);
    sync();
    expect_within(dq_out.download(), e.q_out, e.q_tol, "qkv_epilogue q_out");
    expect_within(rk.download(), e.k_reg, e.k_tol, "qkv_epilogue K region");
    expect_within(rv.download(), e.v_reg, e.v_tol, "qkv_epilogue V region");
}

TEST(CudaOps, QkvEpilogue) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1010);
    const EpiCase cases[] = {
        {"qwen2-like (biases, fused QKV)", 14, 2, 64, 64, true, 1e6f, true, false, true},
        {"qwen3-like (q/k norms)", 16, 8, 128, 128, true, 1e6f, false, true, false},
        {"normal rope, partial n_rot, head_dim 40, biases and norms", 6, 3, 40, 24, false, 1e4f, true, true,
         false},
        {"normal rope, head_dim 96, fused", 4, 2, 96, 96, false, 5e5f, false, false, true},
        {"neox, partial n_rot, biases", 4, 4, 128, 64, true, 1e4f, true, false, false},
    };
    for (const EpiCase& c : cases)
        for (const bool table : {true, false}) {
            check_epilogue(c, {int32_t(rng() % 32)}, table, rng);
            check_epilogue(c, {3, 31, 32, 0, 17}, table, rng);  // 32 == n_ctx: Q only, angles evaluated
        }
}

}  // namespace
}  // namespace minfer::test
