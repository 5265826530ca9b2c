// Sliding-window attention through the engine: what a position's logits may depend on. With L local
// layers of window W, position p sees tokens p - L (W - 1) .. p and no earlier ones, however they are fed
// (one prompt, token by token, chunks); a global layer sees them all.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf_test_util.h"
#include "models/model.h"
#include "models/synth.h"
#include "runtime/session.h"

namespace minfer::test {
namespace {

constexpr int64_t kWindow = 4;

// gemma3 with n_layer layers (all local below 6) of window kWindow (0: every layer global).
std::unique_ptr<Model> gemma3(int n_layer, int64_t n_swa) {
    static TempDir dir;
    static int count = 0;
    SynthSpec s;
    s.arch = "gemma3";
    s.n_layer = n_layer, s.n_embd = 64, s.head_dim = 16, s.n_vocab = 256, s.n_swa = n_swa;
    const std::string path = dir.file("swa-" + std::to_string(count++) + ".gguf");
    write_synth_model(s, path);
    return Model::load(path);
}

std::vector<int32_t> tokens(int64_t n, int salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = int32_t((i * 37 + 11 + salt * 101) % 256);
    return t;
}

// The last position's logits after feeding `t` in chunks of `chunk` tokens.
std::vector<float> last_logits(const Model& m, const std::vector<int32_t>& t, int64_t chunk) {
    Session s(m, {64, 2});
    std::span<const float> out;
    for (size_t i = 0; i < t.size(); i += size_t(chunk))
        out = s.forward(std::span(t).subspan(i, std::min(t.size() - i, size_t(chunk))), 1);
    return {out.begin(), out.end()};
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(SlidingWindow, TokensBeforeTheReceptiveFieldDoNotMatter) {
    const int n_layer = 3;
    const auto m = gemma3(n_layer, kWindow);
    const int64_t n = 30, reach = n_layer * (kWindow - 1);  // position 29 sees tokens 20 .. 29
    const auto base = tokens(n, 0);
    auto outside = base, inside = base;
    for (int64_t i = 0; i < n - 1 - reach; ++i) outside[size_t(i)] = tokens(n, 1)[size_t(i)];
    inside[size_t(n - 1 - reach)] = (inside[size_t(n - 1 - reach)] + 1) % 256;
    for (int64_t chunk : {int64_t{30}, int64_t{1}, int64_t{7}}) {
        SCOPED_TRACE("chunks of " + std::to_string(chunk));
        const auto want = last_logits(*m, base, chunk);
        EXPECT_TRUE(same(want, last_logits(*m, outside, chunk)));
        EXPECT_FALSE(same(want, last_logits(*m, inside, chunk)));
    }
}

// The control: the same change outside the window moves the logits when the layers are global, both for
// a model without the key and for gemma3's sixth layer.
TEST(SlidingWindow, GlobalLayersSeeEveryToken) {
    const int64_t n = 30;
    const auto base = tokens(n, 0);
    auto changed = base;
    changed[0] = (changed[0] + 1) % 256;
    for (const auto& m : {gemma3(3, 0), gemma3(6, kWindow)}) {
        SCOPED_TRACE("window " + std::to_string(m->hp.n_swa) + ", layers " + std::to_string(m->hp.n_layer));
        EXPECT_FALSE(same(last_logits(*m, base, 30), last_logits(*m, changed, 30)));
    }
}

// Fed whole, token by token or in chunks, the windowed model gives the same logits (each query's window
// is its own, not the chunk's).
TEST(SlidingWindow, ChunkingDoesNotChangeTheLogits) {
    const auto m = gemma3(6, kWindow);
    const auto t = tokens(40, 2);
    const auto whole = last_logits(*m, t, 40);
    ASSERT_EQ(whole.size(), size_t(m->hp.n_vocab));
    for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{16}}) {
        const auto got = last_logits(*m, t, chunk);
        ASSERT_EQ(got.size(), whole.size());
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], whole[i], 1e-4f) << chunk << " " << i;
    }
}

}  // namespace
}  // namespace minfer::test
