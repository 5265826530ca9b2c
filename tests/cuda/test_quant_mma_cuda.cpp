// The tensor-core products (backend/cuda/quant_mma.h): quantize_x_mma bit for bit against the CPU's
// int8x2 quantization, matmul_mma against the double-precision product with that quantized x within a
// stated rounding budget, and batch invariance: a column's bits do not depend on how many columns share
// the product or where it sits among them; matmul_mma_f16 (quant_mma_f16.h) against the double product of
// the same halves, and its batch invariance. Skipped where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/ops_cuda.h"
#include "backend/cuda/quant_cuda.h"
#include "backend/cuda/quant_mma.h"
#include "backend/cuda/quant_mma_f16.h"
#include "cuda/cuda_test_util.h"
#include "cuda/quant_ref_util.h"
#include "quant/quants_impl.h"
#include "util/error.h"
#include "util/fp16.h"

namespace minfer::test {
namespace {

using cuda::QMatrix;

// Rounding budget. Each 32-element block's integer sum is exact; it becomes f32 (exact below 2^24, one
// rounding above for Q8_0), is multiplied by x's step and the weight scale (two roundings) and added to
// the row's running sum (one), with the minimum term (two more, Q4_K), then the split partial sums are
// added (at most 16). A chain of n_in / 32 + 20 roundings of terms whose magnitudes sum to at most a
// few times sum_i |w_i x_i| (Q4_K's scale and minimum terms are each larger than their difference); with
// random-sign roundings the observed worst error stays far inside 1e-5 * (sum |w x| + |bias| + |res|) +
// 1e-6, reported as "worst error / budget". A wrong lane, nibble, scale or split range gives errors of
// the order of the row's magnitude.
constexpr double kRelBudget = 1e-5, kAbsBudget = 1e-6;

struct MmaType {
    GgmlType type;
    bool padded;  // Q6_K is read padded (pad_matrix)
};
const MmaType kTypes[] = {{GgmlType::Q4_K, false},
                          {GgmlType::Q6_K, true},
                          {GgmlType::Q8_0, false},
                          {GgmlType::Q5_0, false},
                          {GgmlType::Q4_0, false}};
// The products per expert take two formats more (experts_mma_fits).
const MmaType kExpertTypes[] = {{GgmlType::Q4_K, false}, {GgmlType::Q6_K, true},  {GgmlType::Q8_0, false},
                                {GgmlType::Q5_0, false}, {GgmlType::Q4_0, false}, {GgmlType::IQ4_NL, false},
                                {GgmlType::MXFP4, false}};

std::string type_name(const ::testing::TestParamInfo<MmaType>& info) {
    return traits(info.param.type).name;
}

// A matrix on the device as matmul_mma reads it.
struct DeviceMatrix {
    DeviceBuffer<uint8_t> raw, padded;
    QMatrix qm;
    DeviceMatrix(const HostMatrix& w, bool pad)
        : raw(w.bytes),
          padded(pad ? size_t(cuda::padded_row_bytes(w.type, w.n_in) * w.n_out) : 0),
          qm{w.type, raw.get(), w.n_in, w.n_out} {
        if (!pad) return;
        TestStream s;
        cuda::pad_matrix(qm, padded.get(), s.get());
        s.sync();
        qm = {w.type, padded.get(), w.n_in, w.n_out, false, true};
    }
};

// y = W x (+ bias) (+ res) through quantize_x_mma and matmul_mma; res may be y's own buffer.
std::vector<float> run_mma(const QMatrix& w, const DeviceBuffer<float>& x, int64_t nt, const float* bias,
                           const std::vector<float>* res_in_place, const float* res,
                           cuda::MmaKernel kernel = cuda::MmaKernel::Auto) {
    DeviceBuffer<uint8_t> xq(cuda::mma_x_bytes(w.n_in, nt));
    DeviceBuffer<float> scratch(std::max<size_t>(cuda::mma_scratch_floats(w, nt), 1));
    DeviceBuffer<float> y(size_t(nt * w.n_out));
    if (res_in_place) y.upload(*res_in_place);
    TestStream s;
    cuda::quantize_x_mma(x.get(), w.n_in, nt, xq.get(), s.get());
    cuda::matmul_mma(w, xq.get(), nt, y.get(), bias, res_in_place ? y.get() : res, scratch.get(), s.get(),
                     kernel);
    s.sync();
    return y.download();
}

// Checks y (columns of n_out rows) against the reference dots plus the bias and residual if given, within
// rel_budget * (sum |w x| + |bias| + |res|) + kAbsBudget; the worst error / budget seen so far goes into
// worst.
void expect_near_reference(const std::vector<float>& y, const RefDots& ref, size_t n_out,
                           const std::vector<float>* bias, const std::vector<float>* res, double rel_budget,
                           const std::string& ctx, double& worst) {
    for (size_t k = 0; k < y.size(); ++k) {
        const size_t r = k % n_out;
        const double b = bias ? (*bias)[r] : 0.0, rs = res ? (*res)[k] : 0.0;
        const double want = ref.dot[k] + b + rs;
        const double tol = rel_budget * (ref.mag[k] + std::fabs(b) + std::fabs(rs)) + kAbsBudget;
        ASSERT_NEAR(y[k], want, tol) << ctx << " column " << k / n_out << " row " << r;
        worst = std::max(worst, std::fabs(y[k] - want) / tol);
    }
}

class CudaMma : public ::testing::TestWithParam<MmaType> {
  protected:
    std::vector<int64_t> row_lengths() const {
        if (traits(GetParam().type).block_size == 32) return {32, 96, 896, 4864, 18944};
        return {256, 768, 3584, 18944};
    }
};

// Every row of several shapes and column counts (one n8 tile, several, a partial one; one and several
// column tiles of the grid), with no extra, a bias, a residual, and both with the residual in place.
TEST_P(CudaMma, MatmulMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(2024);
    double worst = 0.0;
    const int64_t kOuts[] = {1, 7, 131, 1024};
    const int64_t kCols[] = {1, 2, 9, 64, 130};
    for (int64_t n_in : row_lengths())
        for (int64_t n_out : kOuts) {
            const HostMatrix w = n_out == 7 ? random_matrix(GetParam().type, n_out, n_in, rng)
                                            : quantized_matrix(GetParam().type, n_out, n_in, rng);
            const DeviceMatrix dw(w, GetParam().padded);
            ASSERT_TRUE(cuda::mma_fits(dw.qm));
            for (int64_t nt : kCols) {
                if (n_in * n_out * nt > (int64_t(1) << 29)) continue;  // keeps the double reference short
                const std::vector<float> x = gaussian(rng, nt * n_in);
                const std::vector<float> bias = gaussian(rng, n_out), res = gaussian(rng, nt * n_out);
                const RefDots ref = reference_dots(w, quantized_x(x, cuda::XQuant::kInt8x2), nt);
                DeviceBuffer<float> dx(x), dbias(bias), dres(res);
                for (int extra = 0; extra < 4; ++extra) {
                    const bool has_bias = extra % 2 == 1, has_res = extra >= 2;
                    const std::vector<float> y =
                        run_mma(dw.qm, dx, nt, has_bias ? dbias.get() : nullptr, extra == 3 ? &res : nullptr,
                                extra == 2 ? dres.get() : nullptr);
                    const std::string ctx = std::string(traits(w.type).name) + " " + std::to_string(n_out) +
                                            "x" + std::to_string(n_in) + " nt=" + std::to_string(nt) +
                                            " extra=" + std::to_string(extra);
                    expect_near_reference(y, ref, size_t(n_out), has_bias ? &bias : nullptr,
                                          has_res ? &res : nullptr, kRelBudget, ctx, worst);
                    if (HasFatalFailure()) return;
                }
            }
        }
    std::printf("[ budget   ] worst matmul_mma error / budget: %.4f\n", worst);
}

// A column's outputs are the same bits alone, in a batch of 9 at every offset, and in a batch of 70,
// with a bias and a residual; x far from 1 in magnitude and a zero column included.
TEST_P(CudaMma, ColumnsAreBatchInvariant) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(7);
    const int64_t n_in = traits(GetParam().type).block_size == 32 ? 896 : 3584, n_out = 4608, nt = 70;
    const HostMatrix w = quantized_matrix(GetParam().type, n_out, n_in, rng);
    const DeviceMatrix dw(w, GetParam().padded);
    std::vector<float> x = gaussian(rng, nt * n_in);
    for (int64_t i = 0; i < n_in; ++i) x[size_t(3 * n_in + i)] *= 1e-20f, x[size_t(5 * n_in + i)] *= 3e4f;
    std::fill_n(x.begin() + 11 * n_in, n_in, 0.0f);
    const std::vector<float> bias = gaussian(rng, n_out), res = gaussian(rng, nt * n_out);
    DeviceBuffer<float> dx(x), dbias(bias), dres(res);
    const std::vector<float> all = run_mma(dw.qm, dx, nt, dbias.get(), nullptr, dres.get());
    for (int64_t c = 0; c < nt; ++c) {
        const std::vector<float> xc(x.begin() + c * n_in, x.begin() + (c + 1) * n_in);
        const std::vector<float> rc(res.begin() + c * n_out, res.begin() + (c + 1) * n_out);
        DeviceBuffer<float> dxc(xc), drc(rc);
        const std::vector<float> alone = run_mma(dw.qm, dxc, 1, dbias.get(), nullptr, drc.get());
        ASSERT_EQ(std::memcmp(alone.data(), all.data() + c * n_out, size_t(n_out) * sizeof(float)), 0)
            << "column " << c << " alone differs from the batch of " << nt;
    }
    for (int64_t off = 0; off + 9 <= nt; off += 7) {
        const std::vector<float> xs(x.begin() + off * n_in, x.begin() + (off + 9) * n_in);
        const std::vector<float> rs(res.begin() + off * n_out, res.begin() + (off + 9) * n_out);
        DeviceBuffer<float> dxs(xs), drs(rs);
        const std::vector<float> nine = run_mma(dw.qm, dxs, 9, dbias.get(), nullptr, drs.get());
        ASSERT_EQ(std::memcmp(nine.data(), all.data() + off * n_out, nine.size() * sizeof(float)), 0)
            << "columns " << off << ".." << off + 8 << " in a batch of 9 differ from the batch of " << nt;
    }
}

// The staged kernel (shared-memory stages) and the direct one give the same bits for every column
// count, tile edge and split: rows of whole stages and, for the 32-element formats, rows of 3 blocks
// (not whole stages: both run the direct kernel), small matrices (split) and large ones.
TEST_P(CudaMma, StagedEqualsDirect) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(99);
    const bool b32 = traits(GetParam().type).block_size == 32;
    for (const int64_t n_in : b32 ? std::vector<int64_t>{96, 896, 4864} : std::vector<int64_t>{256, 3584})
        for (const int64_t n_out : {131, 4608}) {
            const HostMatrix w = quantized_matrix(GetParam().type, n_out, n_in, rng);
            const DeviceMatrix dw(w, GetParam().padded);
            for (const int64_t nt : {1, 2, 8, 9, 16, 33, 64, 70, 130}) {
                const std::vector<float> x = gaussian(rng, nt * n_in), res = gaussian(rng, nt * n_out);
                const std::vector<float> bias = gaussian(rng, n_out);
                DeviceBuffer<float> dx(x), dbias(bias), dres(res);
                const auto direct =
                    run_mma(dw.qm, dx, nt, dbias.get(), nullptr, dres.get(), cuda::MmaKernel::Direct);
                const auto staged =
                    run_mma(dw.qm, dx, nt, dbias.get(), nullptr, dres.get(), cuda::MmaKernel::Staged);
                ASSERT_EQ(std::memcmp(direct.data(), staged.data(), direct.size() * sizeof(float)), 0)
                    << n_out << "x" << n_in << " nt=" << nt;
            }
        }
}

