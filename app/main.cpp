// minfer: command-line entry point. Every subcommand reports failures as one clear line on stderr
// and a non-zero exit status.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string_view>

#include "common.h"
#include "util/error.h"

namespace minfer {
void add_serve_command(CLI::App& app);  // app/cmd_serve.cpp
void add_viz_command(CLI::App& app);    // app/cmd_viz.cpp
}  // namespace minfer

int main(int argc, char** argv) {
    CLI::App app{
        "minfer: LLM inference for GGUF models (Qwen2/2.5, Qwen3, Qwen3-MoE, Llama, Gemma 3, gpt-oss)"};
    app.require_subcommand(0, 1);
    minfer::add_run_command(app);
    minfer::add_chat_command(app);
    minfer::add_eval_command(app);
    minfer::add_tokenize_commands(app);
    minfer::add_info_command(app);
    minfer::add_bench_command(app);
    minfer::add_dump_diff_command(app);
    minfer::add_serve_command(app);
    minfer::add_viz_command(app);
    // CLI11 short names are one letter: llama.cpp's -sys is spelled --system.
    static char system_flag[] = "--system";
    static char parallel_flag[] = "--parallel";  // llama-server's -np
    for (int i = 1; i < argc; ++i) {
        if (std::string_view(argv[i]) == "-sys") argv[i] = system_flag;
        if (std::string_view(argv[i]) == "-np") argv[i] = parallel_flag;
    }
    minfer::configure_app(app);
    try {
        minfer::normalize_args(argc, argv);
        app.parse(argc, argv);
        if (app.get_subcommands().empty()) throw CLI::RequiredError("A subcommand");
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const minfer::Error& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
