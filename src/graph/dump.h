// Observability: the graph as Graphviz DOT (nodes coloured by backend, inputs/outputs as double
// circles, payloads printed) and as JSON (nodes, edges, shapes, GraphParams) for tools that draw it.
#pragma once
#include <ostream>

#include "graph/graph.h"
#include "graph/params.h"

namespace minfer {

void write_dot(std::ostream& os, const ComputeGraph& g);
void write_json(std::ostream& os, const ComputeGraph& g, const GraphParams& p);

}  // namespace minfer
