// CUDA quant kernels (backend/cuda/quant_cuda.h) against the CPU reference traits: matvec and
// matvec_swiglu within a stated rounding budget (against the product with x as the kernel takes it: int8
// for cuda::matvec_int8_x, see quantized_x), dequant_f32 / get_rows bit-exact with to_float_ref, and
// dequant_f16 equal to to_float_ref rounded to the nearest half. Skipped where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_mma.h"
#include "cuda/cuda_test_util.h"
#include "cuda/quant_ref_util.h"
#include "quants/quant_test_util.h"
#include "util/error.h"

namespace minfer::test {
namespace {

using cuda::QMatrix;

// Rounding budget of the matvec kernels. Dense rows are multiplied as values; quantized rows as integer
// levels (exact products with x) summed in runs of at most 16 per lane and then mapped back, a * s + b *
// sum(x), so each output is a sum along chains of at most ~64 roundings (a run, the lane's running sum
// over its share of the row, a 5-level warp shuffle tree, an 8-warp sum, bias, residual):
// |y - ref| <= 64 * 2^-24 * (sum_i |w_i x_i| + |bias| + |res|) ~ 3.8e-6 * (...) for dense rows. For
// quantized rows the run sums carry |a level| + |b| >= |w| per weight (up to ~6x |w| for Q8_0's levels
// biased by 128), so that linear bound is looser, but the roundings have random signs and the observed
// worst error stays far inside the asserted budget, 1e-5 * (...) + 1e-6, which each test reports as
// "worst error / budget". A misplaced nibble or scale gives errors of the order of the row's magnitude.
constexpr double kRelBudget = 1e-5, kAbsBudget = 1e-6;

std::string type_name(const ::testing::TestParamInfo<GgmlType>& info) {
    return traits(info.param).name;
}

// Row lengths: several blocks (and super-blocks), including the dense types' lengths that are not a
// multiple of 4 (the kernels' 1-wide path).
std::vector<int64_t> row_lengths(const QuantTraits& q) {
    if (q.block_size == 1) return {7, 100, 257, 4864};
    if (q.block_size == 32) return {32, 96, 4864, 18944};  // one token of 18944: x read from global memory
    return {256, 768, 4864, 18944};
}

const int64_t kRowCounts[] = {1, 7, 131};
const int64_t kTokenCounts[] = {1, 2, 5, 8};
constexpr int64_t kMaxTokens = cuda::kMaxMatvecTokens;

// The reference of nt tokens: with x itself, or with quantized_x(x) where the kernel takes x as int8.
const RefDots& pick_ref(const QMatrix& qm, int64_t nt, const RefDots& exact, const RefDots& int8) {
    return cuda::matvec_int8_x(qm, nt) ? int8 : exact;
}

// y = W x (+ bias) (+ res) for one way of passing bias and residual.
enum class Extra { kNone, kBias, kRes, kBiasResInPlace };
const Extra kExtras[] = {Extra::kNone, Extra::kBias, Extra::kRes, Extra::kBiasResInPlace};

constexpr int kGuard = 64;  // floats after y that no kernel may write
const uint32_t kSentinel = 0x7fc0dead;

std::vector<float> sentinel_floats(size_t n) {
    std::vector<float> v(n);
    for (float& f : v) std::memcpy(&f, &kSentinel, 4);
    return v;
}

void expect_guard_intact(const std::vector<float>& y, size_t n, const std::string& ctx) {
    for (size_t i = n; i < y.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &y[i], 4);
        ASSERT_EQ(u, kSentinel) << ctx << ": wrote past the output at " << i - n;
    }
}

void report_worst_ratio(double worst) {
    std::printf("[ budget   ] worst matvec error / budget: %.4f\n", worst);
}

// How a matrix is laid out on the device: the GGUF block layout, tiled by tile_matrix (Q4_K), or padded
// by pad_matrix (Q6_K); the int8 layouts take one token's x as int8 (one level or two, X2), through
// matvec or (Once) through quantize_x8 and matvec_x8.
enum class Layout { kBlocks, kTiled, kPadded, kInt8, kInt8Once, kInt8X2, kInt8X2Once };

const char* layout_name(Layout l) {
    switch (l) {
        case Layout::kTiled:
            return "tiled ";
        case Layout::kPadded:
            return "padded ";
        case Layout::kInt8:
            return "int8 ";
        case Layout::kInt8Once:
            return "int8 once ";
        case Layout::kInt8X2:
            return "int8x2 ";
        case Layout::kInt8X2Once:
            return "int8x2 once ";
        default:
            return "";
    }
}

cuda::XQuant xq_of(Layout l) {
    if (l == Layout::kInt8 || l == Layout::kInt8Once) return cuda::XQuant::kInt8;
    if (l == Layout::kInt8X2 || l == Layout::kInt8X2Once) return cuda::XQuant::kInt8x2;
    return cuda::XQuant::kF32;
}
bool is_int8(Layout l) {
    return xq_of(l) != cuda::XQuant::kF32;
}
bool is_once(Layout l) {
    return l == Layout::kInt8Once || l == Layout::kInt8X2Once;
}

// Whether the matrix is padded: the padded layout, and Q6_K for the int8 kernels (which read it padded).
bool pads(const HostMatrix& w, Layout l) {
    return l == Layout::kPadded || (is_int8(l) && w.type == GgmlType::Q6_K);
}

size_t stored_bytes(const HostMatrix& w, Layout l) {
    if (pads(w, l)) return size_t(cuda::padded_row_bytes(w.type, w.n_in) * w.n_out);
    return l == Layout::kTiled ? w.bytes.size() : 0;
}

struct DeviceMatrix {
    DeviceBuffer<uint8_t> raw, repacked;
    QMatrix qm;
    DeviceMatrix(const HostMatrix& w, Layout l)
        : raw(w.bytes), repacked(stored_bytes(w, l)), qm{w.type, raw.get(), w.n_in, w.n_out} {
        qm.xq = xq_of(l);
        const bool tiled = l == Layout::kTiled, padded = pads(w, l);
        if (!tiled && !padded) return;
        TestStream s;
        if (tiled)
            cuda::tile_matrix(qm, repacked.get(), s.get());
        else
            cuda::pad_matrix(qm, repacked.get(), s.get());
        s.sync();
        qm = {w.type, repacked.get(), w.n_in, w.n_out, tiled, padded, xq_of(l)};
    }
};

// Runs matvec for every token count and Extra on one matrix and checks every output against `ref`;
// raises `worst` to the largest |error| / budget seen. x is Gaussian times x_scale.
void check_matvec(const HostMatrix& w, std::mt19937& rng, double& worst, Layout layout = Layout::kBlocks,
                  float x_scale = 1.0f) {
    std::vector<float> x = gaussian(rng, kMaxTokens * w.n_in);
    for (float& v : x) v *= x_scale;
    const std::vector<float> bias = gaussian(rng, w.n_out), res = gaussian(rng, kMaxTokens * w.n_out);
    const RefDots exact = reference_dots(w, x, kMaxTokens);
    const RefDots int8 = reference_dots(w, quantized_x(x, xq_of(layout)), 1);
    const DeviceMatrix dw(w, layout);
    DeviceBuffer<float> dx(x), dbias(bias), dres(res);
    const QMatrix& qm = dw.qm;
    TestStream s;
    for (int64_t nt : kTokenCounts)
        for (Extra e : kExtras) {
            const std::string ctx = layout_name(layout) + std::string(traits(w.type).name) + " " +
                                    std::to_string(w.n_out) + "x" + std::to_string(w.n_in) +
                                    " nt=" + std::to_string(nt) + " extra=" + std::to_string(int(e));
            const size_t n = size_t(nt * w.n_out);
            std::vector<float> y0 = sentinel_floats(n + kGuard);
            if (e == Extra::kBiasResInPlace) std::copy(res.begin(), res.begin() + n, y0.begin());
            DeviceBuffer<float> dy(y0);
            const bool has_bias = e == Extra::kBias || e == Extra::kBiasResInPlace;
            const float* res_ptr = e == Extra::kRes              ? dres.get()
                                   : e == Extra::kBiasResInPlace ? dy.get()
                                                                 : nullptr;
            const RefDots& ref = pick_ref(qm, nt, exact, int8);
            const float* bias_ptr = has_bias ? dbias.get() : nullptr;
            if (is_once(layout) && nt == 1) {
                DeviceBuffer<uint8_t> x8(cuda::int8_x_bytes(qm.xq, w.n_in));
                cuda::quantize_x8(dx.get(), w.n_in, qm.xq, x8.get(), s.get());
                cuda::matvec_x8(qm, x8.get(), dy.get(), bias_ptr, res_ptr, s.get());
            } else {
                cuda::matvec(qm, dx.get(), nt, dy.get(), bias_ptr, res_ptr, s.get());
            }
            s.sync();
            const std::vector<float> y = dy.download();
            for (size_t k = 0; k < n; ++k) {
                const size_t r = k % size_t(w.n_out);
                const double b = has_bias ? bias[r] : 0.0, rs = res_ptr ? res[k] : 0.0;
                const double want = ref.dot[k] + b + rs;
                const double tol = kRelBudget * (ref.mag[k] + std::fabs(b) + std::fabs(rs)) + kAbsBudget;
                ASSERT_NEAR(y[k], want, tol) << ctx << " token " << k / w.n_out << " row " << r;
                worst = std::max(worst, std::fabs(y[k] - want) / tol);
            }
            expect_guard_intact(y, n, ctx);
        }
}

// matvec_swiglu against silu(g) * u of the reference dots g, u. With e_g, e_u the matvec budgets of g and
// u, |silu'| <= 1.1 and a few ulps for expf, the division and the product:
// |y - ref| <= 1.1 |u| e_g + |silu(g)| e_u + e_g e_u + 1e-6 |silu(g) u| + 1e-6.
void check_swiglu(const HostMatrix& gate, const HostMatrix& up, std::mt19937& rng,
                  Layout layout = Layout::kBlocks) {
    const std::vector<float> x = gaussian(rng, kMaxTokens * gate.n_in);
    const RefDots g_exact = reference_dots(gate, x, kMaxTokens), u_exact = reference_dots(up, x, kMaxTokens);
    const std::vector<double> xq = quantized_x(x, xq_of(layout));
    const RefDots g_int8 = reference_dots(gate, xq, 1), u_int8 = reference_dots(up, xq, 1);
    const DeviceMatrix dg(gate, layout), du(up, layout);
    DeviceBuffer<float> dx(x);
    TestStream s;
    for (int64_t nt : kTokenCounts) {
        const size_t n = size_t(nt * gate.n_out);
        const RefDots &g = pick_ref(dg.qm, nt, g_exact, g_int8), &u = pick_ref(dg.qm, nt, u_exact, u_int8);
        DeviceBuffer<float> dy(sentinel_floats(n + kGuard));
        cuda::matvec_swiglu(dg.qm, du.qm, dx.get(), nt, dy.get(), s.get());
        s.sync();
        const std::vector<float> y = dy.download();
        const std::string ctx = layout_name(layout) + std::string(traits(gate.type).name) + " " +
                                std::to_string(gate.n_out) + "x" + std::to_string(gate.n_in) +
                                " nt=" + std::to_string(nt);
        for (size_t k = 0; k < n; ++k) {
            const double eg = kRelBudget * g.mag[k] + kAbsBudget, eu = kRelBudget * u.mag[k] + kAbsBudget;
            const double silu = g.dot[k] / (1.0 + std::exp(-g.dot[k]));
            const double want = silu * u.dot[k];
            const double tol = 1.1 * std::fabs(u.dot[k]) * eg + std::fabs(silu) * eu + eg * eu +
                               1e-6 * std::fabs(want) + kAbsBudget;
            ASSERT_NEAR(y[k], want, tol) << ctx << " token " << k / gate.n_out << " row " << k % gate.n_out;
        }
        expect_guard_intact(y, n, ctx);
    }
}

template <class T>
void expect_bits_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& ctx) {
    ASSERT_GE(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
            << ctx << ": element " << i << " got " << float(got[i]) << " want " << float(want[i]);
}

class CudaQuant : public ::testing::TestWithParam<GgmlType> {};

TEST_P(CudaQuant, MatvecMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(1234 + int(GetParam()));
    double worst = 0.0;
    for (int64_t n_in : row_lengths(traits(GetParam())))
        for (int64_t n_out : kRowCounts) {
            check_matvec(quantized_matrix(GetParam(), n_out, n_in, rng), rng, worst);
            if (HasFatalFailure()) return;
        }
    report_worst_ratio(worst);
}

// Random bytes reach every quant level, scale bit and sign the quantizer may not produce.
TEST_P(CudaQuant, MatvecOnRandomBlocks) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(99 + int(GetParam()));
    const int64_t n_in = traits(GetParam()).block_size == 1 ? 1000 : 1024;
    double worst = 0.0;
    check_matvec(random_matrix(GetParam(), 37, n_in, rng), rng, worst);
    report_worst_ratio(worst);
}

