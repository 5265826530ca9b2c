// Anonymous memory on a 2 MiB boundary, advised MADV_HUGEPAGE: the kernel backs it with transparent
// huge pages where it offers them (huge_pages_offered()), so a pass over it takes a TLB miss per 2 MiB
// instead of per 4 KiB. Holds the CPU backend's weights (GgufFile, Residency::huge_pages) and the
// buffers of the benchmarks that stream memory the way decode does. Zero-filled; unmapped when dropped.
#pragma once
#include <cstddef>
#include <cstdint>

namespace minfer {

// Whether madvise(MADV_HUGEPAGE) memory gets transparent huge pages on this kernel.
bool huge_pages_offered();

class HugePages {
  public:
    static constexpr size_t kPage = size_t(2) << 20;

    HugePages() = default;
    // At least `bytes`, in whole 2 MiB pages. Throws std::bad_alloc when the memory cannot be mapped.
    explicit HugePages(size_t bytes);
    ~HugePages();
    HugePages(HugePages&& o) noexcept;
    HugePages& operator=(HugePages&& o) noexcept;

    uint8_t* data() const { return data_; }
    size_t size() const { return len_; }
    void seal() const;  // read-only from now on (weights once loaded)

  private:
    uint8_t* data_ = nullptr;
    size_t len_ = 0;
};

}  // namespace minfer
