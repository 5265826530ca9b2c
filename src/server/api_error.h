// The error a request gets, in OpenAI's envelope {"error": {"message", "type", "code"}}: every failure a
// handler can meet is thrown or returned as an ApiError, so no input reaches the client as a 500.
#pragma once
#include <stdexcept>
#include <string>

namespace minfer::server {

struct ApiError : std::runtime_error {
    ApiError(int status_, std::string type_, std::string code_, const std::string& message)
        : std::runtime_error(message), status(status_), type(std::move(type_)), code(std::move(code_)) {}
    int status;        // HTTP status
    std::string type;  // invalid_request_error, authentication_error, ...
    std::string code;  // machine-readable detail, or empty (rendered as null)
};

// 400 invalid_request_error: bad JSON, a wrong type, an out-of-range value, a prompt too long.
inline ApiError bad_request(const std::string& message, std::string code = "invalid_value") {
    return {400, "invalid_request_error", std::move(code), message};
}

}  // namespace minfer::server
