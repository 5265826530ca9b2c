// Structured output through the server: every schema of the grammar corpus (tests/grammar/schemas) asked
// of the embedded model and of a mini with response_format json_schema, sampled, all at once (one
// batch). An answer that ends by itself must parse, and is written to build/structured-samples-MODEL.json,
// which tests/grammar/validate_samples.mjs validates with ajv (ctest structured_ajv_MODEL); one cut at
// max_tokens (a mini model may write a free string on and on) must be a prefix the schema's grammar
// accepts, and at least three in four must end by themselves (the minis' free strings often run on).
// Constrained sequences keep batch invariance: one alone and the same one among others are memcmp-equal.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "server_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;

std::vector<std::filesystem::path> corpus() {
    std::vector<std::filesystem::path> files;
    for (const auto& e :
         std::filesystem::directory_iterator(std::string(MINFER_SOURCE_DIR) + "/tests/grammar/schemas"))
        if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    return files;
}

ordered read_schema(const std::filesystem::path& p) {
    std::ifstream in(p);
    return ordered::parse(in);
}

std::string chat_body(const ordered& schema, uint64_t seed, const std::string& extra = "") {
    ordered body = {{"messages", {{{"role", "user"}, {"content", "Write a JSON value for this schema."}}}},
                    {"max_tokens", 768},
                    {"temperature", 0.7},
                    {"seed", seed},
                    {"response_format",
                     {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", schema}}}}}};
    if (!extra.empty()) body.update(ordered::parse(extra));
    return body.dump();
}

// Whether `text` is the start of a value of `schema` (a vocabulary of single bytes reads it).
bool grammar_prefix(const ordered& schema, const std::string& text) {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
    grammar::Matcher m(grammar::compile_json_schema(schema),
                       std::make_shared<grammar::Vocab>(bytes, std::vector<int32_t>{}));
    return m.accept_bytes(text);
}

// Asks every corpus schema at once; checks each answer and writes the samples file.
void run_corpus(const std::string& model, const std::string& label, const std::string& extra = "") {
    TestServer s({}, test_engine_params(32), model);
    const std::vector<std::filesystem::path> files = corpus();
    ASSERT_GE(files.size(), 50u);
    std::vector<std::future<httplib::Result>> answers;
    for (size_t i = 0; i < files.size(); ++i)
        answers.push_back(std::async(std::launch::async, [&, i] {
            // Half the requests wait for a slot behind answers of up to 768 tokens (minutes under ASan).
            auto c = s.client();
            c->set_read_timeout(600, 0);
            return c->Post("/v1/chat/completions", chat_body(read_schema(files[i]), 100 + i, extra),
                           "application/json");
        }));
    json out = json::array();
    size_t ended = 0;
    for (size_t i = 0; i < files.size(); ++i) {
        const httplib::Result r = answers[i].get();
        const std::string name = files[i].filename().string();
        ASSERT_TRUE(r) << name;
        ASSERT_EQ(r->status, 200) << name << ": " << r->body;
        const json choice = json::parse(r->body)["choices"][0];
        const std::string text = choice["message"]["content"].get<std::string>();
        if (choice["finish_reason"] == "length") {
            EXPECT_TRUE(grammar_prefix(read_schema(files[i]), text))
                << name << ": cut, and outside its grammar: " << text;
            continue;
        }
        EXPECT_EQ(choice["finish_reason"], "stop") << name;
        EXPECT_FALSE(json::parse(text, nullptr, false).is_discarded()) << name << ": not JSON: " << text;
        out.push_back({{"schema_file", name}, {"samples", {text}}});
        ++ended;
    }
    EXPECT_GE(ended * 4, files.size() * 3)
        << ended << " of " << files.size() << " answers ended by themselves";
    std::ofstream(std::string(MINFER_BINARY_DIR) + "/structured-samples-" + label + ".json") << out.dump(1);
}

TEST(StructuredOutput, EverySchemaOfTheCorpusOnTheEmbeddedModel) {
    run_corpus(default_model(), "embedded");
}

TEST(StructuredOutput, EverySchemaOfTheCorpusOnQwen3MiniWithoutThinking) {
    MINFER_REQUIRE_FILE(model_path("qwen3-mini-Q8_0.gguf"));
    run_corpus(model_path("qwen3-mini-Q8_0.gguf"), "qwen3-mini", R"({"enable_thinking": false})");
}

const char* kPerson = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
  "age": {"type": "integer", "minimum": 0, "maximum": 120}, "tags": {"type": "array",
  "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}, "required": ["name", "age", "tags"],
  "additionalProperties": false})";

TEST(StructuredOutput, JsonObjectGivesAnObjectInSchemaOrder) {
    TestServer s;
    auto c = s.client();
    int ended = 0;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
        const auto r = c->Post("/v1/chat/completions",
                               chat_body(true, seed, R"({"response_format": {"type": "json_object"}})"),
                               "application/json");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json choice = body_json(r)["choices"][0];
        const std::string text = choice["message"]["content"];
        if (choice["finish_reason"] == "length") {
            EXPECT_TRUE(grammar_prefix({{"type", "object"}}, text)) << text;
            continue;
        }
        EXPECT_TRUE(json::parse(text, nullptr, false).is_object()) << text;
        ++ended;
    }
    EXPECT_GT(ended, 0) << "no answer ended by itself";
    const auto p = c->Post("/v1/chat/completions", chat_body(ordered::parse(kPerson), 7), "application/json");
    ASSERT_EQ(p->status, 200) << p->body;
    const std::string person = body_json(p)["choices"][0]["message"]["content"];
    EXPECT_LT(person.find("\"name\""), person.find("\"age\""))
        << "properties in the schema's order: " << person;
    EXPECT_LT(person.find("\"age\""), person.find("\"tags\"")) << person;
}

TEST(StructuredOutput, AConstrainedSequenceIsTheSameAloneAndInABatch) {
    TestServer s;
    const std::string mine = chat_body(ordered::parse(kPerson), 42);
    const auto alone = s.client()->Post("/v1/chat/completions", mine, "application/json");
    ASSERT_EQ(alone->status, 200);
    std::vector<std::future<httplib::Result>> others;
    for (int i = 0; i < 7; ++i)
        others.push_back(std::async(std::launch::async, [&, i] {
            const std::string b = i % 2 ? chat_body(read_schema(corpus()[size_t(i)]), uint64_t(i))
                                        : R"({"messages": [{"role": "user", "content": "tell a story"}],
                                             "max_tokens": 64, "seed": )" +
                                              std::to_string(i) + "}";
            return s.client()->Post("/v1/chat/completions", b, "application/json");
        }));
    const auto batched = s.client()->Post("/v1/chat/completions", mine, "application/json");
    for (auto& o : others) EXPECT_EQ(o.get()->status, 200);
    ASSERT_EQ(batched->status, 200);
    EXPECT_EQ(body_json(alone)["choices"][0]["message"]["content"],
              body_json(batched)["choices"][0]["message"]["content"]);
}

