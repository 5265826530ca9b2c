#include "gguf/gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "util/error.h"

namespace minfer {

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;  // arrays inside arrays, as deep as the reader accepts

[[noreturn]] void writer_error(const std::string& msg) {
    throw Error("GGUF writer: " + msg);
}

bool unsigned_fits(uint64_t v, int width) {
    return width == 8 || v < (uint64_t(1) << (8 * width));
}
bool signed_fits(int64_t v, int width) {
    if (width == 8) return true;
    const int64_t limit = int64_t(1) << (8 * width - 1);
    return v >= -limit && v < limit;
}

// `depth` counts the arrays that enclose `v`.
bool value_ok(const GgufValue& v, int depth);

bool array_ok(const GgufValue& v, int depth) {
    const auto* arr = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
    if (!arr || !*arr || depth >= kMaxArrayDepth) return false;
    for (const GgufValue& item : (*arr)->items)
        if (item.type != (*arr)->elem_type || !value_ok(item, depth + 1)) return false;
    return true;
}

bool value_ok(const GgufValue& v, int depth) {
    switch (v.type) {
        case GgufValueType::U8:
        case GgufValueType::U16:
        case GgufValueType::U32:
        case GgufValueType::U64: {
            const auto* u = std::get_if<uint64_t>(&v.v);
            return u && unsigned_fits(*u, gguf_scalar_width(v.type));
        }
        case GgufValueType::I8:
        case GgufValueType::I16:
        case GgufValueType::I32:
        case GgufValueType::I64: {
            const auto* i = std::get_if<int64_t>(&v.v);
            return i && signed_fits(*i, gguf_scalar_width(v.type));
        }
        case GgufValueType::F32:
        case GgufValueType::F64:
            return std::holds_alternative<double>(v.v);
        case GgufValueType::BOOL:
            return std::holds_alternative<bool>(v.v);
        case GgufValueType::STRING:
            return std::holds_alternative<std::string>(v.v);
        case GgufValueType::ARRAY:
            return array_ok(v, depth);
    }
    return false;
}

// Buffered output that remembers its position, for padding.
class Sink {
  public:
    explicit Sink(const std::string& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
        if (!out_) throw Error(path + ": cannot create: " + std::strerror(errno));
    }
    void bytes(const void* p, size_t n) {
        out_.write(static_cast<const char*>(p), std::streamsize(n));
        pos_ += n;
    }
    template <class T>
    void pod(T v) {
        bytes(&v, sizeof(v));
    }
    void str(const std::string& s) {
        pod(uint64_t(s.size()));
        bytes(s.data(), s.size());
    }
    void pad(uint64_t alignment) {
        static const char kZeros[64] = {};
        while (pos_ % alignment != 0)
            bytes(kZeros, std::min<uint64_t>(alignment - pos_ % alignment, sizeof(kZeros)));
    }
    void finish() {
        out_.close();
        if (!out_) throw Error(path_ + ": write failed: " + std::strerror(errno));
    }