TEST_P(CudaQuant, MatvecSwigluMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(77 + int(GetParam()));
    for (int64_t n_in : row_lengths(traits(GetParam())))
        for (int64_t n_out : {int64_t(1), int64_t(131)}) {
            const HostMatrix gate = quantized_matrix(GetParam(), n_out, n_in, rng);
            check_swiglu(gate, quantized_matrix(GetParam(), n_out, n_in, rng), rng);
            if (HasFatalFailure()) return;
        }
}

// Tall matrices: the one-token layouts with two and four rows per warp group, which the kernels pick
// only when those still fill the GPU (small matrices above run one row, or one gate/up pair, per group).
TEST_P(CudaQuant, MatvecTallMatrices) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(31 + int(GetParam()));
    double worst = 0.0;
    for (int64_t n_out : {int64_t(9001), int64_t(40001)}) {
        check_matvec(quantized_matrix(GetParam(), n_out, 256, rng), rng, worst);
        if (HasFatalFailure()) return;
    }
    report_worst_ratio(worst);
    const HostMatrix gate = quantized_matrix(GetParam(), 9001, 256, rng);
    check_swiglu(gate, quantized_matrix(GetParam(), 9001, 256, rng), rng);
}

// dequant_f32 equals to_float_ref bit for bit, dequant_f16 the same rounded to the nearest half.
void check_dequant(const HostMatrix& w, Layout layout) {
    const std::string ctx = layout_name(layout) + std::string(traits(w.type).name) + " " +
                            std::to_string(w.n_out) + "x" + std::to_string(w.n_in);
    const DeviceMatrix dw(w, layout);
    DeviceBuffer<float> out32(w.values.size());
    DeviceBuffer<uint16_t> out16(w.values.size());
    TestStream s;
    cuda::dequant_f32(dw.qm, out32.get(), s.get());
    cuda::dequant_f16(dw.qm, out16.get(), s.get());
    s.sync();
    expect_bits_equal(out32.download(), w.values, ctx + " f32");
    std::vector<uint16_t> want16(w.values.size());
    for (size_t i = 0; i < want16.size(); ++i) want16[i] = f32_to_fp16(w.values[i]);
    expect_bits_equal(out16.download(), want16, ctx + " f16");
}

