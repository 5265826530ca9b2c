#include "common.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "graph/dump.h"
#include "runtime/session.h"
#include "util/error.h"

namespace minfer {

std::vector<int32_t> parse_ids(const std::string& s, const char* flag) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i <= s.size()) {
        const size_t end = std::min(s.find(',', i), s.size());
        int32_t v = 0;
        const char *b = s.data() + i, *e = s.data() + end;
        while (b < e && *b == ' ') ++b;
        const auto [ptr, ec] = std::from_chars(b, e, v);
        if (ec != std::errc() || ptr != e || b == e)
            throw Error(std::string(flag) + ": expected comma-separated token ids, got '" + s + "'");
        ids.push_back(v);
        i = end + 1;
    }
    return ids;
}

CLI::Validator int_in(int64_t lo, int64_t hi) {
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            int64_t v = 0;
            const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
            if (ec != std::errc() || ptr != s.data() + s.size())
                return "expected an integer, got '" + s + "'";
            if (v < lo || v > hi)
                return "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + s;
            return {};
        },
        "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

std::string default_model_path() {
    const char* env = std::getenv("MINFER_DEFAULT_MODEL");
    return env && *env ? env : MINFER_DEFAULT_MODEL;
}

void GraphDumpOptions::add_to(CLI::App& app) {
    app.add_option("--dump-graph", dot_path, "Write the compute graph as Graphviz DOT and exit");
    app.add_option("--dump-graph-json", json_path, "Write the compute graph as JSON and exit");
}

void dump_graph(Session& s, const GraphParams& p, const GraphDumpOptions& o) {
    const ComputeGraph g = s.planned_graph(p);
    auto write = [&](const std::string& path, auto&& fn) {
        if (path.empty()) return;
        std::ofstream f(path);
        if (!f) throw Error(path + ": cannot open for writing");
        fn(f);
        if (!f) throw Error(path + ": write failed");
    };
    write(o.dot_path, [&](std::ostream& f) { write_dot(f, g); });
    write(o.json_path, [&](std::ostream& f) { write_json(f, g, p); });
    std::cout << "graph: " << g.nodes.size() << " nodes\n";
}

}  // namespace minfer
