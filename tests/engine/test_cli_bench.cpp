// `minfer bench --parallel`, run as a child process on the default model: one llama-batched-bench jsonl
// object per sequence count with consistent fields, and bad sequence counts fail cleanly.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"

namespace minfer::test {
namespace {

using nlohmann::json;

TEST(CliBenchParallel, JsonLinesFollowLlamaBatchedBench) {
    const CliResult r = run_cli({"bench", "--parallel", "1,2", "-p", "8", "-n", "4", "--json", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r;
    std::vector<json> rows;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) rows.push_back(json::parse(line, nullptr, false));
    ASSERT_EQ(rows.size(), 2u) << r;
    for (size_t i = 0; i < rows.size(); ++i) {
        const json& j = rows[i];
        ASSERT_TRUE(j.is_object()) << r;
        const int64_t pl = int64_t(i) + 1;
        EXPECT_EQ(j["pl"], pl);
        EXPECT_EQ(j["pp"], 8);
        EXPECT_EQ(j["tg"], 4);
        EXPECT_EQ(j["n_kv"], pl * (8 + 4));
        EXPECT_EQ(j["threads"], 2);
        EXPECT_GE(j["n_kv_max"].get<int64_t>(), pl * (8 + 4));
        for (const char* k : {"t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed"}) {
            const double v = j[k].get<double>();
            EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " = " << v << " at pl " << pl;
        }
        const double t_pp = j["t_pp"], t_tg = j["t_tg"], t = j["t"];
        EXPECT_NEAR(t, t_pp + t_tg, 1e-6 * t) << j.dump();
        EXPECT_NEAR(j["speed_tg"].get<double>(), double(pl * 4) / t_tg, 1e-6 * j["speed_tg"].get<double>());
        EXPECT_NEAR(j["speed"].get<double>(), double(pl * 12) / t, 1e-6 * j["speed"].get<double>());
    }
}

// P = 0 (llama-batched-bench's npp 0) skips the prefill, N = 0 the decode: that phase's time and speed
// are 0, the other still runs.
TEST(CliBenchParallel, ZeroSkipsAPhase) {
    const CliResult r = run_cli({"bench", "--parallel", "2", "-p", "0", "-n", "3", "--json", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r;
    const json j = json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r;
    EXPECT_EQ(j["n_kv"], 6);
    EXPECT_EQ(j["t_pp"].get<double>(), 0.0);
    EXPECT_EQ(j["speed_pp"].get<double>(), 0.0);
    EXPECT_GT(j["speed_tg"].get<double>(), 0.0);
    const CliResult r2 = run_cli({"bench", "--parallel", "2", "-p", "4", "-n", "0", "--json", "-t", "2"});
    ASSERT_EQ(r2.exit_code, 0) << r2;
    const json j2 = json::parse(r2.out, nullptr, false);
    ASSERT_TRUE(j2.is_object()) << r2;
    EXPECT_EQ(j2["t_tg"].get<double>(), 0.0);
    EXPECT_EQ(j2["speed_tg"].get<double>(), 0.0);
    EXPECT_GT(j2["speed_pp"].get<double>(), 0.0);
    EXPECT_EQ(j2["t"], j2["t_pp"]);
}

// A micro-batch smaller than a prompt splits it over passes; the table has llama-batched-bench's columns.
TEST(CliBenchParallel, TableWithASmallMicroBatch) {
    const CliResult r = run_cli(
        {"bench", "--parallel", "3", "-p", "5", "-n", "2", "--ubatch-size", "4", "-r", "2", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r;
    EXPECT_NE(r.out.find("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |"), std::string::npos) << r;
    EXPECT_NE(r.out.find("|     5 |      2 |    3 |     21 |"), std::string::npos) << r;
    EXPECT_NE(r.out.find("reps: 2"), std::string::npos) << r;
}

TEST(CliBenchParallel, BadSequenceCountsFailCleanly) {
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
        {{"bench", "--parallel", "0"}, "must be between 1 and"},
        {{"bench", "--parallel", "x"}, "expected an integer, got 'x'"},
        {{"bench", "--parallel", "1,-3"}, "must be between 1 and"},
        {{"bench", "--parallel", "2", "-d", "8"}, "excludes"},
        {{"bench", "--parallel", "2", "-p", "0", "-n", "0"}, "nothing to bench"}};
    for (const auto& [args, message] : cases) {
        const CliResult r = run_cli(args);
        EXPECT_TRUE(r.failed_cleanly()) << r;
        EXPECT_TRUE(r.out.empty()) << r;
        EXPECT_NE(r.err.find(message), std::string::npos) << "want '" << message << "' in: " << r;
    }
}

}  // namespace
}  // namespace minfer::test
