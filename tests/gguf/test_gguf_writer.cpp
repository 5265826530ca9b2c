// GGUF writer round trips, typed getters, and the ggml type layout table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "gguf/ggml_type.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf_test_util.h"

namespace minfer {
namespace {

using test::TempDir;

bool values_equal(const GgufValue& a, const GgufValue& b) {
    if (a.type != b.type || a.v.index() != b.v.index()) return false;
    if (a.type != GgufValueType::ARRAY) return a.v == b.v;
    const GgufArray& x = *std::get<std::shared_ptr<GgufArray>>(a.v);
    const GgufArray& y = *std::get<std::shared_ptr<GgufArray>>(b.v);
    if (x.elem_type != y.elem_type || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i)
        if (!values_equal(x.items[i], y.items[i])) return false;
    return true;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> out(n);
    for (uint8_t& b : out) b = uint8_t(rng());
    return out;
}

size_t expected_bytes(GgmlType type, const std::vector<int64_t>& dims) {
    const GgmlTypeLayout layout = ggml_type_layout(type);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return size_t(n / layout.block_size) * layout.type_size;
}

// One value of every metadata type, including nested and empty arrays.
std::vector<std::pair<std::string, GgufValue>> sample_values() {
    using T = GgufValueType;
    std::vector<GgufValue> inner1 = {{T::I16, int64_t(-7)}, {T::I16, int64_t(32767)}};
    std::vector<GgufValue> inner2 = {{T::I16, int64_t(-32768)}};
    std::vector<GgufValue> nested = {GgufWriter::make_array(T::I16, inner1),
                                     GgufWriter::make_array(T::I16, inner2)};
    return {
        {"t.u8", {T::U8, uint64_t(255)}},
        {"t.i8", {T::I8, int64_t(-128)}},
        {"t.u16", {T::U16, uint64_t(65535)}},
        {"t.i16", {T::I16, int64_t(-12345)}},
        {"t.u32", {T::U32, uint64_t(4000000000u)}},
        {"t.i32", {T::I32, int64_t(-2000000000)}},
        {"t.f32", {T::F32, double(0.1f)}},
        {"t.bool", {T::BOOL, true}},
        {"t.string", {T::STRING, std::string("h\xc3\xa9llo\0world", 12)}},
        {"t.empty_string", {T::STRING, std::string()}},
        {"t.u64", {T::U64, uint64_t(0xfedcba9876543210ull)}},
        {"t.i64", {T::I64, int64_t(-0x123456789abcdefll)}},
        {"t.f64", {T::F64, 3.141592653589793}},
        {"t.array_bool", GgufWriter::make_array(T::BOOL, {{T::BOOL, false}, {T::BOOL, true}})},
        {"t.array_f64", GgufWriter::make_array(T::F64, {{T::F64, -1.5}, {T::F64, 1e300}})},
        {"t.array_empty", GgufWriter::make_array(T::U8, {})},
        {"t.array_nested", GgufWriter::make_array(T::ARRAY, nested)},
    };
}

struct SampleTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
};

std::vector<SampleTensor> sample_tensors() {
    return {
        {"a.f32", GgmlType::F32, {3, 5}},         {"b.f16", GgmlType::F16, {17}},
        {"c.bf16", GgmlType::BF16, {4, 2, 3}},    {"d.q8_0", GgmlType::Q8_0, {64, 3}},
        {"e.q4_k", GgmlType::Q4_K, {256, 2}},     {"f.i32", GgmlType::I32, {2, 2, 2, 2}},
        {"g.q4_0", GgmlType::Q4_0, {32}},         {"h.empty", GgmlType::F32, {0, 4}},
        {"i.iq4_xs", GgmlType::IQ4_XS, {256, 1}},
    };
}

TEST(GgufWriter, RoundTripsEveryValueTypeAndTensorBytes) {
    TempDir tmp;
    const std::string path = tmp.file("roundtrip.gguf");
    GgufWriter w;
    const auto values = sample_values();
    for (const auto& [k, v] : values) w.set(k, v);
    const auto specs = sample_tensors();
    std::vector<std::vector<uint8_t>> datas;
    for (size_t i = 0; i < specs.size(); ++i) {
        datas.push_back(random_bytes(expected_bytes(specs[i].type, specs[i].dims), uint32_t(i + 1)));
        w.add_tensor(specs[i].name, specs[i].type, specs[i].dims, datas.back().data(), datas.back().size());
    }
    w.write(path);

    const auto f = GgufFile::open(path);
    const std::vector<uint8_t> raw = test::read_bytes(path);
    EXPECT_EQ(f->file_size(), raw.size());
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    EXPECT_EQ(f->data_offset() % 32, 0u);
    ASSERT_EQ(f->metadata().size(), values.size());
    for (const auto& [k, v] : values) {
        const GgufValue* got = f->find(k);
        ASSERT_NE(got, nullptr) << k;
        EXPECT_TRUE(values_equal(*got, v)) << k;
    }
    ASSERT_EQ(f->tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
        const GgufTensor& t = f->tensors()[i];
        EXPECT_EQ(t.name, specs[i].name);
        EXPECT_EQ(t.type, specs[i].type) << t.name;
        EXPECT_EQ(t.dims, specs[i].dims) << t.name;
        EXPECT_EQ(t.offset % 32, 0u) << t.name;
        ASSERT_EQ(t.n_bytes, datas[i].size()) << t.name;
        EXPECT_TRUE(std::equal(datas[i].begin(), datas[i].end(), t.data)) << t.name;
        ASSERT_LE(f->data_offset() + t.offset + t.n_bytes, raw.size()) << t.name;
        EXPECT_TRUE(std::equal(datas[i].begin(), datas[i].end(),
                               raw.begin() + ptrdiff_t(f->data_offset() + t.offset)))
            << t.name;
        EXPECT_EQ(&f->tensor(t.name), &t);
    }
}

TEST(GgufWriter, HonoursACustomAlignment) {
    TempDir tmp;
    const std::string path = tmp.file("align64.gguf");
    GgufWriter w;
    w.set_u32("general.alignment", 64);
    const auto a = random_bytes(4 * 5, 7);
    const auto b = random_bytes(34, 8);
    w.add_tensor("a", GgmlType::F32, {5}, a.data(), a.size());
    w.add_tensor("b", GgmlType::Q8_0, {32}, b.data(), b.size());
    w.write(path);
    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    for (const GgufTensor& t : f->tensors()) {
        EXPECT_EQ(t.offset % 64, 0u) << t.name;
        EXPECT_EQ(uint64_t(t.data - f->tensors()[0].data), t.offset) << t.name;
    }
    EXPECT_EQ(0, std::memcmp(f->tensor("b").data, b.data(), b.size()));
}

TEST(GgufWriter, EmptyFileRoundTrips) {
    TempDir tmp;
    const std::string path = tmp.file("empty.gguf");
    GgufWriter().write(path);
    const auto f = GgufFile::open(path);
    EXPECT_TRUE(f->metadata().empty());
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->data_offset(), 32u);  // magic, version and two counts (24 bytes), padded to the alignment
    EXPECT_EQ(f->file_size(), f->data_offset());
}

