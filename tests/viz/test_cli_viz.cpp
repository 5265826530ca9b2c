// `minfer viz` as a child process: the URL it prints and a clean exit on SIGTERM, --export, and bad
// input (unknown model, port in use) as one clear error line and a non-zero exit.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/cli_util.h"
#include "viz_util.h"

namespace minfer::test {
namespace {

using namespace std::chrono_literals;

// A socket listening on a free loopback port, held for the test.
struct BusyPort {
    BusyPort() : fd(::socket(AF_INET, SOCK_STREAM, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        ::listen(fd, 1);
        socklen_t len = sizeof a;
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        port = ntohs(a.sin_port);
    }
    ~BusyPort() { ::close(fd); }
    int fd, port = 0;
};

TEST(VizCli, UnknownModelIsAClearError) {
    const CliResult r = run_cli({"viz", "-m", "/no/such/model.gguf", "--port", "0"}, 60s);
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find("/no/such/model.gguf"), std::string::npos) << r;
    EXPECT_EQ(r.out.find("viz: open"), std::string::npos) << r;
}

TEST(VizCli, PortInUseIsAClearError) {
    const BusyPort busy;
    ASSERT_GT(busy.port, 0);
    const CliResult r = run_cli({"viz", "-t", "2", "--port", std::to_string(busy.port)}, 120s);
    EXPECT_TRUE(r.failed_cleanly()) << r;
    EXPECT_NE(r.err.find("cannot listen on 127.0.0.1:" + std::to_string(busy.port)), std::string::npos) << r;
}

TEST(VizCli, BadDeviceAndPortAreRefused) {
    EXPECT_TRUE(run_cli({"viz", "--port", "70000"}, 30s).failed_cleanly());
    EXPECT_TRUE(run_cli({"viz", "--device", "tpu"}, 30s).failed_cleanly());
}

// The exported page holds both graphs: as many node elements as the printed node counts, and no marker.
TEST(VizCli, ExportWritesOneSelfContainedPage) {
    const std::string path = testing::TempDir() + "/viz-export-test.html";
    const CliResult r = run_cli({"viz", "-t", "2", "--export", path}, 120s);
    ASSERT_EQ(r.exit_code, 0) << r;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("(\\d+) prefill and (\\d+) decode nodes"))) << r;
    std::ifstream f(path);
    std::stringstream page;
    page << f.rdbuf();
    const std::string text = page.str();
    const size_t open = text.find('>', text.find("<script id=\"viz-data\""));
    ASSERT_NE(open, std::string::npos);
    const nlohmann::json data =
        nlohmann::json::parse(text.substr(open + 1, text.find("</script>", open) - open - 1));
    const size_t prefill = std::stoul(m[1].str()), decode = std::stoul(m[2].str());
    EXPECT_EQ(count_of(data["graphs"]["prefill"]["svg"].get<std::string>(), "class=\"node"), prefill);
    EXPECT_EQ(count_of(data["graphs"]["decode"]["svg"].get<std::string>(), "class=\"node"), decode);
    EXPECT_EQ(data["graphs"]["decode"]["doc"]["n_nodes"], decode);
    EXPECT_EQ(data["info"]["device"], "cpu");
    std::filesystem::remove(path);
}

// `minfer viz --port 0` as a child whose stdout is read line by line.
struct VizChild {
    VizChild() {
        int out[2];
        EXPECT_EQ(::pipe(out), 0);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);
        posix_spawn_file_actions_addclose(&actions, out[0]);
        std::vector<std::string> args{MINFER_BINARY, "viz", "-t", "2", "--port", "0"};
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
        posix_spawn_file_actions_destroy(&actions);
        ::close(out[1]);
        stdout_fd = out[0];
    }
    ~VizChild() {
        if (pid > 0) ::kill(pid, SIGKILL), wait();
        ::close(stdout_fd);
    }
    // Reads stdout until the URL line; its port, or 0 when the child ends first.
    int port() {
        std::string text;
        char buf[256];
        std::smatch m;
        while (!std::regex_search(text, m, std::regex("viz: open http://127\\.0\\.0\\.1:(\\d+)/\n"))) {
            const ssize_t n = ::read(stdout_fd, buf, sizeof buf);
            if (n <= 0) return 0;
            text.append(buf, size_t(n));
        }
        return std::stoi(m[1].str());
    }
    int wait() {
        int status = 0;
        ::waitpid(pid, &status, 0);
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    pid_t pid = -1;
    int stdout_fd = -1;
};

// Serves, prints the URL, answers, and exits 0 on SIGTERM; a second instance on its port fails.
TEST(VizCli, ServesPrintsTheUrlAndStopsOnSigterm) {
    VizChild child;
    const int port = child.port();
    ASSERT_GT(port, 0);
    httplib::Client c("127.0.0.1", port);
    const auto info = c.Get("/api/info");
    ASSERT_TRUE(info);
    EXPECT_EQ(info->status, 200);
    const CliResult second = run_cli({"viz", "-t", "2", "--port", std::to_string(port)}, 120s);
    EXPECT_TRUE(second.failed_cleanly()) << second;
    EXPECT_NE(second.err.find("cannot listen"), std::string::npos) << second;
    ::kill(child.pid, SIGTERM);
    EXPECT_EQ(child.wait(), 0);
}

}  // namespace
}  // namespace minfer::test