TEST_P(CudaQuant, DequantBitExact) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(5 + int(GetParam()));
    for (int64_t n_in : row_lengths(traits(GetParam())))
        for (int64_t n_out : kRowCounts) {
            check_dequant(random_matrix(GetParam(), n_out, n_in, rng), Layout::kBlocks);
            if (HasFatalFailure()) return;
        }
}

TEST_P(CudaQuant, GetRowsBitExact) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(11 + int(GetParam()));
    const QuantTraits& q = traits(GetParam());
    const int64_t n_in = q.block_size == 1 ? 257 : 4 * q.block_size, n_out = 131;
    const HostMatrix w = random_matrix(GetParam(), n_out, n_in, rng);
    DeviceBuffer<uint8_t> dw(w.bytes);
    TestStream s;
    for (int64_t nt : {1, 3, 17}) {
        std::vector<int32_t> ids(static_cast<size_t>(nt));
        for (int32_t& id : ids) id = int32_t(rng() % uint32_t(n_out));
        ids.back() = int32_t(n_out - 1);
        DeviceBuffer<int32_t> dids(ids);
        const size_t n = size_t(nt * n_in);
        DeviceBuffer<float> out(sentinel_floats(n + kGuard));
        cuda::get_rows({w.type, dw.get(), n_in, n_out}, dids.get(), nt, out.get(), s.get());
        s.sync();
        std::vector<float> want(n);
        for (int64_t t = 0; t < nt; ++t)
            std::copy_n(w.values.begin() + ids[size_t(t)] * n_in, n_in, want.begin() + t * n_in);
        const std::vector<float> got = out.download();
        expect_bits_equal(got, want, std::string(q.name) + " nt=" + std::to_string(nt));
        expect_guard_intact(got, n, q.name);
    }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, CudaQuant, ::testing::ValuesIn(kAllQuantTypes), type_name);