// The columns of a mixture's products per expert laid out on the host as cuda::moe_route does: expert
// e's count[e] columns from a multiple of 8, each a random token, its padding and extra columns -1; the
// tiles of tile_cols columns over them, the rest of the table empty.
struct HostColumns {
    std::vector<int32_t> token, expert;  // per column; expert -1 off every expert's columns
    std::vector<cuda::ExpertTile> tiles;
};

HostColumns lay_out(const std::vector<int>& count, int tile_cols, int64_t n_tok, std::mt19937& rng) {
    HostColumns h;
    std::uniform_int_distribution<int32_t> tok(0, int32_t(n_tok - 1));
    for (size_t e = 0; e < count.size(); ++e) {
        const int first = int(h.token.size()), padded = (count[e] + 7) / 8 * 8;
        for (int c = 0; c < padded; ++c) {
            h.token.push_back(c < count[e] ? tok(rng) : -1);
            h.expert.push_back(c < count[e] ? int32_t(e) : -1);
        }
        for (int c0 = 0; c0 < padded; c0 += tile_cols)
            h.tiles.push_back({int32_t(e), first + c0, std::min(tile_cols, padded - c0), 0});
    }
    h.token.resize(h.token.size() + 16, -1), h.expert.resize(h.token.size(), -1);
    h.tiles.resize(h.tiles.size() + 3, cuda::ExpertTile{-1, 0, 0, 0});
    return h;
}