TEST(GgufWriter, SetReplacesInPlace) {
    TempDir tmp;
    const std::string path = tmp.file("replace.gguf");
    GgufWriter w;
    w.set_u32("x", 1);
    w.set_str("y", "first");
    w.set_u32("x", 2);
    w.write(path);
    const auto f = GgufFile::open(path);
    EXPECT_EQ(f->metadata().size(), 2u);
    EXPECT_EQ(f->get_int("x"), 2);
    EXPECT_EQ(f->get_str("y"), "first");
}

TEST(GgufWriter, RejectsInconsistentInput) {
    using T = GgufValueType;
    GgufWriter w;
    EXPECT_THROW(w.set("k", {T::U8, uint64_t(256)}), Error);
    EXPECT_THROW(w.set("k", {T::I8, int64_t(-129)}), Error);
    EXPECT_THROW(w.set("k", {T::U32, int64_t(5)}), Error);
    EXPECT_THROW(w.set("k", {T::STRING, 1.0}), Error);
    EXPECT_THROW(w.set("k", {GgufValueType(13), uint64_t(0)}), Error);
    EXPECT_THROW(w.set("k", GgufWriter::make_array(T::U8, {{T::U16, uint64_t(1)}})), Error);
    EXPECT_NO_THROW(w.set("k", {T::I8, int64_t(-128)}));

    const std::vector<uint8_t> data(68);
    EXPECT_THROW(w.add_tensor("t", GgmlType::Q8_0, {32, 3}, data.data(), data.size()), Error);  // wrong size
    EXPECT_THROW(w.add_tensor("t", GgmlType::Q8_0, {34, 2}, data.data(), data.size()), Error);  // not blocks
    EXPECT_THROW(w.add_tensor("t", GgmlType(4), {32, 2}, data.data(), data.size()), Error);     // removed
    EXPECT_THROW(w.add_tensor("t", GgmlType::I8, {1, 1, 1, 2, 34}, data.data(), data.size()), Error);
    EXPECT_THROW(w.add_tensor("t", GgmlType::I8, {-68}, data.data(), data.size()), Error);
    EXPECT_NO_THROW(w.add_tensor("t", GgmlType::Q8_0, {32, 2}, data.data(), data.size()));
    EXPECT_THROW(w.add_tensor("t", GgmlType::Q8_0, {32, 2}, data.data(), data.size()), Error);  // duplicate
}