// Q4_K tiled for the tensor-core kernels: the same budgets as the block layout. Its products take x as
// two halves (22 significant bits of x * 2^e) and sum exact levels in f32, within the budget above.
const int64_t kTiledIn[] = {256, 768, 4864, 8192};
const int64_t kTiledOut[] = {16, 48, 1024};

// check_matvec on quantized n_out x n_in matrices of type t in layout l, for every n_in of ins and n_out
// of outs, then on a random_out x random_in matrix of random blocks; reports the worst error / budget.
void check_matvec_grid(GgmlType t, Layout l, std::span<const int64_t> ins, std::span<const int64_t> outs,
                       int64_t random_out, int64_t random_in, std::mt19937 rng) {
    double worst = 0.0;
    for (int64_t n_in : ins)
        for (int64_t n_out : outs) {
            check_matvec(quantized_matrix(t, n_out, n_in, rng), rng, worst, l);
            if (::testing::Test::HasFatalFailure()) return;
        }
    check_matvec(random_matrix(t, random_out, random_in, rng), rng, worst, l);
    report_worst_ratio(worst);
}

TEST(CudaTiledQ4K, MatvecMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    check_matvec_grid(GgmlType::Q4_K, Layout::kTiled, kTiledIn, kTiledOut, 9008, 512, std::mt19937(4242));
}