// y [n_cols][rows] of the stack's products per expert over the columns of x [n_tok][n_in].
std::vector<float> run_experts(const QMatrix& w, int64_t rows, const DeviceBuffer<float>& x,
                               const HostColumns& h, int tile_cols, const float* bias) {
    const int64_t n_cols = int64_t(h.token.size());
    DeviceBuffer<int32_t> token(h.token);
    DeviceBuffer<cuda::ExpertTile> tiles(h.tiles);
    DeviceBuffer<uint8_t> xq(cuda::mma_x_bytes(w.n_in, n_cols));
    DeviceBuffer<float> y(std::vector<float>(size_t(n_cols * rows), 0.0f));
    const cuda::MoeColumns cols{nullptr,  token.get(), tiles.get(), n_cols, int64_t(h.tiles.size()),
                                tile_cols};
    TestStream s;
    cuda::quantize_x_mma_columns(x.get(), w.n_in, token.get(), true, n_cols, xq.get(), s.get());
    cuda::matmul_mma_experts(w, rows, xq.get(), cols, y.get(), bias, s.get());
    s.sync();
    return y.download();
}

// Every expert's columns against the double products of its rows with the quantized x of each column's
// token (within matmul_mma's budget), with and without the experts' biases, for every tile width; and a
// column's bits are the same whatever the tile width (its arithmetic depends on its expert and x alone).
// Experts with 0, 1, a tile's worth and several tiles of columns.
class CudaMmaExperts : public ::testing::TestWithParam<MmaType> {};

