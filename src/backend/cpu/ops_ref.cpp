#include "backend/cpu/ops_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace minfer::cpu {

void rms_norm_ref(const float* x, const float* w, float* y, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    const double scale = 1.0 / std::sqrt(ss / double(n) + double(eps));
    for (int64_t i = 0; i < n; ++i) y[i] = float(double(x[i]) * scale * double(w[i]));
}

void rope_ref(float* x, int64_t n_head, int64_t head_dim, int64_t n_rot, int32_t pos, const RopeFreq& f,
              bool neox) {
    const int64_t half = n_rot / 2;
    for (int64_t h = 0; h < n_head; ++h) {
        float* xh = x + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
            float c, s;
            f.cos_sin(pos, i, n_rot, c, s);
            const int64_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
            const float a = xh[i0], b = xh[i1];
            xh[i0] = a * c - b * s;
            xh[i1] = a * s + b * c;
        }
    }
}

static double silu_d(double x) {
    return x / (1.0 + std::exp(-x));
}

void silu_ref(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = float(silu_d(x[i]));
}

void swiglu_ref(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = float(silu_d(g[i]) * double(u[i]));
}

void swiglu_oai_ref(const float* g, const float* u, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const double a = std::min(double(g[i]), 7.0), b = std::clamp(double(u[i]), -7.0, 7.0);
        y[i] = float(a / (1.0 + std::exp(-1.702 * a)) * (b + 1.0));
    }
}

// x / 2 (1 + tanh z) written as x / (1 + e^(-2z)), the same value without 1 + tanh z's cancellation for
// negative x.
void geglu_ref(const float* g, const float* u, float* y, int64_t n) {
    const double k = std::sqrt(2.0 / M_PI);
    for (int64_t i = 0; i < n; ++i) {
        const double x = g[i], z = k * (x + 0.044715 * x * x * x);
        y[i] = float(x / (1.0 + std::exp(-2.0 * z)) * double(u[i]));
    }
}

void add_ref(const float* a, const float* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul_ref(const float* a, const float* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

int32_t argmax_ref(const float* x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return int32_t(best);
}

void attention_ref(const float* q, const KvRows& kv, float* out, int64_t n_head, int64_t n_head_kv,
                   int64_t hd, int64_t first, int64_t n_kv_rows, float scale, const float* sinks) {
    const int64_t group = n_head / n_head_kv;
    std::vector<double> p(static_cast<size_t>(n_kv_rows > 0 ? n_kv_rows : 0)), acc(static_cast<size_t>(hd));
    for (int64_t h = 0; h < n_head; ++h) {
        const float* qh = q + h * hd;
        const int64_t off = (h / group) * hd;
        double mx = -INFINITY;
        for (int64_t j = first; j < n_kv_rows; ++j) {
            double s = 0.0;
            for (int64_t d = 0; d < hd; ++d) s += double(qh[d]) * double(kv.k_row(j)[off + d]);
            p[size_t(j)] = double(scale) * s;
            mx = std::fmax(mx, p[size_t(j)]);
        }
        if (sinks) mx = std::fmax(mx, double(sinks[h]));
        double sum = sinks ? std::exp(double(sinks[h]) - mx) : 0.0;
        for (int64_t j = first; j < n_kv_rows; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        for (auto& a : acc) a = 0.0;
        for (int64_t j = first; j < n_kv_rows; ++j)
            for (int64_t d = 0; d < hd; ++d) acc[size_t(d)] += p[size_t(j)] * double(kv.v_row(j)[off + d]);
        for (int64_t d = 0; d < hd; ++d) out[h * hd + d] = sum > 0.0 ? float(acc[size_t(d)] / sum) : 0.0f;
    }
}

}  // namespace minfer::cpu
