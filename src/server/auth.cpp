#include "server/auth.h"

#include <fstream>

#include "util/error.h"

namespace minfer::server {

namespace {

std::string_view trim(std::string_view s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
    // Every byte of the longer string is visited; a length difference alone makes the result false.
    const size_t n = std::max(a.size(), b.size());
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
        diff |= unsigned(x ^ y);
    }
    return diff == 0;
}

ApiKeys::ApiKeys(std::vector<std::string> keys) : keys_(std::move(keys)) {}

ApiKeys ApiKeys::from_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error(path + ": cannot read the API key file");
    std::vector<std::string> keys;
    for (std::string line; std::getline(in, line);)
        if (const std::string_view k = trim(line); !k.empty()) keys.emplace_back(k);
    if (keys.empty()) throw Error(path + ": no API key in the file (one per line)");
    return ApiKeys(std::move(keys));
}

bool ApiKeys::accepts(std::string_view authorization, std::string_view x_api_key) const {
    std::string_view given = trim(x_api_key);
    constexpr std::string_view kBearer = "Bearer ";
    if (authorization.substr(0, kBearer.size()) == kBearer)
        given = trim(authorization.substr(kBearer.size()));
    if (given.empty()) return false;
    bool ok = false;
    for (const std::string& k : keys_) ok |= constant_time_equal(given, k);
    return ok;
}

}  // namespace minfer::server