TEST_P(CudaMmaExperts, MatchReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(31);
    const int64_t n_in = traits(GetParam().type).block_size == 32 ? 256 : 512, rows = 131, n_tok = 40;
    const std::vector<int> count = {0, 1, 9, 70, 8, 17};
    const int64_t n_expert = int64_t(count.size());
    const HostMatrix w = quantized_matrix(GetParam().type, rows * n_expert, n_in, rng);
    const DeviceMatrix dw(w, GetParam().padded);
    ASSERT_TRUE(cuda::experts_mma_fits(dw.qm));
    const std::vector<float> x = gaussian(rng, n_tok * n_in), bias = gaussian(rng, rows * n_expert);
    DeviceBuffer<float> dx(x), dbias(bias);
    const HostColumns h = lay_out(count, 8, n_tok, rng);
    const int64_t n_cols = int64_t(h.token.size());
    std::vector<float> xcols(size_t(n_cols * n_in), 0.0f);
    for (int64_t c = 0; c < n_cols; ++c)
        if (h.token[size_t(c)] >= 0)
            std::copy_n(x.begin() + h.token[size_t(c)] * n_in, n_in, xcols.begin() + c * n_in);
    const RefDots ref = reference_dots(w, quantized_x(xcols, cuda::XQuant::kInt8x2), n_cols);
    std::vector<float> first;
    double worst = 0.0;
    for (const int tile_cols : {8, 16, 32, 64})
        for (const bool has_bias : {false, true}) {
            const HostColumns ht = lay_out(count, tile_cols, n_tok, rng);
            HostColumns same = h;
            same.tiles = ht.tiles;
            const std::vector<float> y =
                run_experts(dw.qm, rows, dx, same, tile_cols, has_bias ? dbias.get() : nullptr);
            for (int64_t c = 0; c < n_cols; ++c) {
                const int32_t e = h.expert[size_t(c)];
                if (e < 0) continue;
                for (int64_t r = 0; r < rows; ++r) {
                    const size_t k = size_t(c * w.n_out + e * rows + r);
                    const double b = has_bias ? bias[size_t(e * rows + r)] : 0.0;
                    const double tol = kRelBudget * (ref.mag[k] + std::fabs(b)) + kAbsBudget;
                    const double got = y[size_t(c * rows + r)];
                    ASSERT_NEAR(got, ref.dot[k] + b, tol)
                        << "tiles of " << tile_cols << ", column " << c << " (expert " << e << "), row " << r;
                    worst = std::max(worst, std::fabs(got - ref.dot[k] - b) / tol);
                }
            }
            if (has_bias) continue;
            if (first.empty()) first = y;
            for (int64_t c = 0; c < n_cols; ++c)
                if (h.expert[size_t(c)] >= 0) {
                    ASSERT_EQ(std::memcmp(first.data() + c * rows, y.data() + c * rows, size_t(rows) * 4), 0)
                        << "column " << c << " differs between tiles of 8 and of " << tile_cols;
                }
        }
    std::printf("[ budget   ] worst matmul_mma_experts error / budget: %.4f\n", worst);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMmaExperts, ::testing::ValuesIn(kExpertTypes), type_name);

