// Whether the client of a request is still there while its answer is computed. A streamed answer learns
// it from a failed write; a whole one writes nothing until the end, so it polls the connection between
// steps. httplib 0.11 (Debian 12's) does not hand a handler its socket: PeerWatch finds it among the
// process's descriptors by the connection's two addresses, which no other open socket shares.
//
//   const PeerWatch peer(req);
//   while (!done) { wait_a_step(); if (peer.gone()) { cancel(); return; } }
#pragma once
#include <string>

namespace httplib {
struct Request;
}  // namespace httplib

namespace minfer::server {

class PeerWatch {
  public:
    explicit PeerWatch(const httplib::Request& req);
    // True once the client has closed or reset the connection. False while it is open, and when the
    // socket could not be found (the answer is then computed to the end, as before).
    bool gone() const;

  private:
    int fd_ = -1;  // owned by httplib, open until the handler returns
};

}  // namespace minfer::server
