// `minfer viz` in a real browser: Debian's headless Chromium driven through the DevTools protocol by
// puppeteer-core, against the embedded model.
//   node browser.test.mjs MINFER_BINARY NODE_DIR ARTIFACT_DIR
// Checks (issue 31, acceptance 1 and 2): the page's SVG has one element of class `node` per graph node
// of the JSON route (prefill and decode); a generation started from the page shows its tokens on two
// pages at once, and the selected node's stats and histogram; a reload replays them; the exported page
// opened from file:// with the network off shows the same node count. Saves ARTIFACT_DIR/viz.png and
// viz-export.png, prints the load times. Exits 77 (ctest's SKIP_RETURN_CODE) without chromium or
// puppeteer-core (scripts/setup.sh installs both), 1 on the first failed check. MINFER_VIZ_MODEL=FILE runs
// it on another model than the embedded one.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const [binary, nodeDir, artifacts] = process.argv.slice(2);
const modelArgs = process.env.MINFER_VIZ_MODEL ? ["-m", process.env.MINFER_VIZ_MODEL] : [];
const skip = (why) => {
  console.log("skipped: " + why);
  process.exit(77);
};
const chromium = [process.env.MINFER_CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"]
  .find((p) => p && fs.existsSync(p));
if (!chromium) skip("no chromium (scripts/setup.sh installs Debian's chromium package)");
let puppeteer;
try {
  puppeteer = createRequire(path.join(path.resolve(nodeDir ?? "."), "package.json"))("puppeteer-core");
} catch (e) {
  skip(`puppeteer-core is not in ${nodeDir}/node_modules (scripts/setup.sh installs it)`);
}
fs.mkdirSync(artifacts, { recursive: true });
const deadline = setTimeout(() => { console.error("FAIL: the browser test ran over 150 s"); process.exit(1); }, 150000);

// Starts `minfer viz --port 0` and resolves with the child and its URL once it prints it.
function startViz() {
  const child = spawn(binary, ["viz", ...modelArgs, "--port", "0", "-t", "2"], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("minfer viz printed no URL in 60 s")), 60000);
    child.on("exit", (code) => reject(new Error(`minfer viz exited with ${code}`)));
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/viz: open (http:\/\/[0-9.:]+\/)/);
      if (m) {
        clearTimeout(timer);
        child.removeAllListeners("exit");
        resolve({ child, url: m[1] });
      }
    });
  });
}

// Opens `url` and waits until the page has drawn its graph; returns the milliseconds that took.
async function open(page, url) {
  const t0 = Date.now();
  await page.goto(url, { waitUntil: "load" });
  await until(page, () => document.body.dataset.ready === "1");
  return Date.now() - t0;
}

// Polls on a timer: a background tab gets no animation frames, which puppeteer's default polling and
// clicks wait for.
const until = (page, fn, arg) => page.waitForFunction(fn, { polling: 100, timeout: 30000 }, arg);
const svgNodes = (page) => page.$$eval("svg .node", (els) => els.length);

async function checkGraphTab(page, kind) {
  await page.bringToFront();
  await page.click(`#graph-tabs [data-graph=${kind}]`);
  await until(page, (k) => document.body.dataset.graph === k, kind);
  const doc = await page.evaluate((k) => fetch("/api/graph?graph=" + k).then((r) => r.json()), kind);
  assert.ok(doc.n_nodes > 0);
  assert.equal(await svgNodes(page), doc.n_nodes, `${kind}: one svg .node per graph node`);
  return doc;
}

// Collapsing layer 0 (its checkbox) lays the graph out again with the layer as one node; clicking that
// node expands it.
async function checkCollapse(page, doc) {
  const layer0 = doc.layers[0].nodes.length;
  await page.bringToFront();
  await page.click("#layers input[type=checkbox]");
  await until(page, (n) => document.querySelectorAll("svg .node").length === n, doc.n_nodes - layer0 + 1);
  assert.equal(await page.$eval("#L0", (el) => el.getAttribute("class")), "node layer");
  await page.$eval("#L0", (el) => el.dispatchEvent(new MouseEvent("click", { bubbles: true })));
  await until(page, (n) => document.querySelectorAll("svg .node").length === n, doc.n_nodes);
  assert.equal(await page.$eval("#layers input[type=checkbox]", (el) => el.checked), false);
}

async function generateOn(page, prompt, n) {
  await page.bringToFront();
  await page.$eval("#prompt", (el, p) => (el.value = p), prompt);
  await page.$eval("#n-predict", (el, v) => (el.value = String(v)), n);
  await page.click("#generate");
}

const doneOn = (page) => until(page, () => document.body.dataset.done !== undefined);
const generated = (page) => page.$eval("#generated", (el) => el.textContent);

