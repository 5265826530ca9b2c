#include "models/registry.h"

namespace minfer {

namespace {
constexpr ArchInfo kArchs[] = {
    {"qwen2", build_qwen2, RopeStyle::Neox, true, false, false},
    {"qwen3", build_qwen3, RopeStyle::Neox, false, true, false},
    {"llama", build_llama, RopeStyle::Normal, false, false, false},
    {"qwen3moe", build_qwen3moe, RopeStyle::Neox, false, true, true},
    {"gemma3", build_gemma3, RopeStyle::Neox, false, true, false, true},
    {"gpt-oss", build_gptoss, RopeStyle::Neox, true, false, true, false, true, true, "post_attention_norm"},
};
}  // namespace

const ArchInfo* find_arch(const std::string& arch) {
    for (const ArchInfo& a : kArchs)
        if (arch == a.name) return &a;
    return nullptr;
}

std::string known_archs() {
    std::string s;
    for (const ArchInfo& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
    return s;
}

}  // namespace minfer