TEST(StructuredOutput, SchemasItCannotCompileAre400NamingTheKeyword) {
    TestServer s;
    auto c = s.client();
    const auto r =
        c->Post("/v1/chat/completions",
                chat_body(ordered::parse(R"({"type": "object", "patternProperties": {"^a": {}}})"), 1),
                "application/json");
    ASSERT_EQ(r->status, 400);
    const json e = body_json(r)["error"];
    EXPECT_NE(e["message"].get<std::string>().find("response_format.json_schema.schema"), std::string::npos)
        << e;
    EXPECT_NE(e["message"].get<std::string>().find("patternProperties"), std::string::npos) << e;
    EXPECT_EQ(e["code"], "invalid_schema");
    for (const char* bad : {R"({"type": "xml"})", R"("json")", R"({"type": "json_schema"})",
                            R"({"type": "json_schema", "json_schema": {"schema": 3}})"}) {
        const auto b =
            c->Post("/v1/chat/completions",
                    std::string(R"({"messages": [{"role": "user", "content": "hi"}], "response_format": )") +
                        bad + "}",
                    "application/json");
        EXPECT_EQ(b->status, 400) << bad;
        EXPECT_NE(body_json(b)["error"]["message"].get<std::string>().find("response_format"),
                  std::string::npos)
            << b->body;
    }
}

}  // namespace
}  // namespace minfer::test
