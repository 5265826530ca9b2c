// Runs the built minfer binary (MINFER_BINARY), or another program, as a child process for the CLI tests:
// stdout and stderr captured separately, stdin from /dev/null, and a deadline after which the child is killed
// so that a hang fails the test instead of blocking the suite.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

extern char** environ;

namespace minfer::test {

struct CliResult {
    int exit_code = -1;   // the exit status when the child exited normally, else -1
    int term_signal = 0;  // the signal that ended the child (SIGKILL after a timeout), else 0
    bool timed_out = false;
    std::string out, err;  // everything the child wrote to stdout and stderr
    std::string spawn_error;

    // A clean failure: an exit status other than 0, no signal, no timeout.
    bool failed_cleanly() const { return exit_code > 0 && term_signal == 0 && !timed_out; }
};

inline std::ostream& operator<<(std::ostream& os, const CliResult& r) {
    os << "exit " << r.exit_code;
    if (r.term_signal) os << ", killed by signal " << r.term_signal;
    if (r.timed_out) os << ", timed out";
    if (!r.spawn_error.empty()) os << ", spawn failed: " << r.spawn_error;
    return os << "\n--- stdout ---\n" << r.out << "\n--- stderr ---\n" << r.err;
}

// Runs `argv` (argv[0] looked up in PATH), killing it after `timeout`.
inline CliResult run_process(std::vector<std::string> argv_s, std::chrono::seconds timeout) {
    CliResult r;
    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
        r.spawn_error = std::string("pipe: ") + std::strerror(errno);
        return r;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);

    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);

    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    if (rc != 0) {
        r.spawn_error = std::string(argv[0]) + ": " + std::strerror(rc);
        ::close(out_pipe[0]);
        ::close(err_pipe[0]);
        return r;
    }

    // Drain both pipes until the child closes them or the deadline passes.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::array<pollfd, 2> fds{pollfd{out_pipe[0], POLLIN, 0}, pollfd{err_pipe[0], POLLIN, 0}};
    std::array<std::string*, 2> sinks{&r.out, &r.err};
    int open_fds = 2;
    while (open_fds > 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            r.timed_out = true;
            ::kill(pid, SIGKILL);
            break;
        }
        if (::poll(fds.data(), fds.size(), int(left.count())) < 0 && errno != EINTR) break;
        for (size_t i = 0; i < fds.size(); ++i) {
            if (fds[i].fd < 0 || fds[i].revents == 0) continue;
            char buf[4096];
            const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sinks[i]->append(buf, size_t(n));
            } else if (n == 0 || errno != EINTR) {
                ::close(fds[i].fd);
                fds[i].fd = -1;  // poll ignores negative descriptors
                --open_fds;
            }
        }
    }
    for (const pollfd& p : fds)
        if (p.fd >= 0) ::close(p.fd);

    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
    return r;
}

// Runs `MINFER_BINARY args...`.
inline CliResult run_cli(const std::vector<std::string>& args,
                         std::chrono::seconds timeout = std::chrono::seconds(120)) {
    std::vector<std::string> argv{MINFER_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(std::move(argv), timeout);
}

}  // namespace minfer::test
