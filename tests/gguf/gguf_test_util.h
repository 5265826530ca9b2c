// Helpers shared by the GGUF tests: a scratch directory, whole-file byte I/O, byte patching, and an
// assertion that opening a file fails with a given message.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "util/error.h"

namespace minfer::test {

// A fresh directory under the system temp dir, removed (with its contents) when the object dies.
class TempDir {
  public:
    TempDir() {
        static std::atomic<int> counter{0};
        dir_ = std::filesystem::temp_directory_path() /
               ("minfer-gguf-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
        std::filesystem::create_directories(dir_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    std::string file(const std::string& name) const { return (dir_ / name).string(); }
    std::string dir() const { return dir_.string(); }

  private:
    std::filesystem::path dir_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, size_t n = SIZE_MAX) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(std::min(n, bytes.size())));
}

// Position of the only occurrence of `needle` in `bytes`; npos when it is absent or not unique.
inline size_t find_unique(const std::vector<uint8_t>& bytes, std::string_view needle) {
    const std::string_view hay(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const size_t first = hay.find(needle);
    if (first == std::string_view::npos || hay.find(needle, first + 1) != std::string_view::npos)
        return std::string_view::npos;
    return first;
}

template <class T>
void put(std::vector<uint8_t>& bytes, size_t pos, T value) {
    ASSERT_LE(pos + sizeof(T), bytes.size());
    std::memcpy(bytes.data() + pos, &value, sizeof(T));
}

template <class T>
T get(const std::vector<uint8_t>& bytes, size_t pos) {
    T value{};
    if (pos + sizeof(T) <= bytes.size()) std::memcpy(&value, bytes.data() + pos, sizeof(T));
    return value;
}

// Succeeds when GgufFile::open(path) throws minfer::Error whose message starts with the path and
// contains `phrase`.
inline testing::AssertionResult open_fails_with(const std::string& path, const std::string& phrase) {
    try {
        GgufFile::open(path);
    } catch (const Error& e) {
        const std::string msg = e.what();
        if (msg.rfind(path + ": ", 0) != 0)
            return testing::AssertionFailure() << "message does not start with the path: " << msg;
        if (msg.find(phrase) == std::string::npos)
            return testing::AssertionFailure() << "message lacks '" << phrase << "': " << msg;
        return testing::AssertionSuccess();
    }
    return testing::AssertionFailure() << path << " opened without error (expected '" << phrase << "')";
}

}  // namespace minfer::test
