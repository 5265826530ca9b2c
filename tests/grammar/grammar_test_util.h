// Shared by the grammar tests: a small vocabulary that still spells every text (all 256 single bytes
// plus tokens that span grammar symbols or split UTF-8 characters), the real Qwen vocabulary when the
// test data is present, the brute-force reference mask, and seeded random walks.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "test_data.h"
#include "tokenizer/tokenizer.h"

namespace minfer::grammar::test {

using Json = nlohmann::ordered_json;

inline std::shared_ptr<const Vocab> small_vocab() {
    static const std::shared_ptr<const Vocab> v = [] {
        std::vector<std::string> t;
        for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
        for (const char* s : {"\"",
                              "\":\"",
                              "\"},{\"",
                              "\",",
                              "{\"",
                              "\"}",
                              "[{",
                              "}]",
                              "null",
                              "true",
                              "false",
                              "  ",
                              "\n",
                              "\n  ",
                              "\n    ",
                              "12",
                              "0.",
                              ".5",
                              "-1",
                              "e+",
                              "name",
                              "age",
                              "hello",
                              " world",
                              "\xC3\xA9",
                              "\xE4\xB8\xAD",
                              "\xE4\xB8",
                              "\xAD\xE6\x96\x87",
                              "\xF0\x9F\x98\x80",
                              "\xF0\x9F",
                              "\\n",
                              "\\u00",
                              "\\\"",
                              "abc\"",
                              "\": \"",
                              "\", \"",
                              "\"]",
                              "true}",
                              "},",
                              "\":",
                              "\": ",
                              ", ",
                              "\":[",
                              "2024-",
                              "-01",
                              "T12:",
                              "Z\"",
                              "@",
                              ".com",
                              "a\"b",
                              "\"a",
                              "id",
                              "\"id\":",
                              "type",
                              "\"type\": \"",
                              "[\"",
                              "\"]}",
                              "00",
                              "99",
                              "10",
                              "\\\\",
                              "\\ud83d",
                              "\\ude00"})
            t.emplace_back(s);
        t.emplace_back("");  // a control token without text
        t.emplace_back("");  // the eog token
        const int32_t eog = static_cast<int32_t>(t.size() - 1);
        return std::make_shared<const Vocab>(std::move(t), std::vector<int32_t>{eog});
    }();
    return v;
}

// The Qwen vocabulary from $MINFER_TEST_DATA, nullptr when absent. Special tokens have no text.
inline std::shared_ptr<const Vocab> qwen_vocab() {
    static const std::shared_ptr<const Vocab> v = []() -> std::shared_ptr<const Vocab> {
        const std::string path = minfer::test::model_path("qwen-vocab.gguf");
        if (!std::filesystem::exists(path)) return nullptr;
        auto tok = Tokenizer::from_gguf(*GgufFile::open(path));
        std::vector<std::string> bytes;
        std::vector<int32_t> eog;
        for (int32_t id = 0; id < tok->n_vocab(); ++id) {
            bytes.push_back(tok->is_special(id) ? std::string() : tok->token_to_bytes(id));
            if (tok->is_eog(id)) eog.push_back(id);
        }
        return std::make_shared<const Vocab>(std::move(bytes), std::move(eog));
    }();
    return v;
}

inline bool bit(const std::vector<uint64_t>& bits, int32_t id) {
    return (bits[id / 64] >> (id % 64)) & 1;
}

// The reference: every token tried on a copy of the matcher.
inline std::vector<uint64_t> brute_force_mask(const Matcher& m, const Vocab& v) {
    std::vector<uint64_t> bits(v.mask_words(), 0);
    for (int32_t id = 0; id < v.size(); ++id) {
        bool ok = false;
        if (v.is_eog(id)) {
            ok = m.complete();
        } else if (!v.token_bytes(id).empty()) {
            Matcher copy = m;
            ok = copy.accept_bytes(v.token_bytes(id));
        }
        if (ok) bits[id / 64] |= uint64_t{1} << (id % 64);
    }
    return bits;
}

struct Walk {
    std::string text;
    bool complete = false;  // ended on eog (or done)
    int steps = 0;
};

// Samples uniformly among the allowed tokens; once complete, stops with probability 1/2. Past
// `soft_limit` steps it prefers tokens that close values, then short structural ones, so that walks end.
// `check` runs on every step's mask (the twin test compares it with the brute force).
template <class Check>
Walk random_walk(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const Vocab>& v,
                 uint32_t seed, int soft_limit, int hard_limit, Check&& check) {
    std::mt19937 rng(seed);
    Matcher m(g, v);
    Walk w;
    std::vector<uint64_t> bits;
    std::vector<int32_t> allowed, closers, steering;
    for (; w.steps < hard_limit; ++w.steps) {
        if (m.done()) return w.complete = true, w;
        m.fill_mask(bits);
        check(m, bits);
        if (m.complete() && rng() % 2 == 0) return w.complete = true, w;
        allowed.clear();
        closers.clear();
        steering.clear();
        for (int32_t id = 0; id < v->size(); ++id) {
            if (!bit(bits, id) || v->is_eog(id)) continue;
            allowed.push_back(id);
            const std::string& b = v->token_bytes(id);
            if (b == "\"" || b == "}" || b == "]") closers.push_back(id);
            if (b.size() == 1 && std::string_view("01a @.-:TZ,").find(b[0]) != std::string_view::npos)
                steering.push_back(id);
        }
        if (allowed.empty()) {
            ADD_FAILURE() << "no token allowed after " << w.text;
            return w;
        }
        const bool steer = w.steps > soft_limit;
        const auto& pool = steer && !closers.empty() && rng() % 4 != 0 ? closers
                           : steer && !steering.empty()                ? steering
                                                                       : allowed;
        const int32_t id = pool[rng() % pool.size()];
        EXPECT_TRUE(m.accept(id)) << "a masked token was refused after " << w.text;
        w.text += v->token_bytes(id);
    }
    return w;
}

}  // namespace minfer::grammar::test
