// The schema corpus (tests/grammar/schemas/*.json): seeded random walks through each schema's grammar
// must end in text that parses as JSON. The samples are written to MINFER_GRAMMAR_SAMPLES
// (build/grammar-samples.json) as [{schema_file, samples: [...]}], which tests/grammar/validate_samples.mjs
// validates against the schemas with ajv (ctest grammar_ajv), independently of this code.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "grammar_test_util.h"

namespace minfer::grammar::test {
namespace {

constexpr int kWalksSmall = 24;  // per schema, on the small vocabulary
constexpr int kWalksQwen = 4;    // per schema, on the Qwen vocabulary when present

std::vector<std::filesystem::path> corpus() {
    std::vector<std::filesystem::path> files;
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(MINFER_SOURCE_DIR) + "/tests/grammar/schemas"))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    return files;
}

Json read_json(const std::filesystem::path& p) {
    std::ifstream in(p);
    return Json::parse(in);
}

void walk_schema(const std::filesystem::path& file, const std::shared_ptr<const Vocab>& vocab, int walks,
                 Json& samples) {
    const auto g = compile_json_schema(read_json(file));
    for (int w = 0; w < walks; ++w) {
        const Walk walk = random_walk(g, vocab, static_cast<uint32_t>(w * 7919 + vocab->size()), 150, 4000,
                                      [](const Matcher&, const std::vector<uint64_t>&) {});
        ASSERT_TRUE(walk.complete) << file.filename() << " walk " << w << " did not end: " << walk.text;
        EXPECT_TRUE(Json::accept(walk.text)) << file.filename() << ": " << walk.text;
        samples.push_back(walk.text);
    }
}

TEST(GrammarCorpus, WalksParseAndAreWrittenForAjv) {
    const std::vector<std::filesystem::path> files = corpus();
    ASSERT_GE(files.size(), 50u);
    const auto qwen = qwen_vocab();
    Json out = Json::array();
    for (const auto& file : files) {
        Json samples = Json::array();
        walk_schema(file, small_vocab(), kWalksSmall, samples);
        if (qwen) walk_schema(file, qwen, kWalksQwen, samples);
        out.push_back({{"schema_file", file.filename().string()}, {"samples", samples}});
    }
    // Written whole and then renamed, so the ajv check never reads a half-written file.
    const std::string path = MINFER_GRAMMAR_SAMPLES;
    {
        std::ofstream f(path + ".tmp");
        f << out.dump(1, ' ', false, Json::error_handler_t::strict) << "\n";
        ASSERT_TRUE(f.good()) << "cannot write " << path;
    }
    std::filesystem::rename(path + ".tmp", path);
    if (!qwen)
        GTEST_SKIP()
            << "Qwen vocabulary absent: samples from the small vocabulary only (set MINFER_TEST_DATA)";
}

}  // namespace
}  // namespace minfer::grammar::test
