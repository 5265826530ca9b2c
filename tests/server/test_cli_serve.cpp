// `minfer serve` as users start it: it prints its URL once ready (--port 0 picks a free port), logs one
// line per request on stderr, and on SIGTERM or SIGINT stops within a bound and exits 0, also with a
// stream in flight.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "server_util.h"

extern char** environ;

namespace minfer::test {
namespace {

// A `minfer serve` child: stdout read until the URL line, stderr to a file.
class ServeProcess {
  public:
    explicit ServeProcess(std::vector<std::string> args) {
        int out[2];
        if (::pipe(out) != 0) return;
        err_path_ = ::testing::TempDir() + "serve-" + std::to_string(::getpid()) + ".err";
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, out[1], 1);
        posix_spawn_file_actions_addopen(&fa, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addclose(&fa, out[0]);
        args.insert(args.begin(), {MINFER_BINARY, "serve"});
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
        posix_spawn_file_actions_destroy(&fa);
        ::close(out[1]);
        out_fd_ = out[0];
    }
    ~ServeProcess() {
        if (pid_ > 0 && !reaped_) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        if (out_fd_ >= 0) ::close(out_fd_);
    }
    // The port of the "listening on http://HOST:PORT" line, or -1 when it does not come within `limit`.
    int wait_for_url(std::chrono::seconds limit) {
        const auto deadline = std::chrono::steady_clock::now() + limit;
        const std::regex url(R"(listening on http://[0-9.]+:([0-9]+))");
        while (std::chrono::steady_clock::now() < deadline) {
            std::smatch m;
            if (std::regex_search(out_, m, url)) return std::stoi(m[1]);
            pollfd p{out_fd_, POLLIN, 0};
            if (::poll(&p, 1, 100) <= 0) continue;
            char buf[512];
            const ssize_t n = ::read(out_fd_, buf, sizeof buf);
            if (n <= 0) return -1;
            out_.append(buf, size_t(n));
        }
        return -1;
    }
    // The exit status after `sig`, or -1 when the child does not exit within `limit`.
    int stop(int sig, std::chrono::seconds limit) {
        ::kill(pid_, sig);
        const auto deadline = std::chrono::steady_clock::now() + limit;
        int status = 0;
        while (std::chrono::steady_clock::now() < deadline) {
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                reaped_ = true;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }
    std::string err() const {
        std::ifstream f(err_path_);
        std::stringstream s;
        s << f.rdbuf();
        return s.str();
    }

  private:
    pid_t pid_ = -1;
    int out_fd_ = -1;
    bool reaped_ = false;
    std::string out_, err_path_;
};

TEST(CliServe, PrintsUrlLogsRequestsAndStopsOnSigterm) {
    ServeProcess p({"--port", "0", "-t", "2", "-np", "4", "--alias", "tiny"});
    const int port = p.wait_for_url(std::chrono::seconds(30));
    ASSERT_GT(port, 0) << p.err();
    httplib::Client c("127.0.0.1", port);
    auto m = c.Get("/v1/models");
    ASSERT_TRUE(m);
    EXPECT_EQ(body_json(m)["data"][0]["id"], "tiny");
    auto r = c.Post("/v1/completions", R"({"prompt":"Hello","max_tokens":3,"ignore_eos":true})",
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    // A long stream in flight when the signal comes: it is finished or cancelled, and the process exits 0.
    RawClient stream(port);
    ASSERT_TRUE(stream.post("/v1/completions",
                            R"({"prompt":"x","max_tokens":4000,"ignore_eos":true,"stream":true})"));
    stream.read_until("data: ", 2);
    EXPECT_EQ(p.stop(SIGTERM, std::chrono::seconds(15)), 0) << p.err();
    const std::string log = p.err();
    EXPECT_TRUE(
        std::regex_search(log, std::regex(R"(POST /v1/completions 200 prompt=2 generated=3 [0-9.]+ ms)")))
        << log;
    EXPECT_NE(log.find("GET /v1/models 200"), std::string::npos) << log;
}

TEST(CliServe, SigintWhenIdleExitsZero) {
    ServeProcess p({"--port", "0", "-t", "1", "--api-key", "k"});
    const int port = p.wait_for_url(std::chrono::seconds(30));
    ASSERT_GT(port, 0) << p.err();
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post("/tokenize", R"({"content":"Hi"})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(p.stop(SIGINT, std::chrono::seconds(10)), 0) << p.err();
}

TEST(CliServe, PortInUseFailsClearly) {
    ServeProcess a({"--port", "0", "-t", "1"});
    const int port = a.wait_for_url(std::chrono::seconds(30));
    ASSERT_GT(port, 0);
    ServeProcess b({"--port", std::to_string(port), "-t", "1"});
    EXPECT_EQ(b.wait_for_url(std::chrono::seconds(10)), -1);
    EXPECT_NE(b.err().find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << b.err();
    EXPECT_EQ(a.stop(SIGTERM, std::chrono::seconds(10)), 0);
}

}  // namespace
}  // namespace minfer::test
