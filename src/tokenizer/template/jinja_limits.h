// Resource limits of the chat-template interpreter. A chat template comes from a downloaded GGUF and
// its variables from a user or a client, so nesting, sizes and loops are bounded: a hostile template
// fails with an error naming the construct instead of overflowing the stack or exhausting memory.
// Real chat templates stay far below every limit (nesting < 20, prompts of a few MiB).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace minfer::jinja {

inline constexpr int kMaxNesting = 256;                      // parser: expressions and {% %} blocks
inline constexpr int kMaxEvalDepth = 1024;                   // evaluator: expressions, blocks, macro calls
inline constexpr int kMaxValueDepth = 256;                   // lists and dicts inside each other
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;  // any string value
inline constexpr size_t kMaxOutputBytes = size_t{64} << 20;  // all text rendered (output, macros, set blocks)
inline constexpr size_t kMaxListItems = size_t{1} << 20;     // elements of a list or entries of a dict
inline constexpr int64_t kMaxLoopIterations = 100000;        // for-loop iterations of one rendering

// Both throw EvalError (tokenizer/template/jinja_value.h), defined in jinja_value.cpp.
// Throws EvalError when a string of `bytes` made by `construct` would exceed kMaxStringBytes.
void check_string_size(size_t bytes, std::string_view construct);
// Throws EvalError when a list of `items` made by `construct` would exceed kMaxListItems.
void check_list_size(size_t items, std::string_view construct);

}  // namespace minfer::jinja
