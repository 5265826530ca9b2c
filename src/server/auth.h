// API keys: when any is set, requests carry "Authorization: Bearer KEY" or "X-Api-Key: KEY" (as
// Anthropic's SDKs send it, on every route). Keys are compared in time independent of where they differ,
// and every key is tried, so timing tells nothing.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace minfer::server {

// True when a and b are equal; the time depends on their lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

class ApiKeys {
  public:
    ApiKeys() = default;
    explicit ApiKeys(std::vector<std::string> keys);
    // One key per line (blank lines and surrounding spaces ignored); throws Error when the file cannot
    // be read or holds no key.
    static ApiKeys from_file(const std::string& path);

    bool enabled() const { return !keys_.empty(); }
    // The key of an Authorization header ("Bearer KEY") or X-Api-Key header value, checked.
    bool accepts(std::string_view authorization, std::string_view x_api_key) const;

  private:
    std::vector<std::string> keys_;
};

}  // namespace minfer::server
