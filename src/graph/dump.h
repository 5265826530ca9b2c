// Observability: the graph as Graphviz DOT (nodes coloured by backend, inputs/outputs as double
// circles, payloads printed) and as JSON (nodes with their layer and KV layer, edges, shapes,
// GraphParams) for tools that draw it; `minfer viz` (viz/) draws the same graphs live.
#pragma once
#include <nlohmann/json.hpp>
#include <ostream>

#include "graph/graph.h"
#include "graph/params.h"

namespace minfer {

void write_dot(std::ostream& os, const ComputeGraph& g);
void write_json(std::ostream& os, const ComputeGraph& g, const GraphParams& p);
// The document write_json writes: {params, uid, inputs, outputs, nodes, edges}.
nlohmann::json graph_json(const ComputeGraph& g, const GraphParams& p);

}  // namespace minfer
