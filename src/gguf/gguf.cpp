#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <new>

#include "util/error.h"

namespace minfer {

int gguf_scalar_width(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8:
        case GgufValueType::I8:
        case GgufValueType::BOOL:
            return 1;
        case GgufValueType::U16:
        case GgufValueType::I16:
            return 2;
        case GgufValueType::U32:
        case GgufValueType::I32:
        case GgufValueType::F32:
            return 4;
        case GgufValueType::U64:
        case GgufValueType::I64:
        case GgufValueType::F64:
            return 8;
        default:
            return 0;
    }
}

namespace {

constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;
constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;
// Array elements in all metadata together. Real vocabularies need a few million; the cap keeps a corrupt
// count (each element costs a GgufValue, far more than its bytes on disk) from exhausting memory.
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 24;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one dim, type, offset
constexpr size_t kPageSize = 4096;
constexpr size_t kProgressStep = size_t(64) << 20;
constexpr uint64_t kInt64Max = uint64_t(std::numeric_limits<int64_t>::max());

// Reports a long load's progress every kProgressStep bytes, then once at its end.
struct ProgressTicker {
    LoadProgress progress;
    size_t total;
    size_t next = kProgressStep;
    void at(size_t done) {
        if (!progress.fn || done < next) return;
        progress.fn(done, total, progress.user);
        next += kProgressStep;
    }
    void finish() const {
        if (progress.fn) progress.fn(total, total, progress.user);
    }
};

// Smallest on-disk size of one value of type `t` (exact for scalars); 0 for numbers the spec lacks.
uint64_t min_value_bytes(uint32_t t) {
    if (const int w = gguf_scalar_width(GgufValueType(t))) return uint64_t(w);
    if (GgufValueType(t) == GgufValueType::STRING) return 8;  // a string is at least its length field
    if (GgufValueType(t) == GgufValueType::ARRAY) return 12;  // element type + count
    return 0;
}

bool is_unsigned(GgufValueType t) {
    return t == GgufValueType::U8 || t == GgufValueType::U16 || t == GgufValueType::U32 ||
           t == GgufValueType::U64;
}
bool is_signed(GgufValueType t) {
    return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 ||
           t == GgufValueType::I64;
}
bool is_integer(GgufValueType t) {
    return is_unsigned(t) || is_signed(t);
}
bool is_float(GgufValueType t) {
    return t == GgufValueType::F32 || t == GgufValueType::F64;
}

constexpr char kHexDigits[] = "0123456789abcdef";

void append_hex(std::string& out, unsigned char c) {
    out += kHexDigits[c >> 4];
    out += kHexDigits[c & 15];
}

// Quotes a name for an error message, escaping bytes that would garble a terminal and capping the length.
std::string quoted(std::string_view s) {
    constexpr size_t kMaxShown = 96;
    std::string out = "'";
    for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f) {
            out += char(c);
        } else {
            out += "\\x";
            append_hex(out, c);
        }
    }
    if (s.size() > kMaxShown) out += "...";
    return out + "'";
}

uint64_t saturating_add(uint64_t a, uint64_t b) {
    return b > std::numeric_limits<uint64_t>::max() - a ? std::numeric_limits<uint64_t>::max() : a + b;
}

}  // namespace

std::string gguf_value_type_name(GgufValueType t) {
    static const char* const kNames[] = {"U8",   "I8",     "U16",   "I16", "U32", "I32", "F32",
                                         "BOOL", "STRING", "ARRAY", "U64", "I64", "F64"};
    const uint32_t n = uint32_t(t);
    if (n < sizeof(kNames) / sizeof(kNames[0])) return kNames[n];
    return "type#" + std::to_string(n);
}

int64_t GgufTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

// Walks the mapped file front to back. `what_` names the field being read, for truncation messages.
class GgufParser {
  public:
    explicit GgufParser(GgufFile& file) : f_(file) {}

    void parse() {
        read_header();
        read_metadata();
        read_alignment();
        read_tensor_infos();
        place_tensors();
    }

  private:
    GgufFile& f_;
    uint64_t pos_ = 0;
    uint64_t n_tensors_ = 0;
    uint64_t n_kv_ = 0;
    uint64_t elements_left_ = kMaxArrayElements;
    std::string what_;

    [[noreturn]] void fail(const std::string& msg) const { throw Error(f_.path_ + ": " + msg); }

    uint64_t remaining() const { return f_.size_ - pos_; }

