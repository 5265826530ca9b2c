// Where tests find the shared models and golden references: $MINFER_TEST_DATA (default ../shared,
// relative to the source tree). Tests that need a file call MINFER_REQUIRE_FILE and skip clearly when
// it is absent.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace minfer::test {

inline std::string data_dir() {
    if (const char* d = std::getenv("MINFER_TEST_DATA"); d && *d) return d;
    return std::string(MINFER_SOURCE_DIR) + "/../shared";
}
inline std::string model_path(const std::string& file) {
    return data_dir() + "/models/" + file;
}
inline std::string ref_path(const std::string& file) {
    return data_dir() + "/refs/" + file;
}
// The minis this repository holds, with their references (tests/data/minis/README.md says how they were
// made: scripts/make-arch-mini.py).
inline std::string repo_mini_path(const std::string& file) {
    return std::string(MINFER_SOURCE_DIR) + "/tests/data/minis/" + file;
}
// The quantized minis, which the build unpacks from tests/data/minis/qwen3moe256-mini-quants.tar.xz.
inline std::string unpacked_mini_path(const std::string& file) {
    return std::string(MINFER_BINARY_DIR) + "/minis/" + file;
}

}  // namespace minfer::test

#define MINFER_REQUIRE_FILE(path)                                                           \
    do {                                                                                    \
        if (!std::filesystem::exists(path))                                                 \
            GTEST_SKIP() << "test data not found: " << (path) << " (set MINFER_TEST_DATA)"; \
    } while (0)