// `levels` arrays nested inside each other around one U8.
GgufValue nested_value(int levels) {
    GgufValue v{GgufValueType::U8, uint64_t(9)};
    for (int i = 0; i < levels; ++i) v = GgufWriter::make_array(v.type, {v});
    return v;
}

TEST(GgufWriter, NestingLimitMatchesTheReader) {
    TempDir tmp;
    const std::string path = tmp.file("nested.gguf");
    GgufWriter w;
    EXPECT_THROW(w.set("deep", nested_value(9)), Error);
    w.set("deep", nested_value(8));
    w.write(path);
    const auto f = GgufFile::open(path);
    EXPECT_TRUE(values_equal(*f->find("deep"), nested_value(8)));
}

TEST(GgufWriter, ReportsUnwritablePath) {
    TempDir tmp;
    const std::string path = tmp.file("no/such/dir/x.gguf");
    try {
        GgufWriter().write(path);
        ADD_FAILURE() << "write succeeded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
}

class GgufGetters : public testing::Test {
  protected:
    void SetUp() override {
        GgufWriter w;
        w.set_str("s", "text");
        w.set_u32("u32", 7);
        w.set_i32("i32", -3);
        w.set_u64("big", 0xffffffffffffffffull);
        w.set_f32("f", 0.5f);
        w.set_bool("b", true);
        w.set_str_array("sa", {"x", "yy", ""});
        w.set_i32_array("ia", {1, -2, 3});
        w.set_f32_array("fa", {0.25f, -8.0f});
        w.set("ua", GgufWriter::make_array(GgufValueType::U8, {{GgufValueType::U8, uint64_t(200)}}));
        path_ = tmp_.file("getters.gguf");
        w.write(path_);
        f_ = GgufFile::open(path_);
    }
    // The error message thrown by `fn`, or "" when it does not throw minfer::Error.
    template <class Fn>
    std::string error_of(Fn fn) {
        try {
            fn();
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    }
    TempDir tmp_;
    std::string path_;
    std::unique_ptr<GgufFile> f_;
};

TEST_F(GgufGetters, ReturnTypedValues) {
    EXPECT_EQ(f_->get_str("s"), "text");
    EXPECT_EQ(f_->get_int("u32"), 7);
    EXPECT_EQ(f_->get_int("i32"), -3);
    EXPECT_EQ(f_->get_float("f"), 0.5);
    EXPECT_EQ(f_->get_float("i32"), -3.0);
    EXPECT_TRUE(f_->get_bool("b"));
    EXPECT_EQ(f_->get_str_array("sa"), (std::vector<std::string>{"x", "yy", ""}));
    EXPECT_EQ(f_->get_int_array("ia"), (std::vector<int64_t>{1, -2, 3}));
    EXPECT_EQ(f_->get_int_array("ua"), (std::vector<int64_t>{200}));
    EXPECT_EQ(f_->get_float_array("fa"), (std::vector<float>{0.25f, -8.0f}));
    EXPECT_EQ(f_->get_float_array("ia"), (std::vector<float>{1.0f, -2.0f, 3.0f}));
    EXPECT_TRUE(f_->has("s"));
    EXPECT_FALSE(f_->has("nope"));
    EXPECT_EQ(f_->find("nope"), nullptr);
}

TEST_F(GgufGetters, DefaultsApplyOnlyToAbsentKeys) {
    EXPECT_EQ(f_->get_str_or("nope", "dflt"), "dflt");
    EXPECT_EQ(f_->get_int_or("nope", 42), 42);
    EXPECT_EQ(f_->get_float_or("nope", 1.25), 1.25);
    EXPECT_EQ(f_->get_str_or("s", "dflt"), "text");
    EXPECT_EQ(f_->get_int_or("u32", 42), 7);
    EXPECT_EQ(f_->get_float_or("f", 1.25), 0.5);
    EXPECT_THROW(f_->get_int_or("s", 1), Error);
    EXPECT_THROW(f_->get_str_or("u32", ""), Error);
}

TEST_F(GgufGetters, ErrorsNameThePathAndKey) {
    const std::string missing = error_of([&] { f_->get_int("missing.key"); });
    EXPECT_EQ(missing.rfind(path_, 0), 0u) << missing;
    EXPECT_NE(missing.find("missing metadata key 'missing.key'"), std::string::npos) << missing;
    const std::string wrong = error_of([&] { f_->get_str("u32"); });
    EXPECT_NE(wrong.find("'u32' has type U32, expected STRING"), std::string::npos) << wrong;
    EXPECT_NE(error_of([&] { f_->get_int("big"); }).find("does not fit int64"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_int("f"); }).find("expected an integer"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_bool("u32"); }).find("expected BOOL"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_float("s"); }).find("expected a number"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_str_array("ia"); }).find("array of I32"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_int_array("fa"); }).find("array of F32"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_float_array("sa"); }).find("array of STRING"), std::string::npos);
    EXPECT_NE(error_of([&] { f_->get_int_array("s"); }).find("expected an array"), std::string::npos);
    const std::string tensor = error_of([&] { f_->tensor("blk.9.attn_q.weight"); });
    EXPECT_NE(tensor.find("missing tensor 'blk.9.attn_q.weight'"), std::string::npos) << tensor;
    EXPECT_EQ(f_->find_tensor("blk.9.attn_q.weight"), nullptr);
}

