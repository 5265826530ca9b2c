// Malformed GGUF files: each defect must surface as a minfer::Error naming the file and the problem,
// never as a crash, a hang or a huge allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"
#include "test_data.h"

namespace minfer {
namespace {

using test::find_unique;
using test::open_fails_with;
using test::put;
using test::TempDir;
constexpr size_t npos = std::string_view::npos;

// A small valid file (metadata of several types, three tensors) that each test damages in one place.
class GgufCorrupt : public testing::Test {
  protected:
    void SetUp() override {
        GgufWriter w;
        w.set_str("general.architecture", "llama");
        w.set_u32("general.alignment", 32);
        w.set_str_array("test.tokens", {"one", "two", "three"});
        w.set_u32("dup.aaa", 1);
        w.set_u32("dup.bbb", 2);
        std::vector<float> alpha(8), gamma(4);
        std::iota(alpha.begin(), alpha.end(), 1.0f);
        std::iota(gamma.begin(), gamma.end(), -2.0f);
        const std::vector<uint8_t> beta(68, 0x11);
        w.add_tensor("tensor.alpha", GgmlType::F32, {8}, alpha.data(), alpha.size() * 4);
        w.add_tensor("tensor.beta", GgmlType::Q8_0, {32, 2}, beta.data(), beta.size());
        w.add_tensor("tensor.gamma", GgmlType::F32, {4}, gamma.data(), gamma.size() * 4);
        const std::string base = tmp_.file("base.gguf");
        w.write(base);
        bytes_ = test::read_bytes(base);
        const auto f = GgufFile::open(base);
        data_offset_ = f->data_offset();
        for (const GgufTensor& t : f->tensors())
            data_end_ = std::max<uint64_t>(data_end_, data_offset_ + t.offset + t.n_bytes);
        table_end_ = after_name("tensor.gamma") + 4 + 8 + 4 + 8;  // n_dims, one dim, type, offset
    }

    // Writes the first `n` bytes of `bytes` to a fresh file and returns its path.
    std::string save(const std::vector<uint8_t>& bytes, size_t n = SIZE_MAX) {
        const std::string path = tmp_.file("case" + std::to_string(cases_++) + ".gguf");
        test::write_bytes(path, bytes, n);
        return path;
    }

    // Position just past the (unique) occurrence of `name` in the base file.
    size_t after_name(std::string_view name) const {
        const size_t p = find_unique(bytes_, name);
        EXPECT_NE(p, npos) << name;
        return p == npos ? 0 : p + name.size();
    }

    // Copy of the base file with `value` written at `pos`.
    template <class T>
    std::vector<uint8_t> patched(size_t pos, T value) const {
        std::vector<uint8_t> b = bytes_;
        put(b, pos, value);
        return b;
    }

    // Copy of the base file with every occurrence of `from` replaced by `to` (same length).
    std::vector<uint8_t> renamed(std::string_view from, std::string_view to) const {
        std::vector<uint8_t> b = bytes_;
        const size_t p = find_unique(b, from);
        EXPECT_NE(p, npos) << from;
        if (p != npos) std::copy(to.begin(), to.end(), b.begin() + ptrdiff_t(p));
        return b;
    }

