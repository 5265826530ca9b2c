// Where the minfer binary finds its default model when -m is absent: a binary installed as
// <prefix>/bin/minfer reads <prefix>/share/minfer/qwen2-mini-Q8_0.gguf (what cmake --install puts there)
// before the source tree it was built from, and MINFER_DEFAULT_MODEL overrides both. The copies live in a
// temporary prefix; `info --json` reports the path it opened.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"
#include "gguf/gguf_test_util.h"

namespace minfer::test {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceModel = fs::path(MINFER_SOURCE_DIR) / "models" / "qwen2-mini-Q8_0.gguf";

// A prefix holding a copy of the binary in bin/ and, when `with_model`, the model in share/minfer/.
struct Prefix {
    TempDir dir;
    fs::path bin = fs::path(dir.file("bin")) / "minfer";
    fs::path model = fs::path(dir.file("share")) / "minfer" / "qwen2-mini-Q8_0.gguf";
    explicit Prefix(bool with_model) {
        fs::create_directories(bin.parent_path());
        fs::copy_file(MINFER_BINARY, bin);
        if (!with_model) return;
        fs::create_directories(model.parent_path());
        fs::copy_file(kSourceModel, model);
    }
};

std::string opened_path(const CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r;
    const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_object() ? j.value("path", "") : "";
}

TEST(DefaultModelLookup, InstalledBinaryReadsTheInstalledModel) {
    const Prefix p(true);
    EXPECT_EQ(opened_path(run_process({p.bin.string(), "info", "--json"}, std::chrono::seconds(60))),
              p.model.string());
}

TEST(DefaultModelLookup, WithoutAnInstalledModelTheSourceTreeIsRead) {
    const Prefix p(false);
    EXPECT_EQ(opened_path(run_process({p.bin.string(), "info", "--json"}, std::chrono::seconds(60))),
              kSourceModel.string());
}

TEST(DefaultModelLookup, EnvironmentOverridesBoth) {
    const Prefix p(true);
    TempDir other;
    const std::string copy = other.file("elsewhere.gguf");
    fs::copy_file(kSourceModel, copy);
    setenv("MINFER_DEFAULT_MODEL", copy.c_str(), 1);
    const CliResult r = run_process({p.bin.string(), "info", "--json"}, std::chrono::seconds(60));
    unsetenv("MINFER_DEFAULT_MODEL");
    EXPECT_EQ(opened_path(r), copy);
}

}  // namespace
}  // namespace minfer::test