// Expected block layouts, derived from the member lists of ggml's block structs (f16 = 2 bytes).
struct LayoutCase {
    GgmlType type;
    const char* name;
    int block_size;
    size_t type_size;
};

constexpr size_t kHalf = 2;
constexpr int kQK_K = 256;

const LayoutCase kLayoutCases[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::Q4_0, "Q4_0", 32, kHalf + 32 / 2},
    {GgmlType::Q4_1, "Q4_1", 32, 2 * kHalf + 32 / 2},
    {GgmlType::Q5_0, "Q5_0", 32, kHalf + 4 + 32 / 2},
    {GgmlType::Q5_1, "Q5_1", 32, 2 * kHalf + 4 + 32 / 2},
    {GgmlType::Q8_0, "Q8_0", 32, kHalf + 32},
    {GgmlType::Q8_1, "Q8_1", 32, 2 * kHalf + 32},
    {GgmlType::Q2_K, "Q2_K", kQK_K, 2 * kHalf + kQK_K / 16 + kQK_K / 4},
    {GgmlType::Q3_K, "Q3_K", kQK_K, kHalf + kQK_K / 4 + kQK_K / 8 + 12},
    {GgmlType::Q4_K, "Q4_K", kQK_K, 2 * kHalf + 12 + kQK_K / 2},
    {GgmlType::Q5_K, "Q5_K", kQK_K, 2 * kHalf + 12 + kQK_K / 2 + kQK_K / 8},
    {GgmlType::Q6_K, "Q6_K", kQK_K, kHalf + kQK_K / 16 + 3 * kQK_K / 4},
    {GgmlType::Q8_K, "Q8_K", kQK_K, 4 + kQK_K + kQK_K / 16 * 2},
    {GgmlType::IQ2_XXS, "IQ2_XXS", kQK_K, kHalf + kQK_K / 8 * 2},
    {GgmlType::IQ2_XS, "IQ2_XS", kQK_K, kHalf + kQK_K / 8 * 2 + kQK_K / 32},
    {GgmlType::IQ2_S, "IQ2_S", kQK_K, kHalf + kQK_K / 4 + kQK_K / 16},
    {GgmlType::IQ3_XXS, "IQ3_XXS", kQK_K, kHalf + 3 * kQK_K / 8},
    {GgmlType::IQ3_S, "IQ3_S", kQK_K, kHalf + 13 * kQK_K / 32 + kQK_K / 64},
    {GgmlType::IQ1_S, "IQ1_S", kQK_K, kHalf + kQK_K / 8 + kQK_K / 16},
    {GgmlType::IQ1_M, "IQ1_M", kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, kHalf + 32 / 2},
    {GgmlType::IQ4_XS, "IQ4_XS", kQK_K, kHalf + 2 + kQK_K / 64 + kQK_K / 2},
    {GgmlType::TQ1_0, "TQ1_0", kQK_K, kHalf + kQK_K / 64 + (kQK_K - 4 * kQK_K / 64) / 5},
    {GgmlType::TQ2_0, "TQ2_0", kQK_K, kHalf + kQK_K / 4},
    {GgmlType::MXFP4, "MXFP4", 32, 1 + 32 / 2},
};

