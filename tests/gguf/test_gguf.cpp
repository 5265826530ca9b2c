// Opens every shared model and vocab file and checks that what the reader reports is self-consistent
// and agrees with what the file name says (architecture, weight type).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "gguf/gguf.h"
#include "test_data.h"
#include "util/fp16.h"

namespace minfer {
namespace {

const char* const kModels[] = {
    "qwen2-mini-BF16.gguf",   "qwen2-mini-F16.gguf",  "qwen2-mini-Q4_0.gguf",   "qwen2-mini-Q4_K_M.gguf",
    "qwen2-mini-Q5_K_M.gguf", "qwen2-mini-Q6_K.gguf", "qwen2-mini-Q8_0.gguf",   "qwen3-mini-BF16.gguf",
    "qwen3-mini-F16.gguf",    "qwen3-mini-Q4_0.gguf", "qwen3-mini-Q4_K_M.gguf", "qwen3-mini-Q5_K_M.gguf",
    "qwen3-mini-Q6_K.gguf",   "qwen3-mini-Q8_0.gguf", "llama-mini-BF16.gguf",   "llama-mini-F16.gguf",
    "llama-mini-Q4_K_M.gguf", "stories260K.gguf",
};
const char* const kVocabs[] = {"qwen-vocab.gguf", "llama3-vocab.gguf"};

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.rfind(prefix, 0) == 0;
}

// Architecture implied by the file name.
std::string arch_from_name(const std::string& file) {
    if (starts_with(file, "qwen2-") || starts_with(file, "qwen-")) return "qwen2";
    if (starts_with(file, "qwen3-")) return "qwen3";
    return "llama";  // llama-mini, llama3-vocab, stories260K
}

// "Q4_K_M" -> {"Q4_K", mixed}; "stories260K.gguf" (no type suffix) -> {"F32", not mixed}.
struct NamedType {
    std::string type;
    bool mixed;
};
NamedType type_from_name(const std::string& file) {
    const size_t dash = file.rfind('-');
    if (dash == std::string::npos) return {"F32", false};
    std::string t = file.substr(dash + 1, file.size() - dash - 1 - std::string(".gguf").size());
    const bool mixed = t.size() > 2 && (t.ends_with("_M") || t.ends_with("_S"));
    if (mixed) t.resize(t.size() - 2);
    return {t, mixed};
}

// Index N of a "blk.N.*" name, or -1.
int block_index(const std::string& name) {
    if (!starts_with(name, "blk.")) return -1;
    return std::stoi(name.substr(4));
}

void check_tokenizer(const GgufFile& f) {
    const std::vector<std::string> tokens = f.get_str_array("tokenizer.ggml.tokens");
    ASSERT_FALSE(tokens.empty());

    if (f.has("tokenizer.ggml.token_type")) {
        EXPECT_EQ(f.get_int_array("tokenizer.ggml.token_type").size(), tokens.size());
    }
    if (f.has("tokenizer.ggml.scores")) {
        EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").size(), tokens.size());
    }
    for (const char* id : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"}) {
        if (f.has(id)) {
            EXPECT_LT(f.get_int(id), int64_t(tokens.size())) << id;
        }
    }
    if (f.get_str("tokenizer.ggml.model") == "gpt2") {
        const std::vector<std::string> merges = f.get_str_array("tokenizer.ggml.merges");
        ASSERT_FALSE(merges.empty());
        const std::set<std::string> vocab(tokens.begin(), tokens.end());
        for (const std::string& m : merges) {
            const size_t space = m.find(' ');
            ASSERT_NE(space, std::string::npos) << m;
            // A BPE merge "a b" produces the token "ab", which the vocabulary must contain.
            ASSERT_TRUE(vocab.count(m.substr(0, space) + m.substr(space + 1))) << m;
        }
    }
}

class SharedModel : public testing::TestWithParam<const char*> {
  protected:
    void SetUp() override {
        file_ = GetParam();
        const std::string path = test::model_path(file_);
        MINFER_REQUIRE_FILE(path);
        f_ = GgufFile::open(path);
        arch_ = f_->get_str("general.architecture");
    }
    std::string file_;
    std::string arch_;
    std::unique_ptr<GgufFile> f_;
};

TEST_P(SharedModel, MetadataIsSensible) {
    EXPECT_EQ(arch_, arch_from_name(file_));
    EXPECT_TRUE(f_->version() == 2 || f_->version() == 3);
    EXPECT_EQ(f_->data_offset() % f_->alignment(), 0u);
    EXPECT_GT(f_->get_int(arch_ + ".block_count"), 0);
    EXPECT_GT(f_->get_int(arch_ + ".attention.head_count"), 0);
    EXPECT_GT(f_->get_float(arch_ + ".attention.layer_norm_rms_epsilon"), 0.0);
    EXPECT_LT(f_->get_float(arch_ + ".attention.layer_norm_rms_epsilon"), 1e-3);
    check_tokenizer(*f_);
}

TEST_P(SharedModel, TensorShapesAgreeWithMetadata) {
    const int64_t n_embd = f_->get_int(arch_ + ".embedding_length");
    const int64_t n_ff = f_->get_int(arch_ + ".feed_forward_length");
    const int64_t n_vocab = int64_t(f_->get_str_array("tokenizer.ggml.tokens").size());
    EXPECT_EQ(f_->tensor("token_embd.weight").dims, (std::vector<int64_t>{n_embd, n_vocab}));
    EXPECT_EQ(f_->tensor("output_norm.weight").dims, (std::vector<int64_t>{n_embd}));
    if (const GgufTensor* out = f_->find_tensor("output.weight")) {
        EXPECT_EQ(out->dims, (std::vector<int64_t>{n_embd, n_vocab}));
    }
    std::set<int> blocks;
    for (const GgufTensor& t : f_->tensors()) {
        if (block_index(t.name) >= 0) blocks.insert(block_index(t.name));
        if (t.dims.size() == 1) {
            EXPECT_EQ(t.type, GgmlType::F32) << t.name;
        }
    }
    const int64_t n_layer = f_->get_int(arch_ + ".block_count");
    ASSERT_EQ(int64_t(blocks.size()), n_layer);
    EXPECT_EQ(*blocks.rbegin(), n_layer - 1);
    for (int i = 0; i < n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        EXPECT_EQ(f_->tensor(b + "attn_norm.weight").dims, (std::vector<int64_t>{n_embd}));
        EXPECT_EQ(f_->tensor(b + "ffn_up.weight").dims, (std::vector<int64_t>{n_embd, n_ff}));
        EXPECT_EQ(f_->tensor(b + "ffn_down.weight").dims, (std::vector<int64_t>{n_ff, n_embd}));
        EXPECT_EQ(f_->tensor(b + "attn_q.weight").dims[0], n_embd);
    }
}

TEST_P(SharedModel, WeightTypesMatchTheFileName) {
    const NamedType want = type_from_name(file_);
    std::map<std::string, int> counts;
    for (const GgufTensor& t : f_->tensors()) {
        if (block_index(t.name) < 0 || t.dims.size() != 2) continue;
        const std::string type = ggml_type_name(t.type);
        ++counts[type];
        if (!want.mixed) {
            EXPECT_EQ(type, want.type) << t.name;
        }
    }
    ASSERT_FALSE(counts.empty());
    const auto most = std::max_element(counts.begin(), counts.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    EXPECT_EQ(most->first, want.type);
}

TEST_P(SharedModel, TensorDataLiesInsideTheFileWithoutOverlap) {
    std::vector<const GgufTensor*> order;
    for (const GgufTensor& t : f_->tensors()) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const uint8_t* base = order.front()->data - order.front()->offset;
    uint64_t end = 0;
    for (const GgufTensor* t : order) {
        EXPECT_EQ(t->offset % f_->alignment(), 0u) << t->name;
        EXPECT_GE(t->offset, end) << t->name;
        EXPECT_EQ(t->data, base + t->offset) << t->name;
        const GgmlTypeLayout l = ggml_type_layout(t->type);
        EXPECT_EQ(t->n_bytes, uint64_t(t->n_elements() / l.block_size) * l.type_size) << t->name;
        end = t->offset + t->n_bytes;
    }
    EXPECT_LE(f_->data_offset() + end, f_->file_size());
    const GgufTensor& norm = f_->tensor("output_norm.weight");
    double sum = 0;
    for (int64_t i = 0; i < norm.n_elements(); ++i) {
        float v;
        std::memcpy(&v, norm.data + 4 * i, 4);
        ASSERT_TRUE(std::isfinite(v)) << i;
        sum += std::fabs(v);
    }
    EXPECT_GT(sum, 0.0);
}

TEST_P(SharedModel, PrefetchReportsProgressToTheEnd) {
    struct Seen {
        size_t calls = 0, last_done = 0, total = 0;
        bool monotonic = true;
    } seen;
    f_->prefetch({[](size_t done, size_t total, void* user) {
                      auto* s = static_cast<Seen*>(user);
                      s->monotonic = s->monotonic && done >= s->last_done && done <= total;
                      s->calls++;
                      s->last_done = done;
                      s->total = total;
                  },
                  &seen});
    EXPECT_GE(seen.calls, 1u);
    EXPECT_TRUE(seen.monotonic);
    EXPECT_EQ(seen.total, f_->file_size() - f_->data_offset());
    EXPECT_EQ(seen.last_done, seen.total);
    f_->prefetch();
}

std::string param_name(const testing::TestParamInfo<const char*>& info) {
    std::string s = info.param;
    if (s.ends_with(".gguf")) s.resize(s.size() - std::string(".gguf").size());
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
}

INSTANTIATE_TEST_SUITE_P(Models, SharedModel, testing::ValuesIn(kModels), param_name);

class SharedVocab : public testing::TestWithParam<const char*> {};

TEST_P(SharedVocab, HoldsATokenizerAndNoTensors) {
    const std::string path = test::model_path(GetParam());
    MINFER_REQUIRE_FILE(path);
    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->get_str("general.architecture"), arch_from_name(GetParam()));
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_GT(f->get_str_array("tokenizer.ggml.tokens").size(), 100000u);
    check_tokenizer(*f);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, SharedVocab, testing::ValuesIn(kVocabs), param_name);

// Every quantization of one model has the same tensor table shape and byte-identical F32 tensors;
// the F16 and BF16 embeddings agree to bf16 precision.
class ModelFamily : public testing::TestWithParam<const char*> {};

TEST_P(ModelFamily, VariantsAgree) {
    const std::string stem = GetParam();
    const std::string f16_path = test::model_path(stem + "-F16.gguf");
    MINFER_REQUIRE_FILE(f16_path);
    const auto ref = GgufFile::open(f16_path);
    int compared = 0;
    for (const char* file : kModels) {
        const std::string path = test::model_path(file);
        if (!starts_with(file, stem + "-") || !std::filesystem::exists(path)) continue;
        const auto f = GgufFile::open(path);
        ASSERT_EQ(f->tensors().size(), ref->tensors().size()) << file;
        for (const GgufTensor& t : ref->tensors()) {
            const GgufTensor& u = f->tensor(t.name);
            EXPECT_EQ(u.dims, t.dims) << file << " " << t.name;
            if (t.type == GgmlType::F32 && u.type == GgmlType::F32) {
                EXPECT_EQ(0, std::memcmp(u.data, t.data, t.n_bytes)) << file << " " << t.name;
            }
        }
        ++compared;
    }
    EXPECT_GE(compared, 2);
}

TEST_P(ModelFamily, Bf16AndF16EmbeddingsAgree) {
    const std::string stem = GetParam();
    const std::string f16_path = test::model_path(stem + "-F16.gguf");
    const std::string bf16_path = test::model_path(stem + "-BF16.gguf");
    MINFER_REQUIRE_FILE(f16_path);
    MINFER_REQUIRE_FILE(bf16_path);
    const auto bf16 = GgufFile::open(bf16_path);
    const auto f16 = GgufFile::open(f16_path);
    const GgufTensor& h = f16->tensor("token_embd.weight");
    const GgufTensor& b = bf16->tensor("token_embd.weight");
    ASSERT_EQ(h.dims, b.dims);
    ASSERT_EQ(h.type, GgmlType::F16);
    ASSERT_EQ(b.type, GgmlType::BF16);
    double max_abs = 0;
    for (int64_t i = 0; i < h.n_elements(); ++i) {
        uint16_t x, y;
        std::memcpy(&x, h.data + 2 * i, 2);
        std::memcpy(&y, b.data + 2 * i, 2);
        const float fx = fp16_to_f32(x), fy = bf16_to_f32(y);
        ASSERT_NEAR(fx, fy, 0.008 * std::fabs(fx) + 1e-4) << "element " << i;
        max_abs = std::max(max_abs, double(std::fabs(fx)));
    }
    EXPECT_GT(max_abs, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamily, testing::Values("qwen2-mini", "qwen3-mini", "llama-mini"),
                         param_name);

// Read into huge pages, the embedded model holds the same bytes and parses to the same tables; nothing
// of it stays mapped from the page cache, and it starts on a 2 MiB boundary.
TEST(GgufResidency, HugePageCopyMatchesTheMapping) {
    const std::string path = MINFER_SOURCE_DIR "/models/qwen2-mini-Q8_0.gguf";
    const auto mapped = GgufFile::open(path);
    size_t last_done = 0;
    const LoadProgress progress{[](size_t done, size_t, void* user) { *static_cast<size_t*>(user) = done; },
                                &last_done};
    const auto huge = GgufFile::open(path, Residency::huge_pages, progress);
    EXPECT_EQ(mapped->residency(), Residency::mapped);
    EXPECT_EQ(huge->metadata().size(), mapped->metadata().size());
    ASSERT_EQ(huge->tensors().size(), mapped->tensors().size());
    if (huge->residency() == Residency::mapped) GTEST_SKIP() << "no transparent huge pages on this kernel";
    EXPECT_EQ(last_done, mapped->file_size());
    const GgufTensor& first = huge->tensors().front();
    const uint8_t* base = first.data - huge->data_offset() - first.offset;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % (size_t(2) << 20), 0u);
    for (size_t i = 0; i < mapped->tensors().size(); ++i) {
        const GgufTensor& a = mapped->tensors()[i];
        const GgufTensor& b = huge->tensors()[i];
        EXPECT_EQ(a.name, b.name);
        EXPECT_NE(a.data, b.data);
        ASSERT_EQ(a.n_bytes, b.n_bytes);
        EXPECT_EQ(std::memcmp(a.data, b.data, a.n_bytes), 0) << a.name;
    }
}

}  // namespace
}  // namespace minfer