async function selectAndCheckStats(page, doc) {
  const node = doc.nodes.find((n) => n.name === "attn_q-0") ?? doc.nodes.find((n) => n.op === "MatMul");
  await page.bringToFront();
  await page.$eval("#n" + node.id, (el) => el.scrollIntoView({ block: "center", inline: "center" }));
  await page.click("#n" + node.id);
  await until(page, () => document.querySelectorAll("#hist svg .bar").length > 0);
  const stats = await page.$eval("#node-stats", (el) => el.innerText);
  for (const key of ["time", "min", "max", "mean", "NaN"]) assert.match(stats, new RegExp(key), stats);
  const mean = Number(/mean\s+(\S+)/.exec(stats)[1]);
  assert.ok(Number.isFinite(mean), "the mean is a number: " + stats);
  const details = await page.$eval("#details", (el) => el.innerText);
  assert.match(details, new RegExp(node.name));
  assert.match(details, /backend\s+cpu/);
  assert.match(details, /buffer\s+arena offset/);
  const hist = await page.evaluate((id) => fetch("/api/hist?graph=prefill&node=" + id).then((r) => r.json()), node.id);
  assert.equal(await page.$eval("#hist svg", (el) => Number(el.dataset.node)), node.id);
  assert.equal(await page.$$eval("#hist svg .bar", (els) => els.length), hist.bins.length);
  return node;
}

async function checkExport(browser, liveCounts) {
  const file = path.resolve(artifacts, "viz-export.html");
  const r = spawnSync(binary, ["viz", ...modelArgs, "-t", "2", "--export", file], { encoding: "utf8", timeout: 60000 });
  assert.equal(r.status, 0, r.stderr);
  const page = await browser.newPage();
  page.setDefaultTimeout(30000);
  await page.setViewport({ width: 1400, height: 900 });
  await page.setOfflineMode(true);
  await page.setRequestInterception(true);
  const remote = [];
  page.on("request", (req) => {
    if (req.url().startsWith("file:") || req.url().startsWith("data:")) return req.continue();
    remote.push(req.url());
    req.abort();
  });
  const ms = await open(page, "file://" + file);
  assert.equal(await svgNodes(page), liveCounts.prefill, "the export shows the prefill graph's nodes");
  await page.click("#graph-tabs [data-graph=decode]");
  await until(page, () => document.body.dataset.graph === "decode");
  assert.equal(await svgNodes(page), liveCounts.decode, "and the decode graph's");
  assert.deepEqual(remote, [], "the export asks for nothing beyond its file");
  assert.equal(await page.$eval("#gen-form", (el) => getComputedStyle(el).display), "none", "no prompt box");
  await page.screenshot({ path: path.join(artifacts, "viz-export.png") });
  await page.close();
  return ms;
}

const { child, url } = await startViz();
const browser = await puppeteer.launch({
  executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
let failed = false;
try {
  const a = await browser.newPage(), b = await browser.newPage();
  for (const p of [a, b]) {
    p.setDefaultTimeout(30000);
    await p.setViewport({ width: 1600, height: 1000 });
  }
  await a.bringToFront();
  const loadMs = await open(a, url);
  const decode = await checkGraphTab(a, "decode");
  const prefill = await checkGraphTab(a, "prefill");
  await checkCollapse(a, prefill);
  await open(b, url);

  await generateOn(a, "The list type", 12);
  await Promise.all([doneOn(a), doneOn(b)]);
  const text = await generated(a);
  assert.ok(text.length > 0, "tokens appear on the page that asked");
  assert.equal(await generated(b), text, "and on the second viewer");
  assert.match(await a.$eval("#status", (el) => el.textContent), /done: \d+ tokens/);
  const node = await selectAndCheckStats(a, prefill);
  await a.screenshot({ path: path.join(artifacts, "viz.png") });

  await a.bringToFront();
  const reloadMs = await open(a, url);  // a reload replays the last generation
  assert.equal(await svgNodes(a), prefill.n_nodes);
  await doneOn(a);
  assert.equal(await generated(a), text, "the reloaded page shows the generation again");
  await selectAndCheckStats(a, prefill);

  const exportMs = await checkExport(browser, { prefill: prefill.n_nodes, decode: decode.n_nodes });
  console.log(JSON.stringify({ prefill_nodes: prefill.n_nodes, decode_nodes: decode.n_nodes, selected: node.name,
                               text, load_ms: loadMs, reload_ms: reloadMs, export_load_ms: exportMs,
                               screenshot: path.join(artifacts, "viz.png") }));
} catch (e) {
  failed = true;
  console.error("FAIL:", e);
} finally {
  await browser.close();
  child.kill("SIGTERM");
  const code = await new Promise((resolve) => child.on("exit", (c) => resolve(c)));
  if (code !== 0) {
    failed = true;
    console.error(`FAIL: minfer viz exited with ${code} on SIGTERM`);
  }
  clearTimeout(deadline);
}
process.exit(failed ? 1 : 0);
