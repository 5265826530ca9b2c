// The minfer viz page. Live (served by `minfer viz`): graph documents and SVGs from /api/graph and
// /api/svg, generations through POST /api/generate, per-step node data from the SSE stream /api/events,
// histograms from /api/hist. Exported (`minfer viz --export`): the same documents and SVGs embedded in
// #viz-data, no server. viz/README.md documents every format read here.
"use strict";
(function () {
  const embedded = JSON.parse(document.getElementById("viz-data").textContent);
  const live = embedded === null;
  const $ = (id) => document.getElementById(id);
  const state = {
    graph: "prefill", docs: {}, info: null, collapsed: { prefill: new Set(), decode: new Set() },
    collapseAll: false, selected: null, stats: { prefill: {}, decode: {} }, lastStep: {},
    zoom: 0, natural: null, colorMode: "backend", userPickedColor: false, busy: false, histTimer: null,
  };

  async function getJSON(url) {
    const r = await fetch(url);
    const body = await r.json();
    if (!r.ok) throw new Error(body.error ? body.error.message : "HTTP " + r.status);
    return body;
  }

  async function graphDoc(kind) {
    if (!state.docs[kind]) state.docs[kind] = live ? await getJSON("/api/graph?graph=" + kind) : embedded.graphs[kind].doc;
    return state.docs[kind];
  }

  function collapsedLayers(doc) {
    if (state.collapseAll) return doc.layers.map((l) => l.layer);
    return [...state.collapsed[doc.graph]].sort((a, b) => a - b);
  }

  async function svgText(doc) {
    if (!live) return state.collapseAll ? embedded.graphs[doc.graph].svg_collapsed : embedded.graphs[doc.graph].svg;
    const layers = collapsedLayers(doc);
    const r = await fetch("/api/svg?graph=" + doc.graph + (layers.length ? "&collapse=" + layers.join(",") : ""));
    if (!r.ok) throw new Error("layout failed: HTTP " + r.status);
    return r.text();
  }

  // ---- drawing ------------------------------------------------------------------------------------

  async function showGraph() {
    const kind = state.graph;
    const doc = await graphDoc(kind);
    const text = await svgText(doc);
    if (kind !== state.graph) return;  // another tab was picked meanwhile
    const box = $("graph-box");
    box.innerHTML = text;
    const svg = box.querySelector("svg");
    const vb = svg.viewBox.baseVal;
    state.natural = { w: vb.width, h: vb.height };
    svg.removeAttribute("width");
    svg.removeAttribute("height");
    if (!state.zoom) state.zoom = Math.min(1, (box.clientWidth - 8) / state.natural.w) || 1;
    applyZoom();
    for (const t of svg.querySelectorAll("title")) t.remove();  // our tooltip instead of the browser's
    for (const g of svg.querySelectorAll("g.node")) wireNode(g, doc);
    for (const g of svg.querySelectorAll("g.cluster")) wireCluster(g);
    const drawn = svg.querySelectorAll("g.node").length;
    $("graph-count").textContent = kind + ": " + doc.n_nodes + " nodes, " + doc.n_layer + " layers, " +
      drawn + " drawn, params n_tokens " + doc.params.n_tokens;
    document.body.dataset.graph = kind;
    document.body.dataset.nodes = String(doc.n_nodes);
    renderLayers(doc);
    recolor();
    markSelected();
  }

  function applyZoom() {
    const svg = $("graph-box").querySelector("svg");
    if (!svg || !state.natural) return;
    svg.style.width = state.natural.w * state.zoom + "px";
    svg.style.height = state.natural.h * state.zoom + "px";
  }

  function nodeOf(g, doc) {
    const m = /^n(\d+)$/.exec(g.id);
    return m ? doc.nodes[Number(m[1])] : null;
  }

  function wireNode(g, doc) {
    const n = nodeOf(g, doc);
    g.addEventListener("mousemove", (e) => showTooltip(e, n ? tooltipText(n) : g.textContent.trim()));
    g.addEventListener("mouseleave", () => ($("tooltip").hidden = true));
    g.addEventListener("click", (e) => {
      e.stopPropagation();
      if (n) return select(n.id);
      const layer = /^L(\d+)$/.exec(g.id);  // a collapsed layer: expand it
      if (layer) toggleLayer(Number(layer[1]), false);
    });
    for (const shape of g.querySelectorAll("polygon, ellipse, path")) {
      if (shape.getAttribute("fill") && shape.getAttribute("fill") !== "none") shape.dataset.fill = shape.getAttribute("fill");
    }
  }

  function wireCluster(g) {
    const layer = /^L(\d+)$/.exec(g.id);
    if (!layer) return;
    const label = g.querySelector("text");
    if (label) {
      label.style.cursor = "pointer";
      label.addEventListener("click", () => toggleLayer(Number(layer[1]), true));
    }
  }

  function showTooltip(e, text) {
    const tip = $("tooltip"), pane = $("graph-pane").getBoundingClientRect();
    tip.textContent = text;
    tip.hidden = false;
    tip.style.left = Math.min(e.clientX - pane.left + 14, pane.width - 300) + "px";
    tip.style.top = e.clientY - pane.top + 14 + "px";
  }

  function shapeText(s) { return "[" + s[0] + ", " + s[1] + "]"; }

  function tooltipText(n) {
    const st = state.stats[state.graph][n.id];
    return n.name + "  (" + n.op + ")\n" + n.payload + "\nshape " + shapeText(n.shape) + " " + n.dtype +
      "  backend " + (n.backend || "none") + (st ? "\n" + st.us.toFixed(1) + " us" : "");
  }

  // Fill colours: the backend's (from the layout) or the heat of the node's time in the last step.
  function recolor() {
    const box = $("graph-box"), doc = state.docs[state.graph];
    if (!doc) return;
    const stats = state.stats[state.graph];
    let maxUs = 0;
    for (const id in stats) maxUs = Math.max(maxUs, stats[id].us);
    for (const g of box.querySelectorAll("g.node")) {
      const n = nodeOf(g, doc), st = n ? stats[n.id] : null;
      for (const shape of g.querySelectorAll("[data-fill]")) {
        if (state.colorMode !== "time") shape.setAttribute("fill", shape.dataset.fill);
        else shape.setAttribute("fill", st ? heat(st.us, maxUs) : "#eeeeee");
      }
    }
  }

  function heat(us, maxUs) {
    const t = maxUs > 0 ? Math.log1p(us) / Math.log1p(maxUs) : 0;  // 0..1, log scale
    const r = 255, gr = Math.round(255 - 200 * t), b = Math.round(230 * (1 - t) * (1 - t));
    return "rgb(" + r + "," + gr + "," + b + ")";
  }

  function renderLayers(doc) {
    const box = $("layers");
    box.innerHTML = "";
    for (const l of doc.layers) {
      const label = document.createElement("label");
      const cb = document.createElement("input");
      cb.type = "checkbox";
      cb.checked = state.collapseAll || state.collapsed[doc.graph].has(l.layer);
      cb.disabled = !live;
      cb.addEventListener("change", () => toggleLayer(l.layer, cb.checked));
      label.append(cb, " L" + l.layer + " (" + l.nodes.length + ")");
      box.append(label);
    }
    if (!live) box.append(document.createTextNode(" (exported page: collapse all layers or none)"));
  }

  function toggleLayer(layer, collapse) {
    if (!live) return;
    const set = state.collapsed[state.graph];
    if (collapse) set.add(layer); else set.delete(layer);
    if (!collapse) state.collapseAll = false, ($("collapse-all").checked = false);
    showGraph().catch(fail);
  }

  // ---- the selected node --------------------------------------------------------------------------

  function select(id) {
    state.selected = id;
    markSelected();
    renderDetails();
    renderStats();
    refreshHist();
  }

  function markSelected() {
    for (const g of $("graph-box").querySelectorAll("g.node.selected")) g.classList.remove("selected");
    if (state.selected === null) return;
    const g = document.getElementById("n" + state.selected);
    if (g) g.classList.add("selected");
  }

  function rows(table, pairs) {
    table.innerHTML = "";
    for (const [k, v] of pairs) {
      const tr = table.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = v;
    }
  }

  function renderDetails() {
    const doc = state.docs[state.graph], n = doc && state.selected !== null ? doc.nodes[state.selected] : null;
    const box = $("details");
    if (!n) { box.innerHTML = '<p class="hint">click a node</p>'; return; }
    const flags = ["input", "output", "fused", "orphan"].filter((f) => n[f]).join(", ") || "-";
    const buffer = n.buffer ? "arena offset " + n.buffer.offset + ", " + n.buffer.floats + " floats"
      : n.orphan ? "none (fusion orphan: skipped)" : n.kv_layer >= 0 ? "the layer's KV region" : "none";
    const table = document.createElement("table");
    rows(table, [["name", n.name], ["id", n.id], ["op", n.op], ["payload", n.payload],
      ["shape", shapeText(n.shape) + " " + n.dtype], ["backend", n.backend || "none"], ["layer", n.layer],
      ["KV layer", n.kv_layer >= 0 ? n.kv_layer : "-"], ["buffer", buffer], ["weight", n.weight || "-"],
      ["flags", flags], ["reads", n.src.map((s) => doc.nodes[s].name).join(", ") || "-"]]);
    box.replaceChildren(table);
  }

  function fmt(x) { return x === null || x === undefined ? "-" : Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : x.toFixed(4); }

  function renderStats() {
    const box = $("node-stats"), id = state.selected;
    const st = id !== null ? state.stats[state.graph][id] : null, step = state.lastStep[state.graph];
    if (!st) { box.textContent = id !== null && live ? "no data for this node yet: run a generation" : ""; return; }
    const table = document.createElement("table");
    const pairs = [["step", step.step + " (" + step.graph + ", " + step.n_tokens + " tokens)"], ["time", st.us.toFixed(1) + " us"]];
    if (st.has) pairs.push(["min", fmt(st.min)], ["max", fmt(st.max)], ["mean", fmt(st.mean)], ["NaN", String(st.nan)]);
    else pairs.push(["output", "none (writes only the KV cache)"]);
    rows(table, pairs);
    box.replaceChildren(table);
  }

  async function refreshHist() {
    const box = $("hist"), id = state.selected;
    if (!live || id === null || !state.stats[state.graph][id]) { box.innerHTML = ""; return; }
    const r = await fetch("/api/hist?graph=" + state.graph + "&node=" + id);
    if (!r.ok) { box.innerHTML = ""; return; }
    drawHist(await r.json());
  }

  function drawHist(h) {
    const W = 360, H = 120, pad = 16, max = Math.max(1, ...h.bins), bw = (W - 8) / h.bins.length;
    let bars = "";
    h.bins.forEach((c, i) => {
      const bh = c === 0 ? 0 : Math.max(1, (H - 2 * pad) * c / max);
      bars += '<rect class="bar" x="' + (4 + i * bw).toFixed(1) + '" y="' + (H - pad - bh).toFixed(1) + '" width="' +
        Math.max(1, bw - 1).toFixed(1) + '" height="' + bh.toFixed(1) + '"><title>' + c + "</title></rect>";
    });
    const caption = fmt(h.lo) + " … " + fmt(h.hi) + "   n " + h.n + (h.nan ? "  NaN " + h.nan : "") + (h.inf ? "  inf " + h.inf : "");
    $("hist").innerHTML = '<svg viewBox="0 0 ' + W + " " + H + '" data-node="' + h.node + '" data-step="' + h.step + '">' + bars +
      '<text class="caption" x="4" y="' + (H - 3) + '">' + caption + "</text></svg>";
  }

  // ---- live: generations and the event stream ------------------------------------------------------

  function setStatus(text, cls) {
    const s = $("status");
    s.textContent = text;
    s.className = cls || "";
  }

  function setBusy(busy) {
    state.busy = busy;
    $("generate").disabled = busy;
    document.body.dataset.busy = busy ? "1" : "0";
  }

  function resetLive() {
    state.stats = { prefill: {}, decode: {} };
    state.lastStep = {};
    $("tokens").textContent = "";
    $("step-info").textContent = "";
    recolor();
    renderStats();
    $("hist").innerHTML = "";
  }

  function onStep(s) {
    const m = {};
    for (const r of s.nodes) m[r[0]] = { us: r[1], has: r.length > 2, min: r[2], max: r[3], mean: r[4], nan: r[5] };
    state.stats[s.graph] = m;
    state.lastStep[s.graph] = s;
    $("step-info").textContent = "step " + s.step + ": " + s.graph + " graph, " + s.n_tokens + " tokens, " +
      s.nodes.length + " nodes ran, " + (s.total_us / 1000).toFixed(2) + " ms";
    if (!state.userPickedColor && state.colorMode !== "time") $("color-mode").value = state.colorMode = "time";
    if (s.graph !== state.graph) return;
    recolor();
    renderStats();
    if (!state.histTimer) state.histTimer = setTimeout(() => { state.histTimer = null; refreshHist(); }, 300);
  }

  function connect() {
    const es = new EventSource("/api/events");
    es.addEventListener("hello", (e) => {
      const h = JSON.parse(e.data);
      resetLive();
      setBusy(h.busy);
      setStatus(h.busy ? "a generation is running" : "idle");
    });
    es.addEventListener("start", (e) => {
      const s = JSON.parse(e.data);
      resetLive();
      setBusy(true);
      const p = document.createElement("span");
      p.className = "prompt";
      p.textContent = s.prompt;
      const out = document.createElement("span");
      out.id = "generated";
      $("tokens").append(p, out);
      setStatus("generation " + s.id + ": " + s.prompt_ids.length + " prompt tokens", "busy");
    });
    es.addEventListener("token", (e) => {
      const out = $("generated");
      if (out) out.textContent += JSON.parse(e.data).text;
    });
    es.addEventListener("step", (e) => onStep(JSON.parse(e.data)));
    es.addEventListener("done", (e) => {
      const d = JSON.parse(e.data);
      setBusy(false);
      document.body.dataset.done = String(d.id);
      if (d.error) setStatus("generation " + d.id + " failed: " + d.error, "error");
      else setStatus("generation " + d.id + " done: " + d.n_generated + " tokens, prefill " + d.prefill_ms.toFixed(1) +
        " ms, decode " + d.decode_ms.toFixed(1) + " ms" + (d.cancelled ? " (stopped)" : ""));
      refreshHist();
    });
    es.onerror = () => setStatus("connection to the server lost; retrying…", "error");
  }

  async function generate(e) {
    e.preventDefault();
    const body = { prompt: $("prompt").value, n_predict: Number($("n-predict").value), temperature: Number($("temperature").value) };
    const r = await fetch("/api/generate", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (r.status === 202) return;
    const err = await r.json().catch(() => ({}));
    setStatus((r.status === 409 ? "busy: " : "refused: ") + (err.error ? err.error.message : "HTTP " + r.status), "error");
  }

  // ---- start ----------------------------------------------------------------------------------------

  function fail(err) { setStatus(String(err.message || err), "error"); }

  function showInfo(info) {
    state.info = info;
    $("model-info").textContent = info.model + " · " + info.arch + " · " + info.n_layer + " layers · n_embd " +
      info.n_embd + " · " + info.device;
    $("device-note").textContent = info.note;
  }

  function wireToolbar() {
    for (const b of document.querySelectorAll("#graph-tabs .tab")) {
      b.addEventListener("click", () => {
        for (const o of document.querySelectorAll("#graph-tabs .tab")) o.classList.toggle("active", o === b);
        state.graph = b.dataset.graph;
        state.selected = null;
        renderDetails();
        renderStats();
        $("hist").innerHTML = "";
        showGraph().catch(fail);
      });
    }
    $("color-mode").addEventListener("change", (e) => { state.colorMode = e.target.value; state.userPickedColor = true; recolor(); });
    $("zoom-in").addEventListener("click", () => { state.zoom *= 1.25; applyZoom(); });
    $("zoom-out").addEventListener("click", () => { state.zoom /= 1.25; applyZoom(); });
    $("zoom-fit").addEventListener("click", () => { state.zoom = ($("graph-box").clientWidth - 8) / state.natural.w; applyZoom(); });
    $("collapse-all").addEventListener("change", (e) => { state.collapseAll = e.target.checked; showGraph().catch(fail); });
    $("gen-form").addEventListener("submit", (e) => generate(e).catch(fail));
    $("stop").addEventListener("click", () => fetch("/api/stop", { method: "POST" }));
  }

  // Below 1,000 nodes every layer is drawn expanded; a larger graph starts with its layers collapsed.
  async function defaultCollapse() {
    state.collapseAll = (await graphDoc(state.graph)).n_nodes >= 1000;
    $("collapse-all").checked = state.collapseAll;
  }

  async function main() {
    wireToolbar();
    if (live) {
      showInfo(await getJSON("/api/info"));
      await defaultCollapse();
      await showGraph();
      connect();
    } else {
      showInfo(embedded.info);
      for (const id of ["gen-form", "tokens", "step-info", "node-stats", "hist"]) $(id).hidden = true;
      setStatus("exported page: the graphs only, no live data");
      await defaultCollapse();
      await showGraph();
    }
    document.body.dataset.ready = "1";
  }

  main().catch(fail);
})();
