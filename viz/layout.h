// Graphviz, in-process (libgvc + libcgraph): DOT text laid out by `dot` and rendered as SVG. Graphviz
// is not thread-safe, so layouts are serialised. Node ids and classes of the DOT become the SVG's
// (<g id="n12" class="node backend-cpu fused">), which is how the page finds its nodes.
#pragma once
#include <string>

namespace minfer::viz {

// The <svg> element (XML prolog and doctype dropped, so it can be inlined in HTML). Throws Error when
// Graphviz cannot parse, lay out or render the graph.
std::string dot_to_svg(const std::string& dot);

}  // namespace minfer::viz
