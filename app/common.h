// Helpers shared by the minfer subcommands.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gguf/ggml_type.h"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace minfer {

class Session;
struct Model;
struct SamplerParams;
struct GraphParams;
enum class BackendKind : uint8_t;

// "1,2,3" -> {1, 2, 3}; throws Error on anything else.
std::vector<int32_t> parse_ids(const std::string& s, const char* flag);
// Loads `path` (the embedded default model when empty) for `device`. The CPU reads the file into
// anonymous memory on 2 MiB pages (decode streams every weight per token; see GgufFile); CUDA maps it
// and uploads. Files over ~100 MB show a progress bar on stderr and are paged in up front, so the first
// tokens are not slowed by page faults.
std::unique_ptr<Model> load_model(const std::string& path, BackendKind device);

// Prints a warning when the context size asked for exceeds the model's training context.
void warn_beyond_training(const Model& m, int64_t n_ctx);

// The embedded default model (models/ next to the binary's source tree or install prefix).
std::string default_model_path();

// Runs `ids` through s.forward one micro-batch pass at a time (the passes s.forward(ids) runs) and
// returns the last pass's logits (n_out 1). With `progress` and more than one pass, "\r<what>: N/total
// tokens" follows each pass on stderr (N counts from `done`, tokens fed before), then a newline.
std::span<const float> forward_in_passes(Session& s, std::span<const int32_t> ids, const char* what,
                                         bool progress, int64_t total);
bool progress_wanted();  // stderr is a terminal

// The whole text of a file given on the command line (a -f prompt, chat's system message, a chat
// template); `what` names it in the error.
std::string read_text_file(const std::string& path, const std::string& what);

// --dump-graph / --dump-graph-json: writes the graph for `p`, prints the node count. True when written.
struct GraphDumpOptions {
    std::string dot_path, json_path;
    void add_to(CLI::App& app);
    bool requested() const { return !dot_path.empty() || !json_path.empty(); }
};
void dump_graph(Session& s, const GraphParams& p, const GraphDumpOptions& o);

// CLI11 validator for an integer flag in [lo, hi], with a short message naming the bound.
CLI::Validator int_in(int64_t lo, int64_t hi);

// CLI11 validator for a finite floating-point flag in [lo, hi] (NaN and infinities rejected).
CLI::Validator float_in(double lo, double hi);

// A random 64-bit seed (the default --seed, as llama.cpp draws one).
uint64_t random_seed();
// -n: -1 means until the end of generation or of the context (kUntilTheEnd tokens at most).
inline constexpr int64_t kUntilTheEnd = int64_t{1} << 24;
CLI::Validator n_predict_check();

// Before parsing: rewrites llama.cpp's multi-letter single-dash flags CLI11 cannot take (-sys, -ngl,
// -ub, -no-cnv) to their long forms; throws Error("unknown option ...") for any other (-cnv, -fa),
// which CLI11 would misread as a one-letter flag and a value (-c nv).
void normalize_args(int argc, char** argv);
// "error: " before argument errors, "unknown command"/"unknown option" for unexpected words, --version.
void configure_app(CLI::App& app);

// --temp --top-k --top-p --min-p --repeat-penalty --presence-penalty --frequency-penalty --seed
void add_sampling_options(CLI::App& app, SamplerParams& p);

// --device cpu|cuda, and llama.cpp's --n-gpu-layers N (-ngl): N > 0 means cuda
void add_device_option(CLI::App& app, BackendKind& device);
// --ubatch-size (llama.cpp's -ub): most prompt tokens per forward pass (SessionParams::n_ubatch)
void add_ubatch_option(CLI::App& app, int64_t& n_ubatch);
// --kv-type f32 | f16 | q8_0.
void add_kv_type_option(CLI::App& app, GgmlType& type);
// --tensor-parallel N (-tp N): the model split over N ranks (models/shard.h).
void add_tensor_parallel_option(CLI::App& app, int& ranks);
// --kv-mem SIZE (K/M/G suffixes, powers of 1024).
void add_kv_mem_option(CLI::App& app, int64_t& bytes);

void add_run_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);
void add_info_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_dump_diff_command(CLI::App& app);

}  // namespace minfer