    // Every bounds failure reads "truncated at byte <file size> while reading <field><detail>".
    [[noreturn]] void truncated(const std::string& detail) const {
        fail("truncated at byte " + std::to_string(f_.size_) + " while reading " + what_ + detail);
    }

    const uint8_t* take(uint64_t n) {
        if (n > remaining())
            truncated(" (" + std::to_string(n) + " bytes at offset " + std::to_string(pos_) + ")");
        const uint8_t* p = f_.base_ + pos_;
        pos_ += n;
        return p;
    }

    template <class T>
    T read() {
        T v;
        std::memcpy(&v, take(sizeof(T)), sizeof(T));
        return v;
    }

    std::string read_string() {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>();
        if (len > remaining())
            truncated(": string length " + std::to_string(len) + " at offset " + std::to_string(at) +
                      " exceeds the " + std::to_string(remaining()) + " bytes left");
        const char* p = reinterpret_cast<const char*>(take(len));
        return std::string(p, len);
    }

    GgufValue read_value(GgufValueType t, int depth) {
        switch (t) {
            case GgufValueType::U8:
                return {t, uint64_t(read<uint8_t>())};
            case GgufValueType::I8:
                return {t, int64_t(read<int8_t>())};
            case GgufValueType::U16:
                return {t, uint64_t(read<uint16_t>())};
            case GgufValueType::I16:
                return {t, int64_t(read<int16_t>())};
            case GgufValueType::U32:
                return {t, uint64_t(read<uint32_t>())};
            case GgufValueType::I32:
                return {t, int64_t(read<int32_t>())};
            case GgufValueType::U64:
                return {t, read<uint64_t>()};
            case GgufValueType::I64:
                return {t, read<int64_t>()};
            case GgufValueType::F32:
                return {t, double(read<float>())};
            case GgufValueType::F64:
                return {t, read<double>()};
            case GgufValueType::BOOL:
                return {t, read<uint8_t>() != 0};
            case GgufValueType::STRING:
                return {t, read_string()};
            case GgufValueType::ARRAY:
                return {t, read_array(depth + 1)};
        }
        fail("unknown value type " + std::to_string(uint32_t(t)) + " in " + what_);
    }

    std::shared_ptr<GgufArray> read_array(int depth) {
        if (depth > kMaxArrayDepth)
            fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels in " + what_);
        const uint32_t elem = read<uint32_t>();
        const uint64_t elem_bytes = min_value_bytes(elem);
        if (elem_bytes == 0) fail("unknown array element type " + std::to_string(elem) + " in " + what_);
        const uint64_t at = pos_;
        const uint64_t count = read<uint64_t>();
        if (count > remaining() / elem_bytes)
            truncated(": array count " + std::to_string(count) + " at offset " + std::to_string(at) + " of " +
                      gguf_value_type_name(GgufValueType(elem)) + " elements exceeds the " +
                      std::to_string(remaining()) + " bytes left");
        if (count > elements_left_)
            fail("array count " + std::to_string(count) + " in " + what_ + " exceeds the limit of " +
                 std::to_string(kMaxArrayElements) + " array elements per file");
        elements_left_ -= count;
        auto arr = std::make_shared<GgufArray>();
        arr->elem_type = GgufValueType(elem);
        arr->items.reserve(count);
        for (uint64_t i = 0; i < count; ++i) arr->items.push_back(read_value(arr->elem_type, depth));
        return arr;
    }

    void read_header() {
        what_ = "the magic";
        const uint8_t* magic = take(4);
        if (std::memcmp(magic, "GGUF", 4) != 0) {
            std::string shown;
            for (int i = 0; i < 4; ++i) append_hex(shown, magic[i]);
            fail("not a GGUF file (bad magic 0x" + shown + ", expected 0x47475546 \"GGUF\")");
        }
        what_ = "the version";
        const uint32_t version = read<uint32_t>();
        if (version != 2 && version != 3) {
            const bool swapped = (version & 0x00ffffffu) == 0 && (version >> 24) >= 1 && (version >> 24) <= 3;
            fail("unsupported GGUF version " + std::to_string(version) +
                 (swapped ? " (a big-endian file? only little-endian is supported)" : " (expected 2 or 3)"));
        }
        f_.version_ = version;
        what_ = "the tensor count";
        n_tensors_ = read<uint64_t>();
        what_ = "the metadata entry count";
        n_kv_ = read<uint64_t>();
    }