// x far from 1 in magnitude: the per-call power of two keeps both halves in the normal half range.
TEST(CudaTiledQ4K, MatvecScaledInputs) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(17);
    double worst = 0.0;
    for (float scale : {1e-20f, 1e-4f, 3e4f, 1e12f}) {
        check_matvec(random_matrix(GgmlType::Q4_K, 64, 1024, rng), rng, worst, Layout::kTiled, scale);
        if (HasFatalFailure()) return;
    }
    report_worst_ratio(worst);
}

TEST(CudaTiledQ4K, MatvecSwigluMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(99);
    for (int64_t n_in : kTiledIn)
        for (int64_t n_out : {int64_t(16), int64_t(4864)}) {
            const HostMatrix gate = quantized_matrix(GgmlType::Q4_K, n_out, n_in, rng);
            check_swiglu(gate, quantized_matrix(GgmlType::Q4_K, n_out, n_in, rng), rng, Layout::kTiled);
            if (HasFatalFailure()) return;
        }
}

// Q4_K and padded Q6_K taking one token's x as int8 (QMatrix::xq, the dp4a kernels), one level or two,
// against the product with quantized_x(x) within the same budget; more tokens take the f32 kernels. Row
// lengths from one super-block to the most that is staged (74), so that warps split long rows of few-row
// matrices; 40001 rows of 256 make the thread blocks loop over many tiles.
const int64_t kInt8In[] = {256, 768, 3584, 4864, 18944};
const int64_t kInt8Out[] = {1, 7, 131, 1024};

using Int8Case = std::tuple<GgmlType, cuda::XQuant>;
class CudaInt8 : public ::testing::TestWithParam<Int8Case> {
  protected:
    GgmlType type() const { return std::get<0>(GetParam()); }
    bool two() const { return std::get<1>(GetParam()) == cuda::XQuant::kInt8x2; }
    Layout staged() const { return two() ? Layout::kInt8X2 : Layout::kInt8; }
    Layout once() const { return two() ? Layout::kInt8X2Once : Layout::kInt8Once; }
};

TEST_P(CudaInt8, MatvecMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    check_matvec_grid(type(), staged(), kInt8In, kInt8Out, 40001, 256, std::mt19937(5150));
}

// x quantized once by its own kernel (quantize_x8, matvec_x8): the same products.
TEST_P(CudaInt8, QuantizedOnceMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    check_matvec_grid(type(), once(), kInt8In, kInt8Out, 9001, 512, std::mt19937(5151));
}

// x of every magnitude, and x = 0 (every block's scale 0, so q = 0 rather than 0 / 0).
TEST_P(CudaInt8, MatvecScaledInputs) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(23);
    double worst = 0.0;
    for (Layout l : {staged(), once()})
        for (float scale : {0.0f, 1e-20f, 1e-4f, 3e4f, 1e12f}) {
            check_matvec(random_matrix(type(), 64, 1024, rng), rng, worst, l, scale);
            if (HasFatalFailure()) return;
        }
    report_worst_ratio(worst);
}

TEST_P(CudaInt8, MatvecSwigluMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(61);
    for (int64_t n_in : {256, 3584, 18944})
        for (int64_t n_out : {1, 131, 9001}) {
            const HostMatrix gate = quantized_matrix(type(), n_out, n_in, rng);
            check_swiglu(gate, quantized_matrix(type(), n_out, n_in, rng), rng, staged());
            if (HasFatalFailure()) return;
        }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaInt8,
                         ::testing::Combine(::testing::Values(GgmlType::Q4_K, GgmlType::Q6_K),
                                            ::testing::Values(cuda::XQuant::kInt8, cuda::XQuant::kInt8x2)),
                         [](const auto& info) {
                             return std::string(traits(std::get<0>(info.param)).name) +
                                    (std::get<1>(info.param) == cuda::XQuant::kInt8x2 ? "_x2" : "_x1");
                         });

