// Small GGUF v3 writer: metadata in insertion order, then the tensor table, then tensor data with every
// tensor aligned to general.alignment (32 unless set). Used by tests to build (and then corrupt) files,
// and by the benchmark model synthesizer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/ggml_type.h"
#include "gguf/gguf.h"

namespace minfer {

class GgufWriter {
  public:
    // Sets `key`, replacing an earlier value in place. `value.type` decides the on-disk encoding; the
    // variant must hold the matching alternative (uint64 for U*, int64 for I*, double for F*, ...) and
    // integers must fit the declared width, else Error.
    void set(const std::string& key, GgufValue value);
    void set_str(const std::string& key, std::string value);
    void set_bool(const std::string& key, bool value);
    void set_u32(const std::string& key, uint32_t value);
    void set_i32(const std::string& key, int32_t value);
    void set_u64(const std::string& key, uint64_t value);
    void set_f32(const std::string& key, float value);
    void set_str_array(const std::string& key, const std::vector<std::string>& values);
    void set_i32_array(const std::string& key, const std::vector<int32_t>& values);
    void set_f32_array(const std::string& key, const std::vector<float>& values);

    // Builds an ARRAY value (items must all be of `elem_type`; checked by set()).
    static GgufValue make_array(GgufValueType elem_type, std::vector<GgufValue> items);

    // Adds a tensor; `bytes` must be exactly what `type` and `dims` (ne[0] first) require. The data is
    // copied.
    void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims, const void* data,
                    size_t bytes);
    // Same, taking over the buffer instead of copying it.
    void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                    std::vector<uint8_t> data);

    // Writes the file; throws Error("<path>: ...") when it cannot be created or written.
    void write(const std::string& path) const;

  private:
    struct Tensor {
        std::string name;
        GgmlType type;
        std::vector<int64_t> dims;
        std::vector<uint8_t> data;
    };
    uint64_t alignment() const;

    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::vector<Tensor> tensors_;
};

}  // namespace minfer