    void read_metadata() {
        for (uint64_t i = 0; i < n_kv_; ++i) {
            what_ = "the key of metadata entry " + std::to_string(i) + " of " + std::to_string(n_kv_);
            std::string key = read_string();
            const std::string q = quoted(key);
            if (f_.kv_.count(key)) fail("duplicate metadata key " + q);
            what_ = "the value type of metadata key " + q;
            const uint32_t type = read<uint32_t>();
            if (min_value_bytes(type) == 0)
                fail("unknown value type " + std::to_string(type) + " for metadata key " + q);
            what_ = "the value of metadata key " + q;
            GgufValue value = read_value(GgufValueType(type), 0);
            f_.kv_.emplace(std::move(key), std::move(value));
        }
    }

    void read_alignment() {
        const GgufValue* a = f_.find("general.alignment");
        if (!a) return;
        if (!is_unsigned(a->type))
            fail("general.alignment has type " + gguf_value_type_name(a->type) +
                 ", expected an unsigned integer");
        const uint64_t v = std::get<uint64_t>(a->v);
        if (v == 0 || (v & (v - 1)) != 0 || v > kMaxAlignment)
            fail("general.alignment must be a power of two no larger than 2^30 (got " + std::to_string(v) +
                 ")");
        f_.alignment_ = v;
    }

    void read_tensor_infos() {
        // Each loop step consumes file bytes, so a garbage count fails at the first field past the end; it
        // must not size an allocation, though.
        f_.tensors_.reserve(std::min(n_tensors_, remaining() / kMinTensorInfoBytes));
        for (uint64_t i = 0; i < n_tensors_; ++i) {
            GgufTensor t = read_tensor_info(i);
            if (!f_.tensor_index_.emplace(t.name, f_.tensors_.size()).second)
                fail("duplicate tensor name " + quoted(t.name));
            f_.tensors_.push_back(std::move(t));
        }
    }

    GgufTensor read_tensor_info(uint64_t index) {
        GgufTensor t;
        what_ = "the name of tensor info " + std::to_string(index) + " of " + std::to_string(n_tensors_);
        t.name = read_string();
        const std::string q = quoted(t.name);
        what_ = "the tensor info of " + q;
        const uint32_t n_dims = read<uint32_t>();
        if (n_dims == 0 || n_dims > kMaxDims)
            fail("tensor " + q + " has " + std::to_string(n_dims) + " dimensions (expected 1 to 4)");
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim = read<uint64_t>();
            if (dim > kInt64Max)
                fail("tensor " + q + " has a negative dimension (" + std::to_string(dim) + ")");
            t.dims.push_back(int64_t(dim));
        }
        const uint32_t type = read<uint32_t>();
        t.offset = read<uint64_t>();
        const GgmlTypeLayout layout = ggml_type_layout(type);
        if (!layout.name) fail("unknown tensor type " + std::to_string(type) + " for tensor " + q);
        t.type = GgmlType(type);
        t.n_bytes = tensor_bytes(t, layout, q);
        return t;
    }

    uint64_t tensor_bytes(const GgufTensor& t, const GgmlTypeLayout& layout, const std::string& q) const {
        uint64_t n = 1;
        for (int64_t d : t.dims) {
            if (d != 0 && n > kInt64Max / uint64_t(d))
                fail("element count of tensor " + q + " overflows int64");
            n *= uint64_t(d);
        }
        if (t.dims[0] % layout.block_size != 0)
            fail("tensor " + q + " of type " + layout.name + " has first dimension " +
                 std::to_string(t.dims[0]) + ", not a multiple of the block size " +
                 std::to_string(layout.block_size));
        const uint64_t blocks = n / uint64_t(layout.block_size);
        if (blocks > std::numeric_limits<uint64_t>::max() / layout.type_size)
            fail("byte size of tensor " + q + " overflows");
        return blocks * layout.type_size;
    }

    void place_tensors() {
        const uint64_t a = f_.alignment_;
        f_.data_offset_ = pos_ + (a - pos_ % a) % a;
        for (GgufTensor& t : f_.tensors_) {
            const std::string q = quoted(t.name);
            if (t.offset % a != 0)
                fail("tensor " + q + " offset " + std::to_string(t.offset) +
                     " is not a multiple of the alignment " + std::to_string(a));
            const uint64_t begin = saturating_add(f_.data_offset_, t.offset);
            const uint64_t end = saturating_add(begin, t.n_bytes);
            if (end > f_.size_)
                fail("tensor " + q + " data [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") extends past end of file (size " + std::to_string(f_.size_) + ")");
            t.data = f_.base_ + begin;
        }
        check_overlaps();
    }

    void check_overlaps() const {
        std::vector<const GgufTensor*> order;
        order.reserve(f_.tensors_.size());
        for (const GgufTensor& t : f_.tensors_) order.push_back(&t);
        std::sort(order.begin(), order.end(),
                  [](const GgufTensor* x, const GgufTensor* y) { return x->offset < y->offset; });
        for (size_t i = 1; i < order.size(); ++i) {
            const GgufTensor& prev = *order[i - 1];
            if (prev.offset + prev.n_bytes > order[i]->offset)
                fail("tensors " + quoted(prev.name) + " and " + quoted(order[i]->name) +
                     " overlap in the data section");
        }
    }
};