    TempDir tmp_;
    std::vector<uint8_t> bytes_;
    uint64_t data_offset_ = 0;
    uint64_t data_end_ = 0;
    size_t table_end_ = 0;
    int cases_ = 0;
};

TEST_F(GgufCorrupt, TruncationAtEveryByteIsReported) {
    ASSERT_LT(table_end_, data_end_);
    for (size_t n = 0; n < data_end_; ++n) {
        const char* phrase = n < table_end_ ? "truncated" : "extends past end of file";
        EXPECT_TRUE(open_fails_with(save(bytes_, n), phrase)) << "cut at " << n;
    }
}

TEST_F(GgufCorrupt, TruncationNamesTheField) {
    EXPECT_TRUE(open_fails_with(save(bytes_, 0), "truncated at byte 0 while reading the magic"));
    EXPECT_TRUE(open_fails_with(save(bytes_, 6), "truncated at byte 6 while reading the version"));
    const size_t arch = after_name("general.architecture");
    EXPECT_TRUE(open_fails_with(save(bytes_, arch + 4 + 8 + 2),
                                "while reading the value of metadata key 'general.architecture'"));
    EXPECT_TRUE(open_fails_with(save(bytes_, after_name("test.tokens") + 6),
                                "while reading the value of metadata key 'test.tokens'"));
    EXPECT_TRUE(
        open_fails_with(save(bytes_, after_name("tensor.beta") + 10), "tensor info of 'tensor.beta'"));
}

TEST_F(GgufCorrupt, TruncatedRealModel) {
    const std::string model = test::model_path("qwen2-mini-Q8_0.gguf");
    MINFER_REQUIRE_FILE(model);
    const std::vector<uint8_t> real = test::read_bytes(model);
    const auto f = GgufFile::open(model);
    const uint64_t data = f->data_offset();
    uint64_t end = 0;
    for (const GgufTensor& t : f->tensors()) end = std::max<uint64_t>(end, data + t.offset + t.n_bytes);
    ASSERT_GT(data, 100000u + f->alignment());
    // The tensor table ends within one alignment step before the data section.
    for (uint64_t cut :
         {uint64_t(3), uint64_t(30), uint64_t(1000), uint64_t(100000), data - f->alignment() - 8}) {
        EXPECT_TRUE(open_fails_with(save(real, cut), "truncated")) << "cut at " << cut;
    }
    for (uint64_t cut : {data, data + 100, (data + end) / 2, end - 1}) {
        EXPECT_TRUE(open_fails_with(save(real, cut), "extends past end of file")) << "cut at " << cut;
    }
}

TEST_F(GgufCorrupt, WrongMagic) {
    std::vector<uint8_t> b = bytes_;
    std::copy_n("GGML", 4, b.begin());
    EXPECT_TRUE(open_fails_with(save(b), "not a GGUF file (bad magic 0x47474d4c"));
    const std::string text = "hello, world\n";
    EXPECT_TRUE(open_fails_with(save(std::vector<uint8_t>(text.begin(), text.end())), "bad magic"));
}

TEST_F(GgufCorrupt, UnsupportedVersion) {
    EXPECT_TRUE(open_fails_with(save(patched(4, uint32_t(1))), "unsupported GGUF version 1"));
    EXPECT_TRUE(open_fails_with(save(patched(4, uint32_t(4))), "unsupported GGUF version 4"));
    EXPECT_TRUE(open_fails_with(save(patched(4, uint32_t(0x03000000))), "big-endian"));
    const auto v2 = GgufFile::open(save(patched(4, uint32_t(2))));
    EXPECT_EQ(v2->version(), 2u);
    EXPECT_EQ(v2->tensors().size(), 3u);
}

TEST_F(GgufCorrupt, NotAFile) {
    const std::string missing = tmp_.file("does-not-exist.gguf");
    EXPECT_TRUE(open_fails_with(missing, "cannot open"));
    EXPECT_TRUE(open_fails_with(tmp_.dir(), "not a regular file"));
}

TEST_F(GgufCorrupt, TensorOffsetPastEndOfFile) {
    const size_t off = after_name("tensor.gamma") + 16;
    const uint64_t bad = uint64_t(1) << 20;
    const std::string expect = "tensor 'tensor.gamma' data [" + std::to_string(data_offset_ + bad) + ", " +
                               std::to_string(data_offset_ + bad + 16) + ") extends past end of file (size " +
                               std::to_string(bytes_.size()) + ")";
    EXPECT_TRUE(open_fails_with(save(patched(off, bad)), expect));
    EXPECT_TRUE(open_fails_with(save(patched(off, ~uint64_t(31))), "extends past end of file"));
}

TEST_F(GgufCorrupt, UnknownTensorType) {
    const size_t type = after_name("tensor.beta") + 4 + 16;
    EXPECT_TRUE(open_fails_with(save(patched(type, uint32_t(99))),
                                "unknown tensor type 99 for tensor 'tensor.beta'"));
    EXPECT_TRUE(
        open_fails_with(save(patched(type, uint32_t(4))), "unknown tensor type 4 for tensor 'tensor.beta'"));
}

TEST_F(GgufCorrupt, AbsurdStringLength) {
    const uint64_t huge = uint64_t(1) << 62;
    const size_t key_len = find_unique(bytes_, "general.architecture") - 8;
    EXPECT_TRUE(open_fails_with(save(patched(key_len, huge)), "string length " + std::to_string(huge)));
    const size_t value_len = after_name("general.architecture") + 4;
    EXPECT_TRUE(
        open_fails_with(save(patched(value_len, ~uint64_t(0))), "string length 18446744073709551615"));
    const size_t name_len = find_unique(bytes_, "tensor.beta") - 8;
    EXPECT_TRUE(open_fails_with(save(patched(name_len, uint64_t(bytes_.size()))), "string length"));
}

TEST_F(GgufCorrupt, AbsurdArrayCount) {
    const size_t elem_type = after_name("test.tokens") + 4;
    const uint64_t huge = uint64_t(1) << 61;
    EXPECT_TRUE(open_fails_with(save(patched(elem_type + 4, huge)), "array count " + std::to_string(huge)));
    EXPECT_TRUE(open_fails_with(save(patched(elem_type + 4, ~uint64_t(0))), "array count"));
    EXPECT_TRUE(open_fails_with(save(patched(elem_type, uint32_t(77))), "unknown array element type 77"));
}

// A garbage count makes the parser read past the real entries until some field is invalid or cut off;
// it must never size an allocation from the count.
TEST_F(GgufCorrupt, AbsurdEntryCounts) {
    EXPECT_TRUE(
        open_fails_with(save(patched(16, uint64_t(1) << 40)), "of metadata entry 7 of 1099511627776"));
    EXPECT_TRUE(open_fails_with(save(patched(16, ~uint64_t(0))), "metadata entry"));
    EXPECT_TRUE(open_fails_with(save(patched(8, uint64_t(1) << 40)), "tensor"));
    EXPECT_TRUE(open_fails_with(save(patched(8, ~uint64_t(0))), "tensor"));
}

TEST_F(GgufCorrupt, MisalignedOffset) {
    const size_t off = after_name("tensor.gamma") + 16;
    const uint64_t bad = test::get<uint64_t>(bytes_, off) + 4;
    EXPECT_TRUE(open_fails_with(
        save(patched(off, bad)),
        "tensor 'tensor.gamma' offset " + std::to_string(bad) + " is not a multiple of the alignment 32"));
}

TEST_F(GgufCorrupt, OverlappingTensors) {
    EXPECT_TRUE(open_fails_with(save(patched(after_name("tensor.gamma") + 16, uint64_t(0))), "overlap"));
}

TEST_F(GgufCorrupt, DuplicateNames) {
    EXPECT_TRUE(open_fails_with(save(renamed("dup.bbb", "dup.aaa")), "duplicate metadata key 'dup.aaa'"));
    EXPECT_TRUE(open_fails_with(save(renamed("tensor.gamma", "tensor.alpha")),
                                "duplicate tensor name 'tensor.alpha'"));
}

TEST_F(GgufCorrupt, BadAlignment) {
    const size_t type = after_name("general.alignment");
    EXPECT_TRUE(open_fails_with(save(patched(type + 4, uint32_t(48))), "power of two"));
    EXPECT_TRUE(open_fails_with(save(patched(type + 4, uint32_t(0))), "power of two"));
    EXPECT_TRUE(
        open_fails_with(save(patched(type, uint32_t(GgufValueType::I32))), "general.alignment has type I32"));
}

TEST_F(GgufCorrupt, BadDimensions) {
    const size_t beta = after_name("tensor.beta");
    EXPECT_TRUE(open_fails_with(save(patched(beta, uint32_t(5))), "has 5 dimensions"));
    EXPECT_TRUE(open_fails_with(save(patched(beta, uint32_t(0))), "has 0 dimensions"));
    EXPECT_TRUE(open_fails_with(save(patched(beta + 4, int64_t(33))),
                                "first dimension 33, not a multiple of the block size 32"));
    std::vector<uint8_t> b = patched(beta + 4, int64_t(1) << 32);
    put(b, beta + 12, int64_t(1) << 32);
    EXPECT_TRUE(open_fails_with(save(b), "element count of tensor 'tensor.beta' overflows"));
    EXPECT_TRUE(
        open_fails_with(save(patched(after_name("tensor.alpha") + 4, int64_t(-1))), "negative dimension"));
}

TEST_F(GgufCorrupt, UnknownValueType) {
    EXPECT_TRUE(open_fails_with(save(patched(after_name("dup.aaa"), uint32_t(13))),
                                "unknown value type 13 for metadata key 'dup.aaa'"));
}

// A file without tensors whose only metadata entry, key "k", has type `type` and the encoded `payload`.
std::vector<uint8_t> one_value_file(GgufValueType type, const std::vector<uint8_t>& payload) {
    std::vector<uint8_t> b(4 + 4 + 8 + 8 + 8 + 1 + 4);
    std::copy_n("GGUF", 4, b.begin());
    put(b, 4, uint32_t(3));
    put(b, 8, uint64_t(0));
    put(b, 16, uint64_t(1));
    put(b, 24, uint64_t(1));
    b[32] = 'k';
    put(b, 33, uint32_t(type));
    b.insert(b.end(), payload.begin(), payload.end());
    return b;
}

// Array header (element type, count) in its on-disk encoding.
void add_array_header(std::vector<uint8_t>& out, GgufValueType elem, uint64_t count) {
    out.resize(out.size() + 12);
    put(out, out.size() - 12, uint32_t(elem));
    put(out, out.size() - 8, count);
}

// `levels` arrays nested inside each other, the innermost an empty array of U8.
std::vector<uint8_t> nested_array_file(int levels) {
    std::vector<uint8_t> payload;
    for (int i = 1; i < levels; ++i) add_array_header(payload, GgufValueType::ARRAY, 1);
    add_array_header(payload, GgufValueType::U8, 0);
    return one_value_file(GgufValueType::ARRAY, payload);
}

TEST_F(GgufCorrupt, NestingDepthIsBounded) {
    const auto ok = GgufFile::open(save(nested_array_file(8)));
    int depth = 0;
    for (const GgufValue* v = ok->find("k"); v->type == GgufValueType::ARRAY; ++depth) {
        const GgufArray& arr = *std::get<std::shared_ptr<GgufArray>>(v->v);
        if (arr.items.empty()) {
            ++depth;
            break;
        }
        v = &arr.items[0];
    }
    EXPECT_EQ(depth, 8);
    EXPECT_TRUE(open_fails_with(save(nested_array_file(9)), "nested deeper than 8"));
    EXPECT_TRUE(open_fails_with(save(nested_array_file(200000)), "nested deeper than 8"));
}

TEST_F(GgufCorrupt, ArrayElementsAreCapped) {
    const uint64_t count = (uint64_t(1) << 24) + 1;
    std::vector<uint8_t> payload;
    add_array_header(payload, GgufValueType::U8, count);
    payload.resize(payload.size() + count);
    EXPECT_TRUE(open_fails_with(save(one_value_file(GgufValueType::ARRAY, payload)),
                                "array count 16777217 in the value of metadata key 'k' exceeds the limit"));
}

// Random byte damage anywhere in the header must yield either a valid file or minfer::Error.
TEST_F(GgufCorrupt, RandomDamageNeverEscapesAsAnotherFailure) {
    std::mt19937 rng(12345);
    const std::string path = tmp_.file("fuzz.gguf");
    int rejected = 0;
    for (int iter = 0; iter < 1000; ++iter) {
        std::vector<uint8_t> b = bytes_;
        const int flips = 1 + int(rng() % 4);
        for (int i = 0; i < flips; ++i) b[rng() % table_end_] ^= uint8_t(1u << (rng() % 8));
        test::write_bytes(path, b, iter % 5 == 0 ? rng() % b.size() : b.size());
        try {
            GgufFile::open(path);
        } catch (const Error& e) {
            ++rejected;
            ASSERT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
        } catch (const std::exception& e) {
            FAIL() << "iteration " << iter << ": escaped as " << typeid(e).name() << ": " << e.what();
        }
    }
    EXPECT_GT(rejected, 300);
}

}  // namespace
}  // namespace minfer
