#include "viz/page.h"

#include "runtime/session.h"
#include "server/http.h"
#include "util/error.h"
#include "viz/layout.h"
#include "viz/web_assets.h"

namespace minfer::viz {

using nlohmann::json;

json model_info(const Session& s, const std::string& name, BackendKind device) {
    const Hparams& hp = s.model().hp;
    const bool cuda = device == BackendKind::Cuda;
    return {
        {"model", name},
        {"arch", hp.arch},
        {"n_layer", hp.n_layer},
        {"n_embd", hp.n_embd},
        {"n_vocab", hp.n_vocab},
        {"n_ctx", s.n_ctx()},
        {"device", backend_name(device)},
        {"node_by_node", cuda},
        {"note", cuda ? "CUDA: observed steps run node by node (no CUDA-graph replay); each time includes "
                        "copying the node's output back to the host"
                      : "CPU: each time is the node's wall time, its output statistics included"}};
}

GraphSet::GraphSet(Session& s) {
    for (const GraphKind k : {GraphKind::Prefill, GraphKind::Decode}) {
        views_[int(k)] = make_view(s, k);
        docs_[int(k)] = view_json(views_[int(k)]);
        svg(k, {});
    }
}

std::string GraphSet::svg(GraphKind k, const std::set<int>& collapsed) {
    std::lock_guard lock(mu_);
    const auto key = std::make_pair(int(k), collapsed);
    if (const auto it = svgs_.find(key); it != svgs_.end()) return it->second;
    return svgs_[key] = dot_to_svg(view_dot(view(k), collapsed));
}

namespace {

// JSON inside <script type="application/json">: '<' escaped, so no "</script>" or "<!--" can appear.
std::string script_json(const json& j) {
    std::string out;
    for (const char c : server::dump(j)) {
        if (c == '<')
            out += "\\u003c";
        else
            out += c;
    }
    return out;
}

void replace_once(std::string& page, const std::string& marker, const std::string& with) {
    const size_t at = page.find(marker);
    if (at == std::string::npos) throw Error("viz page: marker " + marker + " is missing from index.html");
    page.replace(at, marker.size(), with);
}

}  // namespace

std::string render_page(const json& embedded) {
    std::string page(kIndexHtml);
    replace_once(page, "/*VIZ_CSS*/", std::string(kVizCss));
    replace_once(page, "/*VIZ_JS*/", std::string(kVizJs));
    replace_once(page, "/*VIZ_DATA*/", script_json(embedded));  // last: data is never searched
    return page;
}

std::string export_page(GraphSet& graphs, const json& info) {
    json data = {{"info", info}, {"graphs", json::object()}};
    for (const GraphKind k : {GraphKind::Prefill, GraphKind::Decode}) {
        std::set<int> all;
        for (int l = 0; l < graphs.view(k).n_layer; ++l) all.insert(l);
        data["graphs"][kind_name(k)] = {
            {"doc", graphs.doc(k)}, {"svg", graphs.svg(k, {})}, {"svg_collapsed", graphs.svg(k, all)}};
    }
    return render_page(data);
}

}  // namespace minfer::viz
