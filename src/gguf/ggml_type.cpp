#include "gguf/ggml_type.h"

#include <string>

namespace minfer {

namespace {

constexpr int kQK = 32;     // elements per block of the simple quant formats
constexpr int kQK_K = 256;  // elements per super-block of the K, IQ and TQ formats

// Indexed by the GGUF type number. Gaps (4, 5, 31..33, 36..38) are types ggml has since removed.
constexpr GgmlTypeLayout kLayouts[] = {
    {"F32", 1, 4},           // 0
    {"F16", 1, 2},           // 1
    {"Q4_0", kQK, 18},       // 2: f16 scale + 16 bytes of nibbles
    {"Q4_1", kQK, 20},       // 3: f16 scale and min + 16 bytes of nibbles
    {nullptr, 0, 0},         // 4: Q4_2 (removed)
    {nullptr, 0, 0},         // 5: Q4_3 (removed)
    {"Q5_0", kQK, 22},       // 6
    {"Q5_1", kQK, 24},       // 7
    {"Q8_0", kQK, 34},       // 8
    {"Q8_1", kQK, 36},       // 9
    {"Q2_K", kQK_K, 84},     // 10
    {"Q3_K", kQK_K, 110},    // 11
    {"Q4_K", kQK_K, 144},    // 12
    {"Q5_K", kQK_K, 176},    // 13
    {"Q6_K", kQK_K, 210},    // 14
    {"Q8_K", kQK_K, 292},    // 15: f32 scale + 256 quants + 16 int16 sums
    {"IQ2_XXS", kQK_K, 66},  // 16
    {"IQ2_XS", kQK_K, 74},   // 17
    {"IQ3_XXS", kQK_K, 98},  // 18
    {"IQ1_S", kQK_K, 50},    // 19
    {"IQ4_NL", kQK, 18},     // 20
    {"IQ3_S", kQK_K, 110},   // 21
    {"IQ2_S", kQK_K, 82},    // 22
    {"IQ4_XS", kQK_K, 136},  // 23
    {"I8", 1, 1},            // 24
    {"I16", 1, 2},           // 25
    {"I32", 1, 4},           // 26
    {"I64", 1, 8},           // 27
    {"F64", 1, 8},           // 28
    {"IQ1_M", kQK_K, 56},    // 29
    {"BF16", 1, 2},          // 30
    {nullptr, 0, 0},         // 31: Q4_0_4_4 (removed)
    {nullptr, 0, 0},         // 32: Q4_0_4_8 (removed)
    {nullptr, 0, 0},         // 33: Q4_0_8_8 (removed)
    {"TQ1_0", kQK_K, 54},    // 34
    {"TQ2_0", kQK_K, 66},    // 35
    {nullptr, 0, 0},         // 36: IQ4_NL_4_4 (removed)
    {nullptr, 0, 0},         // 37: IQ4_NL_4_8 (removed)
    {nullptr, 0, 0},         // 38: IQ4_NL_8_8 (removed)
    {"MXFP4", kQK, 17},      // 39: e8m0 scale + 16 bytes of fp4 pairs
};

constexpr uint32_t kNumLayouts = sizeof(kLayouts) / sizeof(kLayouts[0]);

}  // namespace

GgmlTypeLayout ggml_type_layout(uint32_t type) {
    if (type >= kNumLayouts) return {nullptr, 0, 0};
    return kLayouts[type];
}

const char* ggml_type_name(GgmlType t) {
    if (const char* name = ggml_type_layout(t).name) return name;
    // One buffer per thread, so the pointer stays valid until this thread asks about another unknown type.
    thread_local std::string unknown;
    unknown = "type#" + std::to_string(uint32_t(t));
    return unknown.c_str();
}

}  // namespace minfer
