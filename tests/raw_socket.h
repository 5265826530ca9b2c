// A raw HTTP/1.1 client socket on loopback for the server tests (minfer serve, minfer viz): sends one
// request it is given whole and reads as much of the answer as a test needs, then hangs up whenever
// told, as a vanishing client does.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace minfer::test {

class RawSocket {
  public:
    explicit RawSocket(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    ~RawSocket() { close(); }
    RawSocket(const RawSocket&) = delete;
    RawSocket& operator=(const RawSocket&) = delete;
    bool send_request(const std::string& req) {
        return connected_ && ::send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size());
    }
    // Reads until `needle` has arrived `count` times (or the peer closes); returns everything read.
    std::string read_until(const std::string& needle, int count = 1) {
        std::string got;
        char buf[4096];
        auto seen = [&] {
            int n = 0;
            for (size_t at = got.find(needle); at != std::string::npos; at = got.find(needle, at + 1)) ++n;
            return n;
        };
        while (seen() < count) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) break;
            got.append(buf, size_t(n));
        }
        return got;
    }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

  private:
    int fd_;
    bool connected_ = false;
};

}  // namespace minfer::test
