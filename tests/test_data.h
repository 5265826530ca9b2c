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
// The minis of the newer architectures live in the repository, a folder each with their float64
// references (tests/data/DIR/README.md says how scripts/make-arch-mini.py made them).
inline std::string repo_data_path(const std::string& dir, const std::string& file) {
    return std::string(MINFER_SOURCE_DIR) + "/tests/data/" + dir + "/" + file;
}

}  // namespace minfer::test

#define MINFER_REQUIRE_FILE(path)                                                           \
    do {                                                                                    \
        if (!std::filesystem::exists(path))                                                 \
            GTEST_SKIP() << "test data not found: " << (path) << " (set MINFER_TEST_DATA)"; \
    } while (0)