INSTANTIATE_TEST_SUITE_P(Types, CudaMma, ::testing::ValuesIn(kTypes), type_name);

// y = W x (+ bias) (+ res) through split_f16 and matmul_mma_f16.
std::vector<float> run_mma_f16(const QMatrix& w, const DeviceBuffer<float>& x, int64_t nt, const float* bias,
                               const float* res) {
    DeviceBuffer<uint16_t> x16(size_t(nt * w.n_in));
    DeviceBuffer<float> scratch(cuda::mma_f16_scratch_floats(w, nt));
    DeviceBuffer<unsigned> tickets(std::vector<unsigned>(cuda::mma_f16_tickets(w, nt), 0u));
    DeviceBuffer<float> y(size_t(nt * w.n_out));
    TestStream s;
    cuda::split_f16(x.get(), x16.get(), nullptr, nt * w.n_in, s.get());
    cuda::matmul_mma_f16(w, x16.get(), nt, y.get(), bias, res, scratch.get(), tickets.get(), s.get());
    s.sync();
    return y.download();
}

std::vector<float> rounded_to_half(std::vector<float> v) {
    for (float& f : v) f = fp16_to_f32(f32_to_fp16(f));
    return v;
}

// v rounded to the nearest half, ties to even, from double in one step (no overflow at these magnitudes).
double half_of(double v) {
    if (v == 0.0) return v;
    int e = 0;
    std::frexp(v, &e);  // |v| in [2^(e-1), 2^e): 11 significant bits, or the subnormals' step 2^-24
    const double step = std::ldexp(1.0, std::max(e - 11, -24));
    return std::nearbyint(v / step) * step;
}

// The halves the f16 product multiplies (quant_mma_f16.cu's dequant2): per 32-element block (Q6_K: per
// 16) the scale ws and minimum wm as f32, rounded to half; then level * ws - wm, exact in double, rounded
// to half once (HFMA2). The 32-element formats' scale is their block's half d and their minimum is zero,
// so their halves are to_float_ref's values rounded to half.
std::vector<float> f16_kernel_halves(const HostMatrix& w) {
    if (w.type != GgmlType::Q4_K && w.type != GgmlType::Q6_K) return rounded_to_half(w.values);
    const auto h = [](float f) { return double(fp16_to_f32(f32_to_fp16(f))); };
    std::vector<float> out(w.values.size());
    for (size_t b = 0; b < out.size() / 256; ++b)
        for (int e = 0; e < 256; ++e) {
            double level = 0.0, ws = 0.0, wm = 0.0;
            if (w.type == GgmlType::Q4_K) {
                const auto& k = reinterpret_cast<const quants::BlockQ4K*>(w.bytes.data())[b];
                const int j = e / 32;
                int sc = 0, m = 0;
                quants::k_scale_min(k.scales, j, &sc, &m);
                ws = h(fp16_to_f32(k.d) * float(sc)), wm = h(fp16_to_f32(k.dmin) * float(m));
                level = (k.qs[32 * (j / 2) + e % 32] >> (4 * (j % 2))) & 0xF;
            } else {
                const auto& k = reinterpret_cast<const quants::BlockQ6K*>(w.bytes.data())[b];
                const int half = e / 128, g = e % 128 / 32, l = e % 32;
                const int lo = (k.ql[64 * half + l + 32 * (g % 2)] >> (4 * (g / 2))) & 0xF;
                const int hi = (k.qh[32 * half + l] >> (2 * g)) & 3;
                ws = h(fp16_to_f32(k.d) * float(k.scales[e / 16]));
                level = double(lo | hi << 4) - 32.0;
            }
            out[256 * b + size_t(e)] = float(half_of(level * ws - wm));
        }
    return out;
}

