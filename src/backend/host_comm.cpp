#include "backend/host_comm.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace minfer {

class HostCommGroup::Rank final : public Communicator {
  public:
    Rank(HostCommGroup& g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return g_.ranks_; }
    void abort() override { g_.abort(); }

    void all_reduce(float* x, int64_t n) override {
        publish(x, n);
        const int64_t share = (n + size() - 1) / size();
        const int64_t b = std::min(n, r_ * share), e = std::min(n, b + share);
        for (int64_t i = b; i < e; ++i) {
            float s = g_.bufs_[0][i];
            for (int k = 1; k < size(); ++k) s += g_.bufs_[size_t(k)][i];
            g_.sum_[size_t(i)] = s;
        }
        g_.barrier();  // every share summed
        std::memcpy(x, g_.sum_.data(), size_t(n) * sizeof(float));
        g_.barrier();  // every rank has copied: sum_ and the buffers may be reused
    }

    void all_gather(const float* x, int64_t n, int64_t rows, float* out) override {
        publish(x, n * rows);
        const int64_t width = n * size();
        for (int64_t t = 0; t < rows; ++t)
            for (int k = 0; k < size(); ++k)
                std::memcpy(out + t * width + k * n, g_.bufs_[size_t(k)] + t * n, size_t(n) * sizeof(float));
        g_.barrier();  // no rank's x is read any more
    }

  private:
    void publish(const float* x, int64_t n) {
        {
            std::lock_guard lock(g_.mu_);
            if (r_ == 0 && g_.sum_.size() < size_t(n)) g_.sum_.resize(size_t(n));
            g_.bufs_[size_t(r_)] = x;
        }
        g_.barrier();  // every buffer published (and sum_ sized by rank 0)
    }
    HostCommGroup& g_;
    int r_;
};

HostCommGroup::HostCommGroup(int ranks) : ranks_(ranks), bufs_(size_t(ranks), nullptr) {
    if (ranks < 1) throw Error("a communicator group needs at least one rank");
    for (int r = 0; r < ranks; ++r) comms_.push_back(std::make_unique<Rank>(*this, r));
}

HostCommGroup::~HostCommGroup() = default;

void HostCommGroup::abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
}

void HostCommGroup::barrier() {
    std::unique_lock lock(mu_);
    if (aborted_) throw Error("tensor parallel: another rank failed, the collective was abandoned");
    if (++waiting_ == ranks_) {
        waiting_ = 0;
        ++generation_;
        cv_.notify_all();
        return;
    }
    const uint64_t gen = generation_;
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) throw Error("tensor parallel: another rank failed, the collective was abandoned");
}

}  // namespace minfer