namespace {

struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
};

// Whether a file of `size` bytes goes to huge pages: the kernel offers them, and the file takes at most
// half the machine's memory (a larger one stays mapped, so the page cache can still evict it).
bool huge_pages_for(size_t size) {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    return huge_pages_offered() && pages > 0 && page > 0 && size <= size_t(pages) * size_t(page) / 2;
}

}  // namespace

namespace {

std::string file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

}  // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path, Residency where, LoadProgress progress) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before the type check.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
    const FdCloser closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw Error(path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        throw Error(path + ": not a regular file (" + file_kind(st.st_mode) +
                    "); a model must be a GGUF file");
    f->size_ = size_t(st.st_size);
    if (f->size_ > 0) {
        if (where == Residency::huge_pages && huge_pages_for(f->size_))
            f->read_into_huge_pages(fd, progress);
        else
            f->map(fd);
    }
    GgufParser(*f).parse();
    return f;
}

std::unique_ptr<GgufFile> GgufFile::from_tensors(std::string name, std::vector<GgufTensor> tensors,
                                                 std::vector<std::vector<uint8_t>> owned) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = std::move(name);
    f->owned_ = std::move(owned);  // a move keeps the bytes where the tensors point
    f->tensors_ = std::move(tensors);
    for (size_t i = 0; i < f->tensors_.size(); ++i)
        if (!f->tensor_index_.emplace(f->tensors_[i].name, i).second)
            throw Error(f->path_ + ": duplicate tensor " + quoted(f->tensors_[i].name));
    return f;
}

void GgufFile::map(int fd) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) throw Error(path_ + ": cannot map file: " + std::strerror(errno));
    base_ = static_cast<const uint8_t*>(p);
}