// Rounding budget of the f16 product against the double product of the same halves (each weight as
// f16_kernel_halves gives it, x as split_f16 does): every product of two halves is exact in f32, so the error
// is the f32 accumulation alone, one rounding per k16 step of the row (n_in / 16) plus the split partial
// sums and the bias and residual; with random-sign roundings it stays far inside
// 2e-5 * (sum |w x| + |bias| + |res|) + 1e-6 at n_in = 18944. A wrong lane, level, scale or split gives
// errors of the order of the row's magnitude.
constexpr double kF16RelBudget = 2e-5;

class CudaMmaF16 : public CudaMma {};

TEST_P(CudaMmaF16, MatmulMatchesReference) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(4242);
    double worst = 0.0;
    const bool b32 = traits(GetParam().type).block_size == 32;
    for (const int64_t n_in : b32 ? std::vector<int64_t>{128, 896, 4864, 18944} : row_lengths())
        for (const int64_t n_out : {1, 131, 1024}) {
            HostMatrix w = quantized_matrix(GetParam().type, n_out, n_in, rng);
            const DeviceMatrix dw(w, GetParam().padded);
            ASSERT_TRUE(cuda::mma_f16_fits(dw.qm));
            w.values = f16_kernel_halves(w);
            for (const int64_t nt : {1, 33, 64, 70, 130}) {
                if (n_in * n_out * nt > (int64_t(1) << 29)) continue;
                const std::vector<float> x = gaussian(rng, nt * n_in);
                const std::vector<float> bias = gaussian(rng, n_out), res = gaussian(rng, nt * n_out);
                const RefDots ref = reference_dots(w, rounded_to_half(x), nt);
                DeviceBuffer<float> dx(x), dbias(bias), dres(res);
                for (int extra = 0; extra < 2; ++extra) {
                    const std::vector<float> y = run_mma_f16(dw.qm, dx, nt, extra ? dbias.get() : nullptr,
                                                             extra ? dres.get() : nullptr);
                    const std::string ctx = std::string(traits(w.type).name) + " " + std::to_string(n_out) +
                                            "x" + std::to_string(n_in) + " nt=" + std::to_string(nt);
                    expect_near_reference(y, ref, size_t(n_out), extra ? &bias : nullptr,
                                          extra ? &res : nullptr, kF16RelBudget, ctx, worst);
                    if (HasFatalFailure()) return;
                }
            }
        }
    std::printf("[ budget   ] worst matmul_mma_f16 error / budget: %.4f\n", worst);
}

// Every step-th column of `batch` (w times the columns of x, + bias + res) is the same bits as that
// column run alone.
void expect_alone_equal_batch(const QMatrix& w, const std::vector<float>& x, const std::vector<float>& res,
                              const float* bias, const std::vector<float>& batch, int64_t step) {
    const int64_t n_in = w.n_in, n_out = w.n_out, nt = int64_t(x.size()) / n_in;
    for (int64_t c = 0; c < nt; c += step) {
        DeviceBuffer<float> dxc(std::vector<float>(x.begin() + c * n_in, x.begin() + (c + 1) * n_in));
        DeviceBuffer<float> drc(std::vector<float>(res.begin() + c * n_out, res.begin() + (c + 1) * n_out));
        const std::vector<float> alone = run_mma_f16(w, dxc, 1, bias, drc.get());
        ASSERT_EQ(std::memcmp(alone.data(), batch.data() + c * n_out, size_t(n_out) * sizeof(float)), 0)
            << "column " << c << " alone differs from the batch of " << nt;
    }
}

