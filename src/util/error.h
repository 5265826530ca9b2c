// Error type used across minfer: every user-facing failure (bad file, bad flag, context overflow)
// is thrown as minfer::Error with a message naming the file/flag and the problem; app/ prints it and exits 1.
#pragma once
#include <stdexcept>
#include <string>

namespace minfer {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace minfer
