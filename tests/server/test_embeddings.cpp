// POST /v1/embeddings on the embedded model: OpenAI's shapes, unit-length vectors, the same bits for the
// same input (twice, in a batch, as text or as its token ids, as floats or base64, beside a running
// generation), inputs longer than the micro-batch, --pooling, and a 400 naming the field for each
// malformed body.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "server_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;

constexpr size_t kWidth = 256;  // the embedded model's n_embd

class Embeddings : public ::testing::Test {
  protected:
    static void SetUpTestSuite() { server_ = new TestServer(); }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    static httplib::Result post(const json& body, const TestServer& s = *server_) {
        return s.client()->Post("/v1/embeddings", body.dump(), "application/json");
    }
    // The answer's vectors, checked for OpenAI's shape on the way.
    static std::vector<std::vector<float>> vectors(const json& body, const TestServer& s = *server_) {
        const httplib::Result r = post(body, s);
        EXPECT_TRUE(r);
        if (!r) return {};
        EXPECT_EQ(r->status, 200) << r->body;
        const json j = body_json(r);
        EXPECT_EQ(j["object"], "list");
        EXPECT_EQ(j["model"], "mini");
        std::vector<std::vector<float>> out;
        for (size_t i = 0; i < j["data"].size(); ++i) {
            const json& d = j["data"][i];
            EXPECT_EQ(d["object"], "embedding");
            EXPECT_EQ(d["index"], i);
            if (d["embedding"].is_string())
                out.push_back(from_base64(d["embedding"].get<std::string>()));
            else
                out.push_back(d["embedding"].get<std::vector<float>>());
        }
        return out;
    }
    static std::vector<float> from_base64(const std::string& s) {
        const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        std::vector<unsigned char> bytes;
        uint32_t acc = 0;
        int bits = 0;
        for (const char c : s) {
            if (c == '=') break;
            acc = acc << 6 | uint32_t(alphabet.find(c));
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                bytes.push_back(static_cast<unsigned char>(acc >> bits));
            }
        }
        EXPECT_EQ(bytes.size() % sizeof(float), 0u);
        std::vector<float> v(bytes.size() / sizeof(float));
        std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
        return v;
    }
    static TestServer* server_;
};
TestServer* Embeddings::server_ = nullptr;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double norm(const std::vector<float>& v) {
    double s = 0;
    for (const float x : v) s += double(x) * double(x);
    return std::sqrt(s);
}

void expect_400(const httplib::Result& r, const std::string& field) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json j = body_json(r);
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("'" + field), std::string::npos) << r->body;
}

TEST_F(Embeddings, ShapeUsageAndUnitLength) {
    const httplib::Result r = post({{"input", "The quick brown fox"}, {"model", "anything"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = body_json(r);
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["embedding"].size(), kWidth);
    const auto tok = server_->client()->Post(
        "/tokenize", R"({"content":"The quick brown fox","add_special":true})", "application/json");
    ASSERT_TRUE(tok);
    const size_t n_tokens = body_json(tok)["tokens"].size();
    EXPECT_EQ(j["usage"]["prompt_tokens"], n_tokens);
    EXPECT_EQ(j["usage"]["total_tokens"], n_tokens);
    const std::vector<float> v = j["data"][0]["embedding"];
    EXPECT_NEAR(norm(v), 1.0, 1e-5);
}

TEST_F(Embeddings, SameInputSameBits) {
    const json body = {{"input", "Embeddings are deterministic"}};
    const auto a = vectors(body), b = vectors(body);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_TRUE(same_bits(a[0], b[0]));
}

TEST_F(Embeddings, BatchEqualsEachAlone) {
    const std::vector<std::string> texts = {"alpha", "a longer second input, with punctuation!", "alpha",
                                            "def f(x): return x * 2"};
    const auto batch = vectors({{"input", texts}});
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
        const auto alone = vectors({{"input", texts[i]}});
        ASSERT_EQ(alone.size(), 1u);
        EXPECT_TRUE(same_bits(batch[i], alone[0])) << "input " << i;
        EXPECT_NEAR(norm(batch[i]), 1.0, 1e-5);
    }
    EXPECT_TRUE(same_bits(batch[0], batch[2]));
    EXPECT_FALSE(same_bits(batch[0], batch[1]));
}

TEST_F(Embeddings, TokenIdsEqualTheirText) {
    const auto tok = server_->client()->Post("/tokenize", R"({"content":"token ids in","add_special":true})",
                                             "application/json");
    ASSERT_TRUE(tok);
    const std::vector<int32_t> ids = body_json(tok)["tokens"];
    const auto text = vectors({{"input", "token ids in"}});
    const auto one = vectors({{"input", ids}});
    const auto many = vectors({{"input", json::array({ids, ids})}});
    ASSERT_EQ(one.size(), 1u);
    ASSERT_EQ(many.size(), 2u);
    EXPECT_TRUE(same_bits(one[0], text[0]));
    EXPECT_TRUE(same_bits(many[0], text[0]));
    EXPECT_TRUE(same_bits(many[1], text[0]));
}

TEST_F(Embeddings, Base64IsTheSameFloats) {
    const json texts = {"first", "second input"};
    const auto floats = vectors({{"input", texts}, {"encoding_format", "float"}});
    const auto b64 = vectors({{"input", texts}, {"encoding_format", "base64"}});
    ASSERT_EQ(b64.size(), 2u);
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(same_bits(floats[i], b64[i])) << "input " << i;
    EXPECT_EQ(b64[0].size(), kWidth);
}

// Longer than the micro-batch (512): embedded in chunks; beside a running generation, the same bits. The
// generation waits for the embeddings between its steps: its client allows for a slow (sanitized) build.
TEST_F(Embeddings, LongInputsAndBesideGeneration) {
    std::vector<int32_t> ids(700);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 17) % 8000);
    const auto alone = vectors({{"input", ids}});
    ASSERT_EQ(alone.size(), 1u);
    EXPECT_NEAR(norm(alone[0]), 1.0, 1e-5);
    auto gen = std::async(std::launch::async, [] {
        auto c = server_->client();
        c->set_read_timeout(600, 0);
        return c->Post(
            "/v1/completions",
            json({{"prompt", "Once upon a time"}, {"max_tokens", 120}, {"ignore_eos", true}}).dump(),
            "application/json");
    });
    for (int i = 0; i < 3; ++i) {
        const auto beside = vectors({{"input", ids}});
        ASSERT_EQ(beside.size(), 1u);
        EXPECT_TRUE(same_bits(beside[0], alone[0])) << "round " << i;
    }
    const httplib::Result g = gen.get();
    ASSERT_TRUE(g);
    EXPECT_EQ(g->status, 200) << g->body;
}

