// The page of `minfer viz` (viz/web/, embedded into the binary at build time) and the graphs it reads:
// both planned graphs of a session with their JSON documents and SVG layouts (the expanded one made up
// front, collapsed ones on first request and kept). render_page inlines the CSS, the JS and, for an
// export, every document and SVG the page needs, so the file works with no server and no network.
#pragma once
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "graph/graph.h"
#include "viz/graph_view.h"

namespace minfer::viz {

// {model, arch, n_layer, n_embd, n_vocab, n_ctx, device, node_by_node, note}: what the page's header
// shows. On CUDA observed steps run node by node (no graph replay), and `note` says so.
nlohmann::json model_info(const Session& s, const std::string& name, BackendKind device);

class GraphSet {
  public:
    explicit GraphSet(Session& s);  // plans both graphs and lays them out expanded
    const GraphView& view(GraphKind k) const { return views_[int(k)]; }
    const nlohmann::json& doc(GraphKind k) const { return docs_[int(k)]; }
    // The SVG with these layers collapsed; thread-safe, each layout made once.
    std::string svg(GraphKind k, const std::set<int>& collapsed);

  private:
    GraphView views_[2];
    nlohmann::json docs_[2];
    std::mutex mu_;
    std::map<std::pair<int, std::set<int>>, std::string> svgs_;
};

// The page; `embedded` is null for the live page (which fetches /api/...), else the export's data:
// {info, graphs: {prefill: {doc, svg, svg_collapsed}, decode: {...}}}.
std::string render_page(const nlohmann::json& embedded);
// One self-contained HTML file: both graphs, expanded and with every layer collapsed.
std::string export_page(GraphSet& graphs, const nlohmann::json& info);

}  // namespace minfer::viz
