// Multi-turn tool conversations rendered with real chat templates (Qwen3, Qwen2.5-Instruct,
// Llama-3.1/3.2-Instruct) must match, byte for byte, what Python jinja2 configured as HF transformers
// produced for them: tests/template/data/tool-renders.json, written by scripts/make-template-refs.py.
#include <cctype>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "template_test_util.h"

namespace minfer::test {
namespace {

using nlohmann::ordered_json;

std::string data_file(const std::string& name) {
    return std::string(MINFER_SOURCE_DIR) + "/tests/template/data/" + name;
}

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

const ordered_json& cases() {
    static const ordered_json all = ordered_json::parse(read_text(data_file("tool-renders.json")));
    return all;
}

bool utf8_continuation(const std::string& s, size_t i) {
    return i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80;
}

// Printable excerpt of s around `at` (whole UTF-8 characters), control bytes escaped.
std::string excerpt(const std::string& s, size_t at) {
    size_t from = at < 60 ? 0 : at - 60;
    size_t to = std::min(s.size(), at + 60);
    while (from > 0 && utf8_continuation(s, from)) --from;
    while (utf8_continuation(s, to)) ++to;
    std::string out;
    for (char c : s.substr(from, to - from)) {
        if (c == '\n')
            out += "\\n";
        else if (c == '\t')
            out += "\\t";
        else
            out += c;
    }
    return out;
}

// Empty when equal, else the first differing byte offset with both sides around it.
std::string difference(const std::string& got, const std::string& want) {
    if (got == want) return "";
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    return "first difference at byte " + std::to_string(i) + " (got " + std::to_string(got.size()) +
           " bytes, expected " + std::to_string(want.size()) + ")\n  got:      ..." + excerpt(got, i) +
           "\n  expected: ..." + excerpt(want, i);
}

std::string local_strftime(const std::string& fmt) {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    return std::string(buf, std::strftime(buf, sizeof buf, fmt.c_str(), &tm));
}

// The reference ran strftime_now() on a fixed clock; our engine reads the real one.
std::string with_real_clock(std::string expected, const ordered_json& c) {
    if (!c.contains("strftime_now")) return expected;
    for (const auto& call : c.at("strftime_now")) {
        const std::string fixed = call.at(1).get<std::string>();
        const std::string now = local_strftime(call.at(0).get<std::string>());
        for (size_t at = expected.find(fixed); at != std::string::npos;
             at = expected.find(fixed, at + now.size()))
            expected.replace(at, fixed.size(), now);
    }
    return expected;
}

std::string render_case(const ordered_json& c) {
    ordered_json extra = c.at("variables");
    if (!c.at("tools").is_null()) extra["tools"] = c.at("tools");
    return render_chat_template(read_text(data_file(c.at("template").get<std::string>())), c.at("messages"),
                                c.at("add_generation_prompt").get<bool>(), extra);
}

class ToolRender : public ::testing::TestWithParam<size_t> {};

TEST_P(ToolRender, MatchesJinja2) {
    const ordered_json& c = cases().at(GetParam());
    SCOPED_TRACE(c.at("template").get<std::string>() + " / " + c.at("name").get<std::string>());
    if (c.at("expected").is_null()) {
        const std::string needle = c.at("error").get<std::string>();
        try {
            render_case(c);
            ADD_FAILURE() << "rendered, but jinja2 raised: " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        return;
    }
    std::string got;
    std::string want;
    for (int attempt = 0; attempt < 2; ++attempt) {  // a second try if the date changed mid-render
        want = with_real_clock(c.at("expected").get<std::string>(), c);
        got = render_case(c);
        if (want == with_real_clock(c.at("expected").get<std::string>(), c)) break;
    }
    EXPECT_EQ(got, want) << difference(got, want);
}

std::vector<size_t> case_indices() {
    std::vector<size_t> out;
    try {
        for (size_t i = 0; i < cases().size(); ++i) out.push_back(i);
    } catch (const std::exception&) {  // reported by ToolRenders.DataLoads
    }
    return out;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
    const ordered_json& c = cases().at(info.param);
    std::string name = c.at("template").get<std::string>();
    name = name.substr(0, name.find(".jinja")) + "_" + c.at("name").get<std::string>() + "_" +
           std::to_string(info.param);
    for (char& ch : name)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name;
}

INSTANTIATE_TEST_SUITE_P(template, ToolRender, ::testing::ValuesIn(case_indices()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ToolRender);

// The reference data is there, and covers every template with at least six conversations.
TEST(ToolRenders, DataLoads) {
    std::map<std::string, int> per_template;
    for (const auto& c : cases()) ++per_template[c.at("template").get<std::string>()];
    for (const char* t :
         {"qwen3.jinja", "qwen2.5-instruct.jinja", "llama3.1-instruct.jinja", "llama3.2-instruct.jinja"})
        EXPECT_GE(per_template[t], 6) << t;
}

// jinja2 prints any integer exactly; ours are int64, so one above INT64_MAX (nlohmann's uint64) fails
// loudly instead of printing wrapped around as a negative number.
TEST(ToolRenders, IntegerBeyondInt64FailsInsteadOfWrapping) {
    const auto messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}, {"role": "assistant",
        "content": "", "tool_calls": [{"type": "function", "function": {"name": "f",
        "arguments": {"id": 12345678901234567890}}}]}])");
    const std::string tmpl = read_text(data_file("qwen2.5-instruct.jinja"));
    try {
        const std::string out = render_chat_template(tmpl, messages, false, ordered_json::object());
        ADD_FAILURE() << "rendered: " << out;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("12345678901234567890"), std::string::npos) << e.what();
    }
    const auto fits = ordered_json::parse(R"({"id": 9223372036854775807})");
    EXPECT_EQ(render_chat_template("{{ id | tojson }}", ordered_json::array(), false, fits),
              "9223372036854775807");
}

}  // namespace
}  // namespace minfer::test
