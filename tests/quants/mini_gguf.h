// Test-only GGUF v3 reader, just enough to fetch tensors by name: header, metadata skipped (except
// general.alignment), tensor infos, aligned data section. Keeps the quant tests independent of the real
// reader in src/gguf. Throws std::runtime_error on anything it does not understand.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace minfer::test {

class MiniGguf {
  public:
    struct Tensor {
        uint32_t type = 0;
        std::vector<int64_t> dims;
        uint64_t offset = 0;  // relative to the data section
    };

    explicit MiniGguf(const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        if (!f) throw std::runtime_error("cannot open " + path);
        bytes_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        parse();
    }

    const Tensor* find(const std::string& name) const {
        const auto it = tensors_.find(name);
        return it == tensors_.end() ? nullptr : &it->second;
    }
    // Start of a tensor's data; `n_bytes` is checked against the end of the file.
    const uint8_t* data(const Tensor& t, uint64_t n_bytes) const {
        if (data_start_ + t.offset + n_bytes > bytes_.size()) throw std::runtime_error("tensor past end");
        return reinterpret_cast<const uint8_t*>(bytes_.data()) + data_start_ + t.offset;
    }

  private:
    template <class T>
    T get() {
        if (pos_ + sizeof(T) > bytes_.size()) throw std::runtime_error("truncated gguf");
        T v;
        std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return v;
    }
    std::string get_string() {
        const uint64_t n = get<uint64_t>();
        if (n > bytes_.size() - pos_) throw std::runtime_error("truncated gguf string");
        std::string s(bytes_.data() + pos_, size_t(n));
        pos_ += size_t(n);
        return s;
    }
    void skip_value(uint32_t type) {
        static const int kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};  // by GGUF value type
        if (type == 8) {
            get_string();
        } else if (type == 9) {
            const uint32_t elem = get<uint32_t>();
            const uint64_t count = get<uint64_t>();
            for (uint64_t i = 0; i < count; ++i) skip_value(elem);
        } else if (type < 13) {
            pos_ += size_t(kSize[type]);
        } else {
            throw std::runtime_error("bad gguf value type");
        }
    }
    void parse() {
        if (bytes_.size() < 24 || std::memcmp(bytes_.data(), "GGUF", 4) != 0)
            throw std::runtime_error("not gguf");
        pos_ = 4;
        if (get<uint32_t>() != 3) throw std::runtime_error("not gguf v3");
        const uint64_t n_tensors = get<uint64_t>();
        const uint64_t n_kv = get<uint64_t>();
        uint64_t alignment = 32;
        for (uint64_t i = 0; i < n_kv; ++i) {
            const std::string key = get_string();
            const uint32_t type = get<uint32_t>();
            if (key == "general.alignment" && type == 4) {
                alignment = get<uint32_t>();
            } else {
                skip_value(type);
            }
        }
        for (uint64_t i = 0; i < n_tensors; ++i) {
            const std::string name = get_string();
            Tensor t;
            t.dims.resize(get<uint32_t>());
            for (int64_t& d : t.dims) d = int64_t(get<uint64_t>());
            t.type = get<uint32_t>();
            t.offset = get<uint64_t>();
            tensors_[name] = t;
        }
        data_start_ = (pos_ + alignment - 1) / alignment * alignment;
    }

    std::vector<char> bytes_;
    size_t pos_ = 0;
    size_t data_start_ = 0;
    std::map<std::string, Tensor> tensors_;
};

}  // namespace minfer::test