// quantize_x8's two-level x is the CPU's quantize_q8x2, bit for bit: every level, every step, and the
// half sums as d * (254 sum hi + sum lo), over Gaussian x with a zero block and outliers.
TEST(CudaInt8Api, QuantizeX2MatchesCpu) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(88);
    const int64_t n = 4864, nb = n / 256;
    std::vector<float> x = gaussian(rng, n);
    std::fill_n(x.begin() + 64, 32, 0.0f);
    x[300] = 1e4f, x[1001] = -3e-3f;
    std::vector<uint8_t> cpu(act_x2_row_bytes(n));
    traits(GgmlType::Q8_0).quantize_x2_ref(x.data(), cpu.data(), n);
    const auto* b = reinterpret_cast<const quants::BlockQ8X2*>(cpu.data());
    DeviceBuffer<float> dx(x);
    DeviceBuffer<uint8_t> x8(cuda::int8_x_bytes(cuda::XQuant::kInt8x2, n));
    cuda::quantize_x8(dx.get(), n, cuda::XQuant::kInt8x2, x8.get(), nullptr);
    MINFER_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = x8.download();
    const auto* meta = reinterpret_cast<const float*>(got.data() + nb * 512);
    for (int64_t e = 0; e < n; ++e) {
        const int64_t sb = e / 256, i = e % 256, blk = e / 32, half = i % 64 / 32;
        const int64_t k = 2 * (i / 64) + i % 32 / 16, pos = sb * 512 + half * 128 + k * 16 + i % 16;
        ASSERT_EQ(int8_t(got[size_t(pos)]), b[blk].hi[e % 32]) << "hi level of element " << e;
        ASSERT_EQ(int8_t(got[size_t(pos + 256)]), b[blk].lo[e % 32]) << "lo level of element " << e;
        const float* m = meta + (sb * 8 + k) * 4;
        ASSERT_EQ(m[half], b[blk].d) << "step of element " << e;
        int sum = 0;
        for (int64_t l = e / 16 * 16; l < e / 16 * 16 + 16; ++l)
            sum += 254 * b[l / 32].hi[l % 32] + b[l / 32].lo[l % 32];
        ASSERT_EQ(m[2 + half], b[blk].d * float(sum)) << "half sum of element " << e;
    }
}

TEST(CudaInt8Api, FitsAndRefusals) {
    EXPECT_TRUE(cuda::dp4a_fits(GgmlType::Q4_K, 18944));
    EXPECT_TRUE(cuda::dp4a_fits(GgmlType::Q6_K, 4096));
    EXPECT_FALSE(cuda::dp4a_fits(GgmlType::Q4_K, 19200));
    EXPECT_FALSE(cuda::dp4a_fits(GgmlType::Q5_K, 4096));
    MINFER_SKIP_WITHOUT_GPU();
    DeviceBuffer<uint8_t> w(size_t(224 * 16)), x(size_t(4096 * 4)), y(64);
    const auto i8 = cuda::XQuant::kInt8;
    const QMatrix q5{GgmlType::Q5_K, w.get(), 256, 16, false, false, i8};
    const QMatrix q6{GgmlType::Q6_K, w.get(), 256, 16, false, false, i8};  // not padded
    const QMatrix q4_f32{GgmlType::Q4_K, w.get(), 256, 16};
    const auto* xf = reinterpret_cast<const float*>(x.get());
    auto* yf = reinterpret_cast<float*>(y.get());
    for (const QMatrix& m : {q5, q6}) {
        EXPECT_THROW(cuda::matvec(m, xf, 1, yf, nullptr, nullptr, nullptr), Error);
        EXPECT_THROW(cuda::matvec_swiglu(m, m, xf, 1, yf, nullptr), Error);
        EXPECT_THROW(cuda::matvec_x8(m, x.get(), yf, nullptr, nullptr, nullptr), Error);
    }
    EXPECT_THROW(cuda::matvec_x8(q4_f32, x.get(), yf, nullptr, nullptr, nullptr), Error) << "x in f32";
    const QMatrix q4_int8{GgmlType::Q4_K, w.get(), 256, 16, false, false, i8};
    const QMatrix q4_x2{GgmlType::Q4_K, w.get(), 256, 16, false, false, cuda::XQuant::kInt8x2};
    EXPECT_THROW(cuda::matvec_swiglu(q4_f32, q4_int8, xf, 1, yf, nullptr), Error) << "layouts differ";
    EXPECT_THROW(cuda::matvec_swiglu(q4_x2, q4_int8, xf, 1, yf, nullptr), Error) << "layouts differ";
    EXPECT_THROW(cuda::quantize_x8(xf, 100, i8, x.get(), nullptr), Error) << "not whole super-blocks";
    EXPECT_THROW(cuda::quantize_x8(xf, 256, cuda::XQuant::kF32, x.get(), nullptr), Error) << "no format";
}

TEST(CudaTiledQ4K, DequantBitExact) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(8);
    for (int64_t n_in : kTiledIn)
        for (int64_t n_out : kTiledOut) {
            check_dequant(random_matrix(GgmlType::Q4_K, n_out, n_in, rng), Layout::kTiled);
            if (HasFatalFailure()) return;
        }
}