// Filled by pread: a decode step streams every weight once, and 2 MiB pages spare it a TLB miss every
// 4 KiB. Nothing of the file stays mapped, so the process holds one copy, as when mapped.
void GgufFile::read_into_huge_pages(int fd, LoadProgress progress) {
    try {
        copy_ = HugePages(size_);
    } catch (const std::bad_alloc&) {
        throw Error(path_ + ": cannot allocate " + std::to_string(size_ >> 20) + " MiB");
    }
    uint8_t* dst = copy_.data();
    ProgressTicker ticker{progress, size_};
    for (size_t done = 0; done < size_;) {
        const ssize_t got = ::pread(fd, dst + done, std::min(size_ - done, kProgressStep), off_t(done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) throw Error(path_ + ": cannot read: " + std::strerror(errno));
        if (got == 0) throw Error(path_ + ": file shrank while being read");
        done += size_t(got);
        ticker.at(done);
    }
    ticker.finish();
    copy_.seal();
    base_ = dst;
}

Residency GgufFile::residency() const {
    return copy_.data() ? Residency::huge_pages : Residency::mapped;
}

GgufFile::~GgufFile() {
    if (base_ && !copy_.data()) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
    const auto it = kv_.find(std::string(key));
    return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
    if (const GgufTensor* t = find_tensor(name)) return *t;
    throw Error(path_ + ": missing tensor " + quoted(name));
}

void GgufFile::prefetch(LoadProgress progress) const {
    const size_t total = data_offset_ < size_ ? size_ - data_offset_ : 0;
    const volatile uint8_t* p = base_ + (total ? data_offset_ : 0);
    uint8_t sink = 0;
    ProgressTicker ticker{progress, total};
    for (size_t off = 0; off < total; off += kPageSize) {
        sink ^= p[off];
        ticker.at(off);
    }
    ticker.finish();
    static_cast<void>(sink);
}

// ---- typed getters ----

namespace {

[[noreturn]] void wrong_type(const std::string& path, std::string_view key, GgufValueType got,
                             const char* want) {
    throw Error(path + ": metadata key " + quoted(key) + " has type " + gguf_value_type_name(got) +
                ", expected " + want);
}

int64_t value_as_int(const std::string& path, std::string_view key, const GgufValue& v) {
    if (is_signed(v.type)) return std::get<int64_t>(v.v);
    if (!is_unsigned(v.type)) wrong_type(path, key, v.type, "an integer");
    const uint64_t u = std::get<uint64_t>(v.v);
    if (u > kInt64Max)
        throw Error(path + ": metadata key " + quoted(key) + " value " + std::to_string(u) +
                    " does not fit int64");
    return int64_t(u);
}

double value_as_float(const std::string& path, std::string_view key, const GgufValue& v) {
    if (is_float(v.type)) return std::get<double>(v.v);
    if (is_signed(v.type)) return double(std::get<int64_t>(v.v));
    if (is_unsigned(v.type)) return double(std::get<uint64_t>(v.v));
    wrong_type(path, key, v.type, "a number");
}

const GgufValue& require(const GgufFile& f, std::string_view key) {
    if (const GgufValue* v = f.find(key)) return *v;
    throw Error(f.path() + ": missing metadata key " + quoted(key));
}

const GgufArray& value_as_array(const std::string& path, std::string_view key, const GgufValue& v) {
    if (v.type != GgufValueType::ARRAY) wrong_type(path, key, v.type, "an array");
    return *std::get<std::shared_ptr<GgufArray>>(v.v);
}

}  // namespace

std::string GgufFile::get_str(std::string_view key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::STRING) wrong_type(path_, key, v.type, "STRING");
    return std::get<std::string>(v.v);
}

int64_t GgufFile::get_int(std::string_view key) const {
    return value_as_int(path_, key, require(*this, key));
}

double GgufFile::get_float(std::string_view key) const {
    return value_as_float(path_, key, require(*this, key));
}

bool GgufFile::get_bool(std::string_view key) const {
    const GgufValue& v = require(*this, key);
    if (v.type != GgufValueType::BOOL) wrong_type(path_, key, v.type, "BOOL");
    return std::get<bool>(v.v);
}

std::vector<std::string> GgufFile::get_str_array(std::string_view key) const {
    const GgufValue& v = require(*this, key);
    const GgufArray& arr = value_as_array(path_, key, v);
    if (arr.elem_type != GgufValueType::STRING)
        throw Error(path_ + ": metadata key " + quoted(key) + " is an array of " +
                    gguf_value_type_name(arr.elem_type) + ", expected an array of STRING");
    std::vector<std::string> out;
    out.reserve(arr.items.size());
    for (const GgufValue& item : arr.items) out.push_back(std::get<std::string>(item.v));
    return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
    const GgufValue& v = require(*this, key);
    const GgufArray& arr = value_as_array(path_, key, v);
    if (!is_integer(arr.elem_type))
        throw Error(path_ + ": metadata key " + quoted(key) + " is an array of " +
                    gguf_value_type_name(arr.elem_type) + ", expected an array of integers");
    std::vector<int64_t> out;
    out.reserve(arr.items.size());
    for (const GgufValue& item : arr.items) out.push_back(value_as_int(path_, key, item));
    return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
    const GgufValue& v = require(*this, key);
    const GgufArray& arr = value_as_array(path_, key, v);
    if (!is_float(arr.elem_type) && !is_integer(arr.elem_type))
        throw Error(path_ + ": metadata key " + quoted(key) + " is an array of " +
                    gguf_value_type_name(arr.elem_type) + ", expected an array of numbers");
    std::vector<float> out;
    out.reserve(arr.items.size());
    for (const GgufValue& item : arr.items) out.push_back(float(value_as_float(path_, key, item)));
    return out;
}

std::string GgufFile::get_str_or(std::string_view key, const std::string& dflt) const {
    return has(key) ? get_str(key) : dflt;
}

int64_t GgufFile::get_int_or(std::string_view key, int64_t dflt) const {
    return has(key) ? get_int(key) : dflt;
}

double GgufFile::get_float_or(std::string_view key, double dflt) const {
    return has(key) ? get_float(key) : dflt;
}

}  // namespace minfer
