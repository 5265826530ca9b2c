// ggml tensor element types (numbering fixed by the GGUF format) and their block layouts.
#pragma once
#include <cstddef>
#include <cstdint>

namespace minfer {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    TQ1_0 = 34,
    TQ2_0 = 35,
    MXFP4 = 39,
};

struct GgmlTypeLayout {
    const char* name;  // "Q4_K"; nullptr for numbers the format does not define
    int block_size;    // elements per block
    size_t type_size;  // bytes per block
};

// Layout of any type GGUF files may declare (so the reader can size tensors and name them in errors);
// returns {nullptr, 0, 0} for unknown numbers. Which types minfer can *compute* with is the
// quant traits table's business (quant/quants.h).
GgmlTypeLayout ggml_type_layout(uint32_t type);
inline GgmlTypeLayout ggml_type_layout(GgmlType t) {
    return ggml_type_layout(uint32_t(t));
}
const char* ggml_type_name(GgmlType t);  // "Q4_K", or "type#N" for unknown numbers

}  // namespace minfer