TEST(CudaTiledQ4K, FitsAndRefusals) {
    EXPECT_TRUE(cuda::tiles_fit(GgmlType::Q4_K, 3584, 18944));
    EXPECT_FALSE(cuda::tiles_fit(GgmlType::Q4_K, 18944, 3584));  // x beyond shared memory's share
    EXPECT_FALSE(cuda::tiles_fit(GgmlType::Q4_K, 3584, 20));     // not whole tiles
    EXPECT_FALSE(cuda::tiles_fit(GgmlType::Q6_K, 3584, 3584));
    MINFER_SKIP_WITHOUT_GPU();
    DeviceBuffer<float> buf(8192);
    const QMatrix tiled{GgmlType::Q4_K, buf.get(), 256, 16, true};
    EXPECT_THROW(cuda::tile_matrix(tiled, buf.get(), nullptr), Error);
    EXPECT_THROW(cuda::tile_matrix({GgmlType::Q4_K, buf.get(), 256, 20}, buf.get(), nullptr), Error);
    EXPECT_THROW(cuda::get_rows(tiled, reinterpret_cast<const int32_t*>(buf.get()), 1, buf.get(), nullptr),
                 Error);
    EXPECT_THROW(
        cuda::matvec_swiglu(tiled, {GgmlType::Q4_K, buf.get(), 256, 16}, buf.get(), 1, buf.get(), nullptr),
        Error);
    EXPECT_THROW(cuda::matvec(tiled, buf.get(), 9, buf.get(), nullptr, nullptr, nullptr), Error);
}

// Q6_K padded to 224-byte blocks: the same kernels and budgets as the block layout, on a tall matrix of
// random blocks too.
TEST(CudaPaddedQ6K, MatvecMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    const std::vector<int64_t> ins = row_lengths(traits(GgmlType::Q6_K)), outs = {1, 131};
    check_matvec_grid(GgmlType::Q6_K, Layout::kPadded, ins, outs, 9001, 256, std::mt19937(606));
}

TEST(CudaPaddedQ6K, MatvecSwigluMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(607);
    for (int64_t n_out : {int64_t(1), int64_t(131)}) {
        const HostMatrix gate = quantized_matrix(GgmlType::Q6_K, n_out, 768, rng);
        check_swiglu(gate, quantized_matrix(GgmlType::Q6_K, n_out, 768, rng), rng, Layout::kPadded);
        if (HasFatalFailure()) return;
    }
}

TEST(CudaPaddedQ6K, DequantAndGetRowsBitExact) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(608);
    for (int64_t n_in : row_lengths(traits(GgmlType::Q6_K))) {
        check_dequant(random_matrix(GgmlType::Q6_K, 7, n_in, rng), Layout::kPadded);
        if (HasFatalFailure()) return;
    }
    const HostMatrix w = random_matrix(GgmlType::Q6_K, 131, 1024, rng);
    const DeviceMatrix dw(w, Layout::kPadded);
    const std::vector<int32_t> ids = {130, 0, 77};
    DeviceBuffer<int32_t> dids(ids);
    DeviceBuffer<float> out(sentinel_floats(3 * 1024 + kGuard));
    TestStream s;
    cuda::get_rows(dw.qm, dids.get(), 3, out.get(), s.get());
    s.sync();
    std::vector<float> want;
    for (int32_t id : ids)
        want.insert(want.end(), w.values.begin() + id * 1024, w.values.begin() + (id + 1) * 1024);
    const std::vector<float> got = out.download();
    expect_bits_equal(got, want, "padded Q6_K get_rows");
    expect_guard_intact(got, want.size(), "padded Q6_K get_rows");
}

TEST(CudaPaddedQ6K, FitsAndRefusals) {
    EXPECT_TRUE(cuda::pads_fit(GgmlType::Q6_K));
    EXPECT_FALSE(cuda::pads_fit(GgmlType::Q4_K));
    EXPECT_EQ(cuda::padded_row_bytes(GgmlType::Q6_K, 512), 448);
    EXPECT_THROW(cuda::padded_row_bytes(GgmlType::Q8_0, 512), Error);
    MINFER_SKIP_WITHOUT_GPU();
    DeviceBuffer<float> buf(8192);
    EXPECT_THROW(cuda::pad_matrix({GgmlType::Q4_K, buf.get(), 256, 16}, buf.get(), nullptr), Error);
    const QMatrix padded_q8{GgmlType::Q8_0, buf.get(), 256, 16, false, true};
    EXPECT_THROW(cuda::matvec(padded_q8, buf.get(), 1, buf.get(), nullptr, nullptr, nullptr), Error);
    const QMatrix padded{GgmlType::Q6_K, buf.get(), 256, 16, false, true};
    EXPECT_THROW(cuda::pad_matrix(padded, buf.get(), nullptr), Error);
    EXPECT_THROW(
        cuda::matvec_swiglu(padded, {GgmlType::Q6_K, buf.get(), 256, 16}, buf.get(), 1, buf.get(), nullptr),
        Error);
}

