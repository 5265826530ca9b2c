// GGUF v2/v3 reader: memory-maps the file, parses metadata and the tensor table, and bounds-checks
// every offset. Any malformed input throws minfer::Error naming the file and the problem.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "gguf/ggml_type.h"
#include "util/huge_pages.h"

namespace minfer {

// Metadata value types as numbered by the GGUF spec.
enum class GgufValueType : uint32_t {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
};

// "U32", "STRING", ...; "type#N" for numbers the spec does not define.
std::string gguf_value_type_name(GgufValueType t);

// Bytes of one fixed-width scalar value; 0 for STRING, ARRAY and numbers the spec lacks.
int gguf_scalar_width(GgufValueType t);

struct GgufArray;
// One metadata value. Integers of every width are widened to int64/uint64 and floats to double;
// `type` keeps the on-disk type so writers and dumps can round-trip it.
struct GgufValue {
    GgufValueType type = GgufValueType::U32;
    std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;
};
struct GgufArray {
    GgufValueType elem_type = GgufValueType::U32;
    std::vector<GgufValue> items;
};

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::F32;
    std::vector<int64_t> dims;      // ne[0] first (the contiguous, "in" dimension), as in GGUF
    uint64_t offset = 0;            // relative to the data section
    uint64_t n_bytes = 0;           // computed from dims and the type's block layout
    const uint8_t* data = nullptr;  // points into the mapping
    int64_t n_elements() const;
};

// Where the file's bytes live once opened.
enum class Residency : uint8_t {
    mapped,      // memory-mapped from the page cache (shared, nothing copied)
    huge_pages,  // read into anonymous memory advised for 2 MiB pages; mapped when the kernel has no
                 // transparent huge pages or the file is over half the machine's memory
};

// Progress of a long load: fn(done_bytes, total_bytes, user), called now and then.
struct LoadProgress {
    void (*fn)(size_t done, size_t total, void* user) = nullptr;
    void* user = nullptr;
};

class GgufFile {
  public:
    // Opens and validates `path`. Throws Error("<path>: <problem>") on any defect.
    static std::unique_ptr<GgufFile> open(const std::string& path, Residency where = Residency::mapped,
                                          LoadProgress progress = {});
    // A file of tensors alone, in memory (no metadata; size 0): `tensors`' data point into `owned` or into
    // the data of files that outlive this one. A tensor-parallel rank's slices of a model (models/shard.h).
    static std::unique_ptr<GgufFile> from_tensors(std::string name, std::vector<GgufTensor> tensors,
                                                  std::vector<std::vector<uint8_t>> owned);
    ~GgufFile();
    GgufFile(const GgufFile&) = delete;
    GgufFile& operator=(const GgufFile&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t file_size() const { return size_; }
    uint64_t alignment() const { return alignment_; }
    uint64_t data_offset() const { return data_offset_; }  // file offset of the (aligned) data section

    const std::map<std::string, GgufValue>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const;  // nullptr when absent
    bool has(std::string_view key) const { return find(key) != nullptr; }
    // Typed getters: throw Error naming the key when absent or of an incompatible type.
    std::string get_str(std::string_view key) const;
    int64_t get_int(std::string_view key) const;   // any integer type
    double get_float(std::string_view key) const;  // F32/F64 (integers accepted)
    bool get_bool(std::string_view key) const;
    std::vector<std::string> get_str_array(std::string_view key) const;
    std::vector<int64_t> get_int_array(std::string_view key) const;
    std::vector<float> get_float_array(std::string_view key) const;
    // Getters with defaults, for optional keys (still throw on a present key of the wrong type).
    std::string get_str_or(std::string_view key, const std::string& dflt) const;
    int64_t get_int_or(std::string_view key, int64_t dflt) const;
    double get_float_or(std::string_view key, double dflt) const;

    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* find_tensor(std::string_view name) const;  // nullptr when absent
    const GgufTensor& tensor(std::string_view name) const;       // throws Error when absent

    Residency residency() const;
    // Touches every page of the tensor data (page-in), reporting progress now and then.
    void prefetch(LoadProgress progress = {}) const;

  private:
    GgufFile() = default;
    void map(int fd);
    void read_into_huge_pages(int fd, LoadProgress progress);
    std::string path_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    uint64_t data_offset_ = 0;
    const uint8_t* base_ = nullptr;  // the file's first byte: in the mapping, or in copy_
    size_t size_ = 0;
    HugePages copy_;                           // Residency::huge_pages: the file's bytes
    std::vector<std::vector<uint8_t>> owned_;  // from_tensors: the bytes of the tensors it made
    std::map<std::string, GgufValue> kv_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
    friend class GgufParser;
};

}  // namespace minfer
