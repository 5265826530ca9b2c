#include "server/request_parts.h"

namespace minfer::server {

using json = nlohmann::ordered_json;

const char* type_name(const json& v) {
    return v.is_boolean()  ? "a boolean"
           : v.is_number() ? "a number"
           : v.is_string() ? "a string"
           : v.is_array()  ? "an array"
           : v.is_object() ? "an object"
                           : "null";
}

ApiError wrong_type(const std::string& field, const char* want, const json& got) {
    return bad_request("'" + field + "' must be " + want + ", not " + type_name(got), "invalid_type");
}

// The field when present and not null.
const json* field(const json& body, const char* name) {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

bool boolean(const json& body, const char* name, bool dflt) {
    const json* v = field(body, name);
    if (!v) return dflt;
    if (!v->is_boolean()) throw wrong_type(name, "a boolean", *v);
    return v->get<bool>();
}

}  // namespace minfer::server
