#include "server/http.h"

#include <sys/socket.h>

#include <chrono>
#include <csignal>

#include "util/error.h"

namespace minfer::server {

Listener::Listener(httplib::Server& http) : http_(http) {
    std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a signal
    http_.set_socket_options([this](int sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        fd_ = sock;
    });
}

int Listener::bind(const std::string& host, int port) {
    const int bound = port == 0 ? http_.bind_to_any_port(host) : (http_.bind_to_port(host, port) ? port : -1);
    if (bound <= 0)
        throw Error("cannot listen on " + host + ":" + std::to_string(port) +
                    " (address in use, or not an address of this machine)");
    // httplib listens with a backlog of 5: a burst of clients would overflow it, their first packets
    // would be dropped and retransmitted seconds later, after httplib gave up waiting for the request.
    ::listen(fd_, 1024);
    return bound;
}

void Listener::start() {
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    // stop() only reaches a server that is running: wait (briefly) until it is.
    for (int i = 0; i < 2000 && !http_.is_running(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void Listener::join() {
    if (thread_.joinable()) thread_.join();
}

std::string dump(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& j) {
    return "data: " + dump(j) + "\n\n";
}

std::string sse_event(const std::string& event, const nlohmann::json& j) {
    return "event: " + event + "\n" + sse_event(j);
}

}  // namespace minfer::server
