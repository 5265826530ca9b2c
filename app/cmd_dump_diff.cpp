// minfer dump-diff DIR_A DIR_B: compares two MINFER_GRAPH_DUMP directories node by node. Entries are
// matched by (step, node, name); each match prints its max absolute difference, then a summary names
// the worst node. Entries present on one side only are counted, not compared. A matched pair whose
// op or shape differ, an unreadable index, or a file missing or of the wrong size is an error.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "common.h"
#include "util/error.h"

namespace minfer {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct DiffOptions {
    std::string dir_a, dir_b;
    bool json = false;
};

struct Entry {
    int64_t step = 0, node = 0;
    std::string name, op, file;
    std::vector<int64_t> shape;
    int64_t n_elements() const {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        return n;
    }
};

using Key = std::tuple<int64_t, int64_t, std::string>;

std::map<Key, Entry> read_index(const std::string& dir) {
    const std::string path = (fs::path(dir) / "index.json").string();
    std::ifstream in(path);
    if (!in) throw Error("dump-diff: cannot open " + path);
    std::map<Key, Entry> entries;
    try {
        for (const json& j : json::parse(in)) {
            Entry e{j.at("step").get<int64_t>(),     j.at("node").get<int64_t>(),
                    j.at("name").get<std::string>(), j.at("op").get<std::string>(),
                    j.at("file").get<std::string>(), j.at("shape").get<std::vector<int64_t>>()};
            entries.emplace(Key{e.step, e.node, e.name}, std::move(e));
        }
    } catch (const json::exception& ex) {
        throw Error("dump-diff: " + path + " is not a graph-dump index: " + ex.what());
    }
    return entries;
}

std::vector<float> read_f32(const std::string& dir, const Entry& e) {
    const std::string path = (fs::path(dir) / e.file).string();
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) throw Error("dump-diff: cannot open " + path);
    const int64_t want = e.n_elements() * int64_t(sizeof(float));
    if (int64_t(in.tellg()) != want)
        throw Error("dump-diff: " + path + " holds " + std::to_string(int64_t(in.tellg())) +
                    " bytes, its shape needs " + std::to_string(want));
    std::vector<float> v(size_t(e.n_elements()));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), std::streamsize(want));
    if (!in) throw Error("dump-diff: cannot read " + path);
    return v;
}

// NaN against NaN counts as equal; NaN against a number as an infinite difference.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
        if (na || nb) {
            if (na != nb) worst = std::numeric_limits<double>::infinity();
            continue;
        }
        worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
    }
    return worst;
}

std::string shape_str(const std::vector<int64_t>& s) {
    return json(s).dump();
}

double compare_entry(const DiffOptions& o, const Entry& a, const Entry& b) {
    const std::string where =
        "step " + std::to_string(a.step) + " node " + std::to_string(a.node) + " (" + a.name + ")";
    if (a.op != b.op)
        throw Error("dump-diff: " + where + " is op " + a.op + " in " + o.dir_a + " but " + b.op + " in " +
                    o.dir_b);
    if (a.shape != b.shape)
        throw Error("dump-diff: " + where + " has shape " + shape_str(a.shape) + " in " + o.dir_a + " but " +
                    shape_str(b.shape) + " in " + o.dir_b);
    return max_abs_diff(read_f32(o.dir_a, a), read_f32(o.dir_b, b));
}

struct Row {
    const Entry* e;
    double diff;
};

struct DiffResult {
    std::vector<Row> rows;  // (step, node, name) order
    size_t worst = 0;       // index into rows
    int64_t only_a = 0, only_b = 0;
};

DiffResult diff_dirs(const DiffOptions& o, const std::map<Key, Entry>& a, const std::map<Key, Entry>& b) {
    DiffResult r;
    for (const auto& [key, ea] : a) {
        const auto it = b.find(key);
        if (it == b.end()) continue;
        r.rows.push_back({&ea, compare_entry(o, ea, it->second)});
        if (r.rows.back().diff > r.rows[r.worst].diff) r.worst = r.rows.size() - 1;
    }
    if (r.rows.empty())
        throw Error("dump-diff: " + o.dir_a + " and " + o.dir_b + " share no (step, node, name) entry");
    r.only_a = int64_t(a.size() - r.rows.size());
    r.only_b = int64_t(b.size() - r.rows.size());
    return r;
}

// Infinity (NaN against a number) is written as the string "inf": JSON has no such number.
json row_json(const Row& row) {
    const Entry& e = *row.e;
    return {{"step", e.step},   {"node", e.node},
            {"name", e.name},   {"op", e.op},
            {"shape", e.shape}, {"max_abs_diff", std::isinf(row.diff) ? json("inf") : json(row.diff)}};
}

void print_json(const DiffResult& r) {
    json entries = json::array();
    for (const Row& row : r.rows) entries.push_back(row_json(row));
    const json out = {{"entries", entries},
                      {"worst", row_json(r.rows[r.worst])},
                      {"compared", r.rows.size()},
                      {"only_in_a", r.only_a},
                      {"only_in_b", r.only_b}};
    std::cout << out.dump() << "\n";
}

void print_table(const DiffResult& r) {
    std::printf("%5s %6s  %-28s %-16s %s\n", "step", "node", "name", "op", "max_abs_diff");
    for (const Row& row : r.rows)
        std::printf("%5lld %6lld  %-28s %-16s %.6g\n", (long long)row.e->step, (long long)row.e->node,
                    row.e->name.c_str(), row.e->op.c_str(), row.diff);
    const Row& w = r.rows[r.worst];
    std::printf("worst: step %lld node %lld %s (%s) max_abs_diff %.6g\n", (long long)w.e->step,
                (long long)w.e->node, w.e->name.c_str(), w.e->op.c_str(), w.diff);
    std::printf("%zu compared, %lld only in A, %lld only in B\n", r.rows.size(), (long long)r.only_a,
                (long long)r.only_b);
}

}  // namespace

void add_dump_diff_command(CLI::App& app) {
    auto o = std::make_shared<DiffOptions>();
    CLI::App* c =
        app.add_subcommand("dump-diff", "Max abs difference per node between two MINFER_GRAPH_DUMP dirs");
    c->add_option("dir_a", o->dir_a, "First dump directory")->required();
    c->add_option("dir_b", o->dir_b, "Second dump directory")->required();
    c->add_flag("--json", o->json, "Print one JSON object {entries, worst, compared, only_in_a, only_in_b}");
    c->callback([o] {
        const std::map<Key, Entry> a = read_index(o->dir_a), b = read_index(o->dir_b);
        const DiffResult r = diff_dirs(*o, a, b);
        o->json ? print_json(r) : print_table(r);
    });
}

}  // namespace minfer
