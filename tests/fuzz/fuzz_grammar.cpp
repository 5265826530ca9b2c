// libFuzzer target: JSON schema -> grammar -> matcher. The input is a schema's JSON text, then a NUL
// byte, then bytes fed to the matcher one single-byte token at a time; at each step the mask must agree
// with accept(). Any outcome but a grammar or SchemaError (a crash, a sanitizer report, a mask that
// disagrees, another exception, running out of memory or time) is a finding.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace {

using namespace minfer::grammar;

// Single bytes (so every text can be fed) plus tokens spanning symbols and splitting UTF-8, and an eog.
const std::shared_ptr<const Vocab>& vocab() {
    static const std::shared_ptr<const Vocab> v = [] {
        std::vector<std::string> t;
        for (int b = 0; b < 256; ++b) t.emplace_back(1, static_cast<char>(b));
        for (const char* s :
             {"\":\"", "\"},{\"", "{\"", "\"}", "null", "true", "\n  ", "\xE4\xB8", "\\u00", "12"})
            t.emplace_back(s);
        t.emplace_back("");
        return std::make_shared<const Vocab>(std::move(t),
                                             std::vector<int32_t>{static_cast<int32_t>(t.size() - 1)});
    }();
    return v;
}

bool bit(const std::vector<uint64_t>& bits, int32_t id) {
    return (bits[id / 64] >> (id % 64)) & 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t nul = input.find('\0');
    const auto schema = nlohmann::ordered_json::parse(input.substr(0, nul), nullptr, false);
    if (schema.is_discarded()) return 0;
    std::shared_ptr<const Grammar> g;
    try {
        g = compile_json_schema(schema);
    } catch (const SchemaError&) {
        return 0;
    }
    Matcher m(g, vocab());
    std::vector<uint64_t> bits;
    const std::string_view feed = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
    for (unsigned char c : feed) {
        m.fill_mask(bits);
        const int32_t eog = vocab()->eog_ids()[0];
        if (bit(bits, eog) != m.complete()) std::abort();
        if (bit(bits, c) != Matcher(m).accept(c)) std::abort();
        m.accept(c);
    }
    return 0;
}