TEST(CudaQuantApi, SupportedTypes) {
    for (GgmlType t : kAllQuantTypes) EXPECT_TRUE(cuda::quant_supported(t)) << traits(t).name;
    for (GgmlType t : {GgmlType::Q8_1, GgmlType::Q8_K, GgmlType::IQ2_XXS, GgmlType::I32})
        EXPECT_FALSE(cuda::quant_supported(t)) << ggml_type_name(t);
}

const GgmlType kLowbitTypes[] = {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                 GgmlType::MXFP4};

// The low-bit types take the block-layout kernels alone: no tiled, padded, int8-x or tensor-core path.
TEST(CudaQuantApi, LowbitTypesTakeTheBlockLayoutOnly) {
    for (GgmlType t : kLowbitTypes) {
        const char* name = ggml_type_name(t);
        EXPECT_FALSE(cuda::tiles_fit(t, 4096, 4096)) << name;
        EXPECT_FALSE(cuda::pads_fit(t)) << name;
        EXPECT_FALSE(cuda::dp4a_fits(t, 4096)) << name;
        EXPECT_FALSE(cuda::mma_fits({t, nullptr, 4096, 4096})) << name;
        EXPECT_THROW(cuda::padded_row_bytes(t, 4096), Error) << name;
    }
    MINFER_SKIP_WITHOUT_GPU();
    DeviceBuffer<float> buf(8192);
    for (GgmlType t : kLowbitTypes) {
        const QMatrix blocks{t, buf.get(), 256, 16};
        const QMatrix int8{t, buf.get(), 256, 16, false, false, cuda::XQuant::kInt8};
        EXPECT_THROW(cuda::matvec(int8, buf.get(), 1, buf.get(), nullptr, nullptr, nullptr), Error);
        EXPECT_THROW(cuda::tile_matrix(blocks, buf.get(), nullptr), Error);
        EXPECT_THROW(cuda::pad_matrix(blocks, buf.get(), nullptr), Error);
    }
}

// MXFP4 with every exponent byte, beyond random_row's sane 115..134: subnormal scales (e < 2), and values
// that overflow half (dequant_f16 gives inf) or f32 (e >= 253 with the larger levels: inf, as ggml).
TEST(CudaQuantApi, Mxfp4EveryExponentBitExact) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(39);
    const int64_t n_in = 256 * 32, n_out = 3;  // 768 blocks: every exponent three times
    HostMatrix w = random_matrix(GgmlType::MXFP4, n_out, n_in, rng);
    for (size_t b = 0; b < w.bytes.size() / sizeof(quants::BlockMXFP4); ++b)
        w.bytes[b * sizeof(quants::BlockMXFP4)] = uint8_t(b % 256);
    traits(GgmlType::MXFP4).to_float_ref(w.bytes.data(), w.values.data(), n_out * n_in);
    check_dequant(w, Layout::kBlocks);
}

// Bad arguments are refused on the host before anything is launched.
TEST(CudaQuantApi, RejectsBadArguments) {
    MINFER_SKIP_WITHOUT_GPU();
    DeviceBuffer<float> buf(4096);
    const QMatrix q4k{GgmlType::Q4_K, buf.get(), 512, 2};
    EXPECT_THROW(cuda::matvec(q4k, buf.get(), 0, buf.get(), nullptr, nullptr, nullptr), Error);
    EXPECT_THROW(cuda::matvec(q4k, buf.get(), 9, buf.get(), nullptr, nullptr, nullptr), Error);
    EXPECT_THROW(
        cuda::matvec({GgmlType::Q4_K, buf.get(), 300, 2}, buf.get(), 1, buf.get(), nullptr, nullptr, nullptr),
        Error);
    EXPECT_THROW(cuda::dequant_f32({GgmlType::IQ2_XXS, buf.get(), 256, 2}, buf.get(), nullptr), Error);
    EXPECT_THROW(
        cuda::matvec_swiglu(q4k, {GgmlType::Q6_K, buf.get(), 512, 2}, buf.get(), 1, buf.get(), nullptr),
        Error);
    EXPECT_THROW(cuda::matvec(q4k, buf.get() + 1, 1, buf.get(), nullptr, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace minfer::test
