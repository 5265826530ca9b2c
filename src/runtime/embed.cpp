#include "runtime/embed.h"

#include <cmath>
#include <string>

#include "util/error.h"

namespace minfer {

const char* pooling_name(Pooling p) {
    switch (p) {
        case Pooling::Unspecified:
            return "unspecified";
        case Pooling::None:
            return "none";
        case Pooling::Mean:
            return "mean";
        case Pooling::Cls:
            return "cls";
        case Pooling::Last:
            return "last";
        case Pooling::Rank:
            return "rank";
    }
    return "?";
}

Pooling embedding_pooling(Pooling requested, const Hparams& hp) {
    if (requested != Pooling::Unspecified) return requested;
    return hp.pooling != Pooling::Unspecified ? hp.pooling : Pooling::Mean;
}

bool pools_to_vector(Pooling p) {
    return p == Pooling::Mean || p == Pooling::Cls || p == Pooling::Last;
}

std::vector<float> pool_rows(std::span<const float> rows, int64_t d, Pooling p) {
    if (!pools_to_vector(p))
        throw Error(std::string("pooling '") + pooling_name(p) + "' gives no single vector per input");
    const auto width = size_t(d), n = rows.size() / width;
    if (d < 1 || n == 0 || rows.size() % width != 0) throw Error("pool_rows: rows are not [n][d], n >= 1");
    if (p == Pooling::Cls) return {rows.begin(), rows.begin() + ptrdiff_t(width)};
    if (p == Pooling::Last) return {rows.end() - ptrdiff_t(width), rows.end()};
    std::vector<double> sum(width, 0.0);
    for (size_t r = 0; r < n; ++r)
        for (size_t i = 0; i < width; ++i) sum[i] += double(rows[r * width + i]);
    std::vector<float> out(width);
    for (size_t i = 0; i < width; ++i) out[i] = float(sum[i] / double(n));
    return out;
}

void l2_normalize(std::span<float> v) {
    double sq = 0;
    for (const float x : v) sq += double(x) * double(x);
    const double norm = std::sqrt(sq);
    if (norm == 0) return;
    for (float& x : v) x = float(double(x) / norm);
}

}  // namespace minfer
