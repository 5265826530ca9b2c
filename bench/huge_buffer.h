// A zero-filled buffer on 2 MiB pages where the kernel offers transparent huge pages, as the CPU
// backend's weights are (GgufFile, Residency::huge_pages): benchmarks that stream memory read it the way
// decode does. Throws std::bad_alloc when the memory cannot be had.
#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace minfer::bench {

class HugeBuffer {
  public:
    explicit HugeBuffer(size_t bytes) : len_(bytes + kHuge) {
        raw_ = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw_ == MAP_FAILED) throw std::bad_alloc();
        data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw_) + kHuge - 1) & ~(kHuge - 1));
        madvise(data_, bytes, MADV_HUGEPAGE);
    }
    ~HugeBuffer() { munmap(raw_, len_); }
    HugeBuffer(const HugeBuffer&) = delete;
    HugeBuffer& operator=(const HugeBuffer&) = delete;

    template <class T>
    T* as() const {
        return reinterpret_cast<T*>(data_);
    }

  private:
    static constexpr size_t kHuge = size_t(2) << 20;
    size_t len_;
    void* raw_;
    uint8_t* data_;
};

}  // namespace minfer::bench