  private:
    std::string path_;
    std::ofstream out_;
    uint64_t pos_ = 0;
};

void write_value(Sink& s, const GgufValue& v) {
    switch (v.type) {
        case GgufValueType::U8:
            s.pod(uint8_t(std::get<uint64_t>(v.v)));
            break;
        case GgufValueType::U16:
            s.pod(uint16_t(std::get<uint64_t>(v.v)));
            break;
        case GgufValueType::U32:
            s.pod(uint32_t(std::get<uint64_t>(v.v)));
            break;
        case GgufValueType::U64:
            s.pod(std::get<uint64_t>(v.v));
            break;
        case GgufValueType::I8:
            s.pod(int8_t(std::get<int64_t>(v.v)));
            break;
        case GgufValueType::I16:
            s.pod(int16_t(std::get<int64_t>(v.v)));
            break;
        case GgufValueType::I32:
            s.pod(int32_t(std::get<int64_t>(v.v)));
            break;
        case GgufValueType::I64:
            s.pod(std::get<int64_t>(v.v));
            break;
        case GgufValueType::F32:
            s.pod(float(std::get<double>(v.v)));
            break;
        case GgufValueType::F64:
            s.pod(std::get<double>(v.v));
            break;
        case GgufValueType::BOOL:
            s.pod(uint8_t(std::get<bool>(v.v) ? 1 : 0));
            break;
        case GgufValueType::STRING:
            s.str(std::get<std::string>(v.v));
            break;
        case GgufValueType::ARRAY: {
            const GgufArray& arr = *std::get<std::shared_ptr<GgufArray>>(v.v);
            s.pod(uint32_t(arr.elem_type));
            s.pod(uint64_t(arr.items.size()));
            for (const GgufValue& item : arr.items) write_value(s, item);
            break;
        }
    }
}

uint64_t align_up(uint64_t n, uint64_t a) {
    return (n + a - 1) / a * a;
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
    if (!value_ok(value, 0))
        writer_error("value of '" + key + "' does not match its declared type " +
                     gguf_value_type_name(value.type));
    for (auto& [k, v] : kv_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    kv_.emplace_back(key, std::move(value));
}

void GgufWriter::set_str(const std::string& key, std::string value) {
    set(key, {GgufValueType::STRING, std::move(value)});
}
void GgufWriter::set_bool(const std::string& key, bool value) {
    set(key, {GgufValueType::BOOL, value});
}
void GgufWriter::set_u32(const std::string& key, uint32_t value) {
    set(key, {GgufValueType::U32, uint64_t(value)});
}
void GgufWriter::set_i32(const std::string& key, int32_t value) {
    set(key, {GgufValueType::I32, int64_t(value)});
}
void GgufWriter::set_u64(const std::string& key, uint64_t value) {
    set(key, {GgufValueType::U64, value});
}
void GgufWriter::set_f32(const std::string& key, float value) {
    set(key, {GgufValueType::F32, double(value)});
}

void GgufWriter::set_str_array(const std::string& key, const std::vector<std::string>& values) {
    std::vector<GgufValue> items;
    items.reserve(values.size());
    for (const std::string& s : values) items.push_back({GgufValueType::STRING, s});
    set(key, make_array(GgufValueType::STRING, std::move(items)));
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& values) {
    std::vector<GgufValue> items;
    items.reserve(values.size());
    for (int32_t x : values) items.push_back({GgufValueType::I32, int64_t(x)});
    set(key, make_array(GgufValueType::I32, std::move(items)));
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& values) {
    std::vector<GgufValue> items;
    items.reserve(values.size());
    for (float x : values) items.push_back({GgufValueType::F32, double(x)});
    set(key, make_array(GgufValueType::F32, std::move(items)));
}

GgufValue GgufWriter::make_array(GgufValueType elem_type, std::vector<GgufValue> items) {
    auto arr = std::make_shared<GgufArray>();
    arr->elem_type = elem_type;
    arr->items = std::move(items);
    return {GgufValueType::ARRAY, std::move(arr)};
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                            const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    add_tensor(name, type, std::move(dims), std::vector<uint8_t>(p, p + bytes));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                            std::vector<uint8_t> data) {
    const std::string what = "tensor '" + name + "'";
    for (const Tensor& t : tensors_)
        if (t.name == name) writer_error("duplicate " + what);
    const GgmlTypeLayout layout = ggml_type_layout(type);
    if (!layout.name) writer_error(what + " has unknown type " + ggml_type_name(type));
    if (dims.empty() || dims.size() > 4) writer_error(what + " needs 1 to 4 dimensions");
    uint64_t n = 1;
    for (int64_t d : dims) {
        if (d < 0 || (d != 0 && n > uint64_t(std::numeric_limits<int64_t>::max()) / uint64_t(d)))
            writer_error(what + " has a negative or oversized dimension");
        n *= uint64_t(d);
    }
    if (dims[0] % layout.block_size != 0)
        writer_error(what + ": first dimension is not a multiple of the block size of " + layout.name);
    const uint64_t expected = n / uint64_t(layout.block_size) * layout.type_size;
    if (data.size() != expected)
        writer_error(what + " has " + std::to_string(data.size()) + " bytes of data, expected " +
                     std::to_string(expected));
    tensors_.push_back({name, type, std::move(dims), std::move(data)});
}

uint64_t GgufWriter::alignment() const {
    for (const auto& [k, v] : kv_) {
        if (k != "general.alignment") continue;
        const auto* a = std::get_if<uint64_t>(&v.v);
        if (!a || *a == 0 || (*a & (*a - 1)) != 0) writer_error("general.alignment must be a power of two");
        return *a;
    }
    return kDefaultAlignment;
}

void GgufWriter::write(const std::string& path) const {
    const uint64_t align = alignment();
    Sink s(path);
    s.bytes("GGUF", 4);
    s.pod(kVersion);
    s.pod(uint64_t(tensors_.size()));
    s.pod(uint64_t(kv_.size()));
    for (const auto& [key, value] : kv_) {
        s.str(key);
        s.pod(uint32_t(value.type));
        write_value(s, value);
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
        s.str(t.name);
        s.pod(uint32_t(t.dims.size()));
        for (int64_t d : t.dims) s.pod(uint64_t(d));
        s.pod(uint32_t(t.type));
        s.pod(offset);
        offset = align_up(offset + t.data.size(), align);
    }
    s.pad(align);
    for (const Tensor& t : tensors_) {
        s.bytes(t.data.data(), t.data.size());
        s.pad(align);
    }
    s.finish();
}

}  // namespace minfer
