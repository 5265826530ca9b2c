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
inline constexpr int64_t kMaxSteps = 2000000;                // expressions evaluated and blocks run
inline constexpr uint64_t kMaxWork = uint64_t{1} << 28;      // work units: bytes built, compared or searched
inline constexpr uint64_t kItemWork = 16;                    // work units of a list item or dict entry

// The work of the rendering in progress on this thread: each string, list or dict built, compared or
// searched charges its bytes or items, so that a template within every size limit still cannot run for
// minutes (100,000 iterations each copying 16 MiB, `x in big_list` in a long loop). Counted, not timed,
// so one template fails the same way on every machine. jinja::render opens one per rendering; outside
// one (variables converted before it), charges are free.
class WorkScope {
  public:
    WorkScope();
    ~WorkScope();
    WorkScope(const WorkScope&) = delete;
    WorkScope& operator=(const WorkScope&) = delete;

  private:
    friend void charge_work(uint64_t units, std::string_view construct);
    WorkScope* outer_;
    uint64_t used_ = 0;
};

// Throw EvalError naming `construct` when the rendering's work passes kMaxWork: `units` of it, or
// `items` list items or dict entries of kItemWork each.
void charge_work(uint64_t units, std::string_view construct);
inline void charge_items(size_t items, std::string_view construct) {
    charge_work(uint64_t(items) * kItemWork, construct);
}

// Both throw EvalError (tokenizer/template/jinja_value.h), defined in jinja_value.cpp.
// Throws EvalError when a string of `bytes` made by `construct` would exceed kMaxStringBytes.
void check_string_size(size_t bytes, std::string_view construct);
// Throws EvalError when a list of `items` made by `construct` would exceed kMaxListItems.
void check_list_size(size_t items, std::string_view construct);

}  // namespace minfer::jinja
