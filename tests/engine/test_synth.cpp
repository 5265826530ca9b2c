// write_synth_model's llama-quantize _M mix: which matrices take the more-bits type, and the fallbacks
// for rows a 256-element K-quant cannot hold.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gguf/gguf.h"
#include "gguf/gguf_test_util.h"
#include "models/synth.h"

namespace minfer {
namespace {

TEST(Synth, use_more_bits_picks_llama_quantize_layers) {
    std::set<int> picked;
    for (int il = 0; il < 28; ++il)
        if (use_more_bits(il, 28)) picked.insert(il);
    // n / 8 = 3 and 7n / 8 = 24: layers 0..2, 24..27, and 3 + 3k + 2 between.
    EXPECT_EQ(picked, (std::set<int>{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27}));
}

TEST(Synth, mix_puts_output_attn_v_and_ffn_down_of_picked_layers_in_more_bits_type) {
    test::TempDir tmp;
    SynthSpec s;
    s.n_layer = 8, s.n_embd = 256, s.n_head = 4, s.n_head_kv = 2, s.head_dim = 64, s.n_ff = 288;
    s.n_vocab = 64, s.tied_output = true;
    s.type = GgmlType::Q4_K, s.fallback_type = GgmlType::Q4_0;
    s.more_bits_type = GgmlType::Q6_K, s.more_bits_fallback = GgmlType::Q8_0;
    write_synth_model(s, tmp.file("mix.gguf"));
    const auto file = GgufFile::open(tmp.file("mix.gguf"));
    const auto type = [&](const std::string& name) {
        const GgufTensor* t = file->find_tensor(name);
        EXPECT_NE(t, nullptr) << name;
        return t ? t->type : GgmlType::F32;
    };
    EXPECT_EQ(type("token_embd.weight"), GgmlType::Q6_K);  // tied: the embedding is the output
    const std::set<int> more{0, 3, 6, 7};                  // use_more_bits(il, 8)
    for (int il = 0; il < s.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        const bool m = more.count(il) > 0;
        EXPECT_EQ(type(p + "attn_v.weight"), m ? GgmlType::Q6_K : GgmlType::Q4_K) << il;
        EXPECT_EQ(type(p + "attn_k.weight"), GgmlType::Q4_K) << il;
        EXPECT_EQ(type(p + "ffn_gate.weight"), GgmlType::Q4_K) << il;
        // ffn_down rows hold n_ff = 288 elements: no 256-element K-quant fits, so both fall back.
        EXPECT_EQ(type(p + "ffn_down.weight"), m ? GgmlType::Q8_0 : GgmlType::Q4_0) << il;
    }
}

TEST(Synth, without_mix_every_matrix_takes_the_one_type) {
    test::TempDir tmp;
    SynthSpec s;
    s.n_embd = 256, s.n_ff = 256, s.head_dim = 64, s.tied_output = false, s.type = GgmlType::Q4_K;
    write_synth_model(s, tmp.file("plain.gguf"));
    const auto file = GgufFile::open(tmp.file("plain.gguf"));
    for (const GgufTensor& t : file->tensors())
        if (t.name.find("norm") == std::string::npos && t.name.find("bias") == std::string::npos)
            EXPECT_EQ(t.type, GgmlType::Q4_K) << t.name;
}

}  // namespace
}  // namespace minfer
