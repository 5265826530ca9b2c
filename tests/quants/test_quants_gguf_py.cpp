// The low-bit formats against a dequantizer minfer did not write: gguf-py's (llama.cpp's Python package), on
// blocks llama-quantize wrote, blocks gguf-py's MXFP4 quantizer wrote and random blocks
// (tests/quants/data/lowbit-dequant.json, made by scripts/make-quant-refs.py). Both the scalar reference
// and the table's (SIMD) dequantizer must give gguf-py's floats bit for bit. (Q2_K's fused multiply-add
// agrees with gguf-py's two roundings: d * sc * q is exact in f32, an fp16 times 4 bits times 2 bits.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"
#include "quant/quants.h"

namespace minfer::test {
namespace {

const nlohmann::json& refs() {
    static const nlohmann::json j = [] {
        std::ifstream in(std::string(MINFER_SOURCE_DIR) + "/tests/quants/data/lowbit-dequant.json");
        return nlohmann::json::parse(in);
    }();
    return j;
}

std::vector<uint8_t> from_hex(const std::string& s) {
    std::vector<uint8_t> out(s.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoi(s.substr(2 * i, 2), nullptr, 16));
    return out;
}

class GgufPy : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GgufPy, DequantizationEqualsGgufPy) {
    const QuantTraits* q = quant_traits(GetParam());
    ASSERT_NE(q, nullptr);
    const nlohmann::json& cases = refs()["types"][q->name];
    ASSERT_GE(cases.size(), 20u) << q->name;
    for (size_t c = 0; c < cases.size(); ++c) {
        const std::vector<uint8_t> bytes = from_hex(cases[c]["bytes"]);
        const auto want = cases[c]["f32_bits"].get<std::vector<uint32_t>>();
        ASSERT_EQ(bytes.size(), q->type_size);
        ASSERT_EQ(want.size(), size_t(q->block_size));
        std::vector<float> ref(want.size()), fast(want.size());
        q->to_float_ref(bytes.data(), ref.data(), q->block_size);
        q->to_float(bytes.data(), fast.data(), q->block_size);
        for (size_t i = 0; i < want.size(); ++i) {
            float w;
            std::memcpy(&w, &want[i], 4);
            ASSERT_EQ(std::memcmp(&ref[i], &w, 4), 0) << q->name << " block " << c << " element " << i << ": "
                                                      << ref[i] << " against gguf-py's " << w;
            ASSERT_EQ(std::memcmp(&ref[i], &fast[i], 4), 0) << q->name << " block " << c << " element " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(LowBit, GgufPy,
                         ::testing::Values(GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                           GgmlType::MXFP4),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

}  // namespace
}  // namespace minfer::test
