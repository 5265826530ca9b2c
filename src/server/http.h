// HTTP pieces shared by `minfer serve` and `minfer viz` (cpp-httplib): a listener that never shares a
// busy port and takes bursts of connections, and server-sent-event framing.
//
//   httplib::Server http;
//   Listener listener(http);            // before any other socket option is set
//   const int port = listener.bind("127.0.0.1", 0);   // Error naming the address when it is taken
//   listener.start();                    // serving on a thread of its own
//   ... http.stop(); listener.join();
#pragma once
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace minfer::server {

class Listener {
  public:
    // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share a busy port.
    // Ignores SIGPIPE for the process: a client gone mid-write is an error return, not a signal.
    explicit Listener(httplib::Server& http);
    ~Listener() { join(); }
    // Binds host:port (port 0: a free one) and returns the port; throws Error naming the address.
    int bind(const std::string& host, int port);
    void start();  // listens on a new thread; returns once the server is running
    void join();   // until the listening thread has stopped (after http.stop())

  private:
    httplib::Server& http_;
    int fd_ = -1;  // the listening socket, as httplib's socket options saw it
    std::thread thread_;
};

// JSON text with invalid UTF-8 replaced, so rendering never throws.
std::string dump(const nlohmann::json& j);
// "data: {...}\n\n", and with an event name "event: NAME\ndata: {...}\n\n".
std::string sse_event(const nlohmann::json& j);
std::string sse_event(const std::string& event, const nlohmann::json& j);

}  // namespace minfer::server
