// Constraint: a grammar's mask over a logits row, waiting for its marker when it has one.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "runtime/constraint.h"

namespace minfer {
namespace {

// Single bytes (ids 0..255), then a few longer tokens; eog is the last id.
struct Toy {
    std::vector<std::string> bytes;
    int32_t think_close, close_nl, eog;
    Toy() {
        for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
        think_close = add("</think>");
        close_nl = add("</think>\n{");
        eog = add("");
    }
    int32_t add(const std::string& s) {
        bytes.push_back(s);
        return int32_t(bytes.size() - 1);
    }
    std::shared_ptr<const grammar::Vocab> vocab() const {
        return std::make_shared<const grammar::Vocab>(bytes, std::vector<int32_t>{eog});
    }
};

std::vector<int32_t> allowed(Constraint& c, size_t n) {
    const std::vector<float> logits(n, 1.0f);
    const std::span<const float> row = c.mask(logits);
    std::vector<int32_t> out;
    for (size_t i = 0; i < row.size(); ++i)
        if (std::isfinite(row[i])) out.push_back(int32_t(i));
    return out;
}

TEST(Constraint, MasksEverythingOutsideTheGrammar) {
    const Toy t;
    Constraint c({grammar::compile_json_schema(nlohmann::json::parse(R"({"enum": ["yes", "no"]})")), ""},
                 t.vocab());
    ASSERT_TRUE(c.active());
    EXPECT_EQ(allowed(c, t.bytes.size()), (std::vector<int32_t>{'\n', ' ', '"'}));  // whitespace may lead
    c.accept('"', "\"");
    EXPECT_EQ(allowed(c, t.bytes.size()), (std::vector<int32_t>{'n', 'y'}));
    for (char ch : std::string("no\"")) c.accept(ch, std::string(1, ch));
    EXPECT_EQ(allowed(c, t.bytes.size()), (std::vector<int32_t>{t.eog}));
}

TEST(Constraint, WaitsForItsMarkerAndReadsWhatFollowsIt) {
    const Toy t;
    const GrammarSpec spec{grammar::any_json_object(), "</think>"};
    Constraint c(spec, t.vocab());
    for (char ch : std::string("<think> free { text </thi")) {
        EXPECT_FALSE(c.active());
        c.accept(ch, std::string(1, ch));
    }
    EXPECT_FALSE(c.active());
    c.accept('n', "n");
    c.accept('k', "k");
    c.accept('>', ">");
    ASSERT_TRUE(c.active()) << "a marker split over several tokens starts it";

    Constraint d(spec, t.vocab());
    d.accept(t.close_nl, t.bytes[size_t(t.close_nl)]);
    ASSERT_TRUE(d.active());
    const std::vector<int32_t> next = allowed(d, t.bytes.size());
    EXPECT_TRUE(std::find(next.begin(), next.end(), int32_t('"')) != next.end())
        << "the '{' after it was read";
    EXPECT_TRUE(std::find(next.begin(), next.end(), int32_t('{')) == next.end());
}

TEST(Constraint, AGrammarNoTokenCanSpellMasksEverything) {
    std::vector<std::string> bytes = {"a", "b", ""};
    Constraint c({grammar::compile_json_schema(nlohmann::json::parse(R"({"const": 1})")), ""},
                 std::make_shared<const grammar::Vocab>(bytes, std::vector<int32_t>{2}));
    const std::vector<float> logits(3, 0.0f);
    EXPECT_TRUE(c.mask(logits).empty());
}

}  // namespace
}  // namespace minfer
