// Collectives among the ranks of a tensor-parallel group, as a backend calls them for the graph's
// AllReduce and AllGather nodes: one Communicator per rank, each called only from its rank's thread, every
// rank calling the same collectives in the same order (each runs the same graph topology).
#pragma once
#include <cstdint>

namespace minfer {

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // x[0, n) becomes the sum of every rank's x, added in rank order ((x0 + x1) + x2 ...), so that every
    // rank holds the same bits, run after run.
    virtual void all_reduce(float* x, int64_t n) = 0;
    // out [rows][size() * n]: row t is every rank's row t of x [rows][n], rank by rank.
    virtual void all_gather(const float* x, int64_t n, int64_t rows, float* out) = 0;
    // Wakes every rank waiting in a collective, which then throws Error, as does every later collective:
    // a rank that failed mid-forward must not leave the others waiting for it.
    virtual void abort() = 0;
};

}  // namespace minfer
