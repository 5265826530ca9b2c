#include "util/huge_pages.h"

#include <sys/mman.h>

#include <fstream>
#include <new>
#include <string>
#include <utility>

namespace minfer {

bool huge_pages_offered() {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string modes;
    std::getline(in, modes);
    return modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
}

HugePages::HugePages(size_t bytes) : len_((bytes + kPage - 1) / kPage * kPage) {
    void* raw = mmap(nullptr, len_ + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    auto* begin = static_cast<uint8_t*>(raw);
    data_ = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(begin) + kPage - 1) & ~(kPage - 1));
    if (data_ > begin) munmap(begin, size_t(data_ - begin));  // the slack before and after the pages
    munmap(data_ + len_, size_t(begin + len_ + kPage - (data_ + len_)));
    madvise(data_, len_, MADV_HUGEPAGE);
}

HugePages::~HugePages() {
    if (data_) munmap(data_, len_);
}

HugePages::HugePages(HugePages&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), len_(std::exchange(o.len_, 0)) {}

HugePages& HugePages::operator=(HugePages&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(len_, o.len_);
    return *this;
}

void HugePages::seal() const {
    mprotect(data_, len_, PROT_READ);
}

}  // namespace minfer