// --pooling: with cls the vector is the first row's, which causal attention makes the first token's
// alone; with mean (the default here: the file has no pooling_type) it is not.
TEST_F(Embeddings, PoolingFlag) {
    server::ServerOptions o;
    o.pooling = Pooling::Cls;
    const TestServer cls(o, test_engine_params(4));
    const auto first = vectors({{"input", json::array({json::array({11, 12, 13}), json::array({11})})}}, cls);
    ASSERT_EQ(first.size(), 2u);
    EXPECT_TRUE(same_bits(first[0], first[1]));
    const auto mean = vectors({{"input", json::array({json::array({11, 12, 13}), json::array({11})})}});
    ASSERT_EQ(mean.size(), 2u);
    EXPECT_FALSE(same_bits(mean[0], mean[1]));
    EXPECT_TRUE(same_bits(mean[1], first[1])) << "one row: every pooling gives it";
}

TEST_F(Embeddings, BadRequestsNameTheField) {
    expect_400(post(json::object()), "input");
    expect_400(post({{"input", 42}}), "input");
    expect_400(post({{"input", ""}}), "input");
    expect_400(post({{"input", json::array()}}), "input");
    expect_400(post({{"input", json::array({"ok", ""})}}), "input[1]");
    expect_400(post({{"input", json::array({"ok", 3})}}), "input[1]");
    expect_400(post({{"input", json::array({1, -1})}}), "input");
    expect_400(post({{"input", json::array({1, 2.5})}}), "input");
    expect_400(post({{"input", json::array({json::array({1}), json::array({1, 999999})})}}), "input[1]");
    expect_400(post({{"input", json::array({json::array()})}}), "input[0]");
    expect_400(post({{"input", std::vector<int32_t>(4097, 5)}}), "input");  // the context holds 4096
    expect_400(post({{"input", std::vector<std::string>(2049, "x")}}), "input");
    expect_400(post({{"input", "x"}, {"model", 5}}), "model");
    expect_400(post({{"input", "x"}, {"encoding_format", "hex"}}), "encoding_format");
    expect_400(post({{"input", "x"}, {"dimensions", 64}}), "dimensions");
    expect_400(post({{"input", "x"}, {"dimensions", "256"}}), "dimensions");
    const auto malformed = server_->client()->Post("/v1/embeddings", "{\"input\":", "application/json");
    ASSERT_TRUE(malformed);
    EXPECT_EQ(malformed->status, 400);
    EXPECT_EQ(vectors({{"input", "x"}, {"dimensions", 256}}).size(), 1u) << "the model's width is accepted";
    EXPECT_EQ(vectors({{"input", "still answering"}}).size(), 1u);
}

TEST_F(Embeddings, KeyIsRequired) {
    const auto r = server_->client(false)->Post("/v1/embeddings", R"({"input":"x"})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
}

}  // namespace
}  // namespace minfer::test
