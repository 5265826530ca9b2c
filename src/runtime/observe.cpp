#include "runtime/observe.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "util/error.h"

namespace minfer {

namespace fs = std::filesystem;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "graph dumps are written as raw little-endian f32");

namespace {
// The node's output as f32, or nullptr when it has none (KV stores) or holds integers.
const float* f32_output(const CNode& n, const float* data) {
    return n.dtype == DType::F32 ? data : nullptr;
}

const char* env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}
}  // namespace

BufferStats buffer_stats(const float* data, int64_t n) {
    BufferStats s;
    s.min = std::numeric_limits<float>::infinity();
    s.max = -std::numeric_limits<float>::infinity();
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        const float x = data[i];
        if (std::isnan(x)) {
            ++s.nan;
            continue;
        }
        s.min = std::min(s.min, x);
        s.max = std::max(s.max, x);
        sum += x;
    }
    const int64_t counted = n - s.nan;
    if (counted == 0) {
        s.min = s.max = std::numeric_limits<float>::quiet_NaN();
        s.mean = std::numeric_limits<double>::quiet_NaN();
    } else {
        s.mean = sum / double(counted);
    }
    return s;
}

TraceWriter::TraceWriter(const std::string& path) : path_(path), out_(path, std::ios::trunc) {
    if (!out_) throw Error("MINFER_TRACE: cannot open " + path + " for writing");
}

void TraceWriter::on_node(const CNode& n, const float* data, double us) {
    json line = {{"step", step_},    {"node", n.id},
                 {"name", n.name},   {"op", op_name(n.op)},
                 {"shape", n.shape}, {"backend", n.backend ? backend_name(*n.backend) : "none"},
                 {"us", us}};
    if (const float* f = f32_output(n, data)) {
        const BufferStats s = buffer_stats(f, n.n_elements());
        line["min"] = s.min;
        line["max"] = s.max;
        line["mean"] = s.mean;
        line["nan"] = s.nan;
    }
    out_ << line.dump() << '\n';
}

void TraceWriter::end_step() {
    out_.flush();
    if (!out_) throw Error("MINFER_TRACE: write to " + path_ + " failed");
}

GraphDumper::GraphDumper(const std::string& dir) : dir_(dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
        throw Error("MINFER_GRAPH_DUMP: cannot create directory " + dir +
                    (ec ? ": " + ec.message() : ": a file of that name exists"));
}

void GraphDumper::on_node(const CNode& n, const float* data, double us) {
    const float* f = f32_output(n, data);
    if (!f) return;
    const std::string file = "step" + std::to_string(step_) + "_node" + std::to_string(n.id) + ".f32";
    const std::string path = (fs::path(dir_) / file).string();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(f), std::streamsize(n.n_elements() * int64_t(sizeof(float))));
    if (!out) throw Error("MINFER_GRAPH_DUMP: cannot write " + path);
    index_.push_back({{"step", step_},
                      {"node", n.id},
                      {"name", n.name},
                      {"op", op_name(n.op)},
                      {"shape", n.shape},
                      {"file", file}});
}

void GraphDumper::end_step() {
    const fs::path path = fs::path(dir_) / "index.json";
    const fs::path tmp = fs::path(dir_) / "index.json.tmp";
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << index_.dump(1) << '\n';
        if (!out) throw Error("MINFER_GRAPH_DUMP: cannot write " + tmp.string());
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);  // readers never see a half-written index
    if (ec) throw Error("MINFER_GRAPH_DUMP: cannot write " + path.string() + ": " + ec.message());
}

void ObserverSet::begin_step(int64_t step) {
    for (auto& o : list_) o->begin_step(step);
}

void ObserverSet::on_node(const CNode& n, const float* data, double us) {
    for (auto& o : list_) o->on_node(n, data, us);
}

void ObserverSet::end_step() {
    for (auto& o : list_) o->end_step();
}

std::unique_ptr<StepObserver> observers_from_env() {
    auto set = std::make_unique<ObserverSet>();
    if (const std::string trace = env_or_empty("MINFER_TRACE"); !trace.empty())
        set->add(std::make_unique<TraceWriter>(trace));
    if (const std::string dir = env_or_empty("MINFER_GRAPH_DUMP"); !dir.empty())
        set->add(std::make_unique<GraphDumper>(dir));
    if (set->empty()) return nullptr;
    return set;
}

}  // namespace minfer