// A column's outputs are the same bits alone and in batches of 33 and 130 (every offset of the 33).
TEST_P(CudaMmaF16, ColumnsAreBatchInvariant) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(17);
    const int64_t n_in = traits(GetParam().type).block_size == 32 ? 896 : 3584, n_out = 4608, nt = 130;
    const HostMatrix w = quantized_matrix(GetParam().type, n_out, n_in, rng);
    const DeviceMatrix dw(w, GetParam().padded);
    std::vector<float> x = gaussian(rng, nt * n_in);
    std::fill_n(x.begin() + 11 * n_in, n_in, 0.0f);
    const std::vector<float> bias = gaussian(rng, n_out), res = gaussian(rng, nt * n_out);
    DeviceBuffer<float> dx(x), dbias(bias), dres(res);
    const std::vector<float> all = run_mma_f16(dw.qm, dx, nt, dbias.get(), dres.get());
    expect_alone_equal_batch(dw.qm, x, res, dbias.get(), all, 3);
    if (HasFatalFailure()) return;
    for (int64_t off = 0; off + 33 <= nt; off += 31) {
        DeviceBuffer<float> dxs(std::vector<float>(x.begin() + off * n_in, x.begin() + (off + 33) * n_in));
        DeviceBuffer<float> drs(
            std::vector<float>(res.begin() + off * n_out, res.begin() + (off + 33) * n_out));
        const std::vector<float> part = run_mma_f16(dw.qm, dxs, 33, dbias.get(), drs.get());
        ASSERT_EQ(std::memcmp(part.data(), all.data() + off * n_out, part.size() * sizeof(float)), 0)
            << "columns " << off << ".." << off + 32 << " in a batch of 33 differ from the batch of " << nt;
    }
}

// The stream-K division with rows cut between ranges (the first matrix of 1024-element rows that this
// device divides so), 66 columns (two column tiles): against the reference, and a column's bits alone
// equal to them in the batch.
TEST_P(CudaMmaF16, CutRowsMatchReferenceAndAreBatchInvariant) {
    MINFER_SKIP_WITHOUT_GPU();
    const int64_t n_in = 1024;
    int64_t n_out = 0;
    for (int64_t rows = 128; rows <= 128 * 1024 && n_out == 0; rows += 128)
        if (cuda::mma_f16_division(QMatrix{GetParam().type, nullptr, n_in, rows}).cut_rows) n_out = rows;
    ASSERT_GT(n_out, 0) << "no matrix of 1024-element rows takes stream-K with cut rows";
    std::mt19937 rng(99);
    HostMatrix w = quantized_matrix(GetParam().type, n_out, n_in, rng);
    const DeviceMatrix dw(w, GetParam().padded);
    w.values = f16_kernel_halves(w);
    const int64_t nt = 66;
    const std::vector<float> x = gaussian(rng, nt * n_in), res = gaussian(rng, nt * n_out);
    const std::vector<float> bias = gaussian(rng, n_out);
    DeviceBuffer<float> dx(x), dbias(bias), dres(res);
    const std::vector<float> y = run_mma_f16(dw.qm, dx, nt, dbias.get(), dres.get());
    double worst = 0.0;
    expect_near_reference(y, reference_dots(w, rounded_to_half(x), nt), size_t(n_out), &bias, &res,
                          kF16RelBudget, std::to_string(n_out) + " rows", worst);
    std::printf("[ budget   ] %lld rows: worst error / budget %.4f\n", (long long)n_out, worst);
    expect_alone_equal_batch(dw.qm, x, res, dbias.get(), y, 13);
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMmaF16, ::testing::ValuesIn(kTypes), type_name);

