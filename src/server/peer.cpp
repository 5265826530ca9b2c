#include "server/peer.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace minfer::server {

namespace {

// The numeric host and port of an address, spelt as httplib spells a request's addresses.
bool same_endpoint(const sockaddr_storage& a, socklen_t len, const std::string& host, int port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    return host == h && port == std::atoi(p);
}

bool is_connection(int fd, const httplib::Request& req) {
    sockaddr_storage local{}, remote{};
    socklen_t local_len = sizeof local, remote_len = sizeof remote;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_len) != 0) return false;
    return same_endpoint(local, local_len, req.local_addr, req.local_port) &&
           same_endpoint(remote, remote_len, req.remote_addr, req.remote_port);
}

int find_socket(const httplib::Request& req) {
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return -1;
    int found = -1;
    while (const dirent* e = readdir(dir)) {
        const int fd = std::atoi(e->d_name);
        if (e->d_name[0] != '.' && fd != dirfd(dir) && is_connection(fd, req)) {
            found = fd;
            break;
        }
    }
    closedir(dir);
    return found;
}

}  // namespace

PeerWatch::PeerWatch(const httplib::Request& req) : fd_(req.remote_port > 0 ? find_socket(req) : -1) {}

bool PeerWatch::gone() const {
    if (fd_ < 0) return false;
    // POLLRDHUP: the client shut its side (a request's body is read whole before the handler runs, so
    // nothing else is pending); POLLHUP / POLLERR: reset.
    pollfd p{fd_, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace minfer::server