TEST(GgmlType, LayoutsMatchTheBlockStructs) {
    for (const LayoutCase& c : kLayoutCases) {
        const GgmlTypeLayout l = ggml_type_layout(c.type);
        ASSERT_NE(l.name, nullptr) << c.name;
        EXPECT_STREQ(l.name, c.name);
        EXPECT_STREQ(ggml_type_name(c.type), c.name);
        EXPECT_EQ(l.block_size, c.block_size) << c.name;
        EXPECT_EQ(l.type_size, c.type_size) << c.name;
    }
}

TEST(GgmlType, EveryDefinedNumberIsCoveredOnce) {
    std::set<std::string> names;
    int defined = 0;
    for (uint32_t n = 0; n < 64; ++n) {
        const GgmlTypeLayout l = ggml_type_layout(n);
        if (!l.name) {
            EXPECT_EQ(ggml_type_name(GgmlType(n)), "type#" + std::to_string(n));
            continue;
        }
        ++defined;
        EXPECT_TRUE(names.insert(l.name).second) << l.name;
        EXPECT_GT(l.block_size, 0) << l.name;
        EXPECT_GT(l.type_size, 0u) << l.name;
    }
    EXPECT_EQ(defined, int(std::size(kLayoutCases)));
    for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 0xffffffffu})
        EXPECT_EQ(ggml_type_layout(removed).name, nullptr) << removed;
}

}  // namespace
}  // namespace minfer