// quantize_x_mma's levels and steps are the CPU's quantize_q8x2, bit for bit, in its layout: per column
// and 32-element block, lane t's 8 hi then 8 lo levels of elements 8t..8t+7; the steps {d, d * sum} per
// block and column after all levels; columns past nt zero.
TEST(CudaMmaApi, QuantizeMatchesCpu) {
    MINFER_SKIP_WITHOUT_GPU();
    std::mt19937 rng(88);
    const int64_t n = 896, nt = 3, nt8 = 8, nb = n / 32;
    std::vector<float> x = gaussian(rng, nt * n);
    std::fill_n(x.begin() + 64, 32, 0.0f);
    x[300] = 1e4f, x[1001] = -3e-3f;
    DeviceBuffer<float> dx(x);
    DeviceBuffer<uint8_t> xq(cuda::mma_x_bytes(n, nt));
    ASSERT_EQ(cuda::mma_x_bytes(n, nt), size_t(nt8 * nb * (64 + 8)));
    cuda::quantize_x_mma(dx.get(), n, nt, xq.get(), nullptr);
    MINFER_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = xq.download();
    const auto* steps = reinterpret_cast<const float*>(got.data() + nt8 * nb * 64);
    for (int64_t c = 0; c < nt8; ++c) {
        std::vector<uint8_t> cpu(act_x2_row_bytes(n));
        std::vector<float> xc(size_t(n), 0.0f);
        if (c < nt) std::copy_n(x.begin() + c * n, n, xc.begin());
        traits(GgmlType::Q8_0).quantize_x2_ref(xc.data(), cpu.data(), n);
        const auto* b = reinterpret_cast<const quants::BlockQ8X2*>(cpu.data());
        for (int64_t e = 0; e < n; ++e) {
            const int64_t blk = e / 32, i = e % 32;
            const int64_t pos = (c * nb + blk) * 64 + 16 * (i / 8) + i % 8;
            ASSERT_EQ(int8_t(got[size_t(pos)]), b[blk].hi[i])
                << "hi level of column " << c << " element " << e;
            ASSERT_EQ(int8_t(got[size_t(pos + 8)]), b[blk].lo[i])
                << "lo level of column " << c << " element " << e;
        }
        for (int64_t blk = 0; blk < nb; ++blk) {
            int sum = 0;
            for (int l = 0; l < 32; ++l) sum += 254 * b[blk].hi[l] + b[blk].lo[l];
            ASSERT_EQ(steps[2 * (blk * nt8 + c)], b[blk].d) << "step of column " << c << " block " << blk;
            ASSERT_EQ(steps[2 * (blk * nt8 + c) + 1], b[blk].d * float(sum)) << "sum of column " << c;
        }
    }
}

TEST(CudaMmaApi, FitsAndRefusals) {
    const QMatrix q4k{GgmlType::Q4_K, nullptr, 512, 16};
    const QMatrix q6k_raw{GgmlType::Q6_K, nullptr, 512, 16};
    const QMatrix q6k_padded{GgmlType::Q6_K, nullptr, 512, 16, false, true};
    const QMatrix q4k_tiled{GgmlType::Q4_K, nullptr, 512, 16, true};
    const QMatrix q5k{GgmlType::Q5_K, nullptr, 512, 16};
    const QMatrix f16{GgmlType::F16, nullptr, 512, 16};
    const QMatrix q8_odd{GgmlType::Q8_0, nullptr, 40, 16};
    const QMatrix mxfp4{GgmlType::MXFP4, nullptr, 512, 16}, q2k{GgmlType::Q2_K, nullptr, 512, 16};
    EXPECT_FALSE(cuda::mma_fits(mxfp4));
    EXPECT_FALSE(cuda::mma_fits(q2k));
    EXPECT_TRUE(cuda::experts_mma_fits(mxfp4));
    EXPECT_FALSE(cuda::experts_mma_fits(QMatrix{GgmlType::Q8_0, nullptr, 96, 16}));  // not whole stages
    EXPECT_TRUE(cuda::mma_fits(q4k));
    EXPECT_TRUE(cuda::mma_fits(q6k_padded));
    EXPECT_FALSE(cuda::mma_fits(q6k_raw));
    EXPECT_FALSE(cuda::mma_fits(q4k_tiled));
    EXPECT_FALSE(cuda::mma_fits(q5k));
    EXPECT_FALSE(cuda::mma_fits(f16));
    EXPECT_FALSE(cuda::mma_fits(q8_odd));
    EXPECT_THROW(cuda::matmul_mma(q5k, nullptr, 4, nullptr, nullptr, nullptr, nullptr, nullptr), Error);
    const QMatrix q8_three_blocks{GgmlType::Q8_0, nullptr, 96, 16};  // not whole four-block stages
    EXPECT_TRUE(cuda::mma_f16_fits(q4k));
    EXPECT_TRUE(cuda::mma_f16_fits(q6k_padded));
    EXPECT_FALSE(cuda::mma_f16_fits(q6k_raw));
    EXPECT_FALSE(cuda::mma_f16_fits(q8_three_blocks));
    EXPECT_FALSE(cuda::mma_f16_fits(q5k));
    EXPECT_THROW(cuda::matmul_mma_f16(q5k, nullptr, 40, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                 Error);
    // x16 off its 16-byte alignment is refused before anything runs (no device needed).
    const auto* misaligned = reinterpret_cast<const void*>(uintptr_t(8));
    try {
        cuda::matmul_mma_f16(q4k, misaligned, 40, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
        ADD_FAILURE() << "matmul_mma_f16 took a misaligned x";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("16-byte aligned"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace minfer::test
