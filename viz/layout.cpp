#include "viz/layout.h"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <memory>
#include <mutex>

#include "util/error.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MINFER_VIZ_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define MINFER_VIZ_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MINFER_VIZ_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define MINFER_VIZ_TSAN 1
#endif

#ifdef MINFER_VIZ_ASAN
// Graphviz and the fontconfig it measures text with keep allocations they never free (per-process
// caches, and a little of every layout): LeakSanitizer reports them as the libraries', not as ours.
extern "C" const char* __lsan_default_suppressions() {
    return "leak:libgvc.so\nleak:libfontconfig.so\n";
}
#endif

#ifdef MINFER_VIZ_TSAN
// Pango (Graphviz's text measurer) loads fontconfig on a thread of its own and hands it over through
// GLib's futex-based locks, which ThreadSanitizer cannot see: races inside those libraries are theirs.
extern "C" const char* __tsan_default_suppressions() {
    return "race:libfontconfig.so\nrace:libglib-2.0.so\nrace:libpango\nrace:libgvc.so\n";
}
#endif

namespace minfer::viz {

namespace {

std::mutex& layout_mutex() {
    static std::mutex m;
    return m;
}

// One context for the process: it loads the layout and render plugins from Graphviz's configuration.
GVC_t* context() {
    static GVC_t* const gvc = gvContext();
    if (!gvc) throw Error("graphviz: cannot create a context");
    return gvc;
}

std::string& last_message() {
    static std::string m;
    return m;
}

int keep_message(char* text) {
    last_message() += text;
    while (!last_message().empty() && last_message().back() == '\n') last_message().pop_back();
    return 0;
}

struct GraphCloser {
    void operator()(Agraph_t* g) const { agclose(g); }
};

}  // namespace

std::string dot_to_svg(const std::string& dot) {
    std::lock_guard lock(layout_mutex());
    GVC_t* gvc = context();
    last_message().clear();
    agseterrf(keep_message);  // Graphviz's messages go into the Error, not to stderr
    const std::unique_ptr<Agraph_t, GraphCloser> g(agmemread(dot.c_str()));
    if (!g) throw Error("graphviz: cannot parse the graph's DOT text: " + last_message());
    if (gvLayout(gvc, g.get(), "dot") != 0) throw Error("graphviz: the dot layout failed");
    char* data = nullptr;
    unsigned int len = 0;
    const int rc = gvRenderData(gvc, g.get(), "svg", &data, &len);
    std::string svg = rc == 0 && data ? std::string(data, len) : std::string();
    if (data) gvFreeRenderData(data);
    gvFreeLayout(gvc, g.get());
    if (rc != 0 || svg.empty())
        throw Error("graphviz: no SVG renderer (is the Graphviz plugin configuration installed? `dot -c`)");
    const size_t start = svg.find("<svg");
    return start == std::string::npos ? svg : svg.substr(start);
}

}  // namespace minfer::viz
