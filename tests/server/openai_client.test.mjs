// The official `openai` npm client against `minfer serve`: chat and completions, streamed and not, usage
// with include_usage, stop strings, n = 2, seeded sampling reproducible, max_tokens -> finish_reason
// "length", and error statuses surfacing as the SDK's typed errors.
//   node openai_client.test.mjs MINFER_BINARY NODE_DIR
// NODE_DIR holds node_modules/openai (scripts/setup.sh installs it into build/node). Exits 77 (ctest's
// SKIP_RETURN_CODE) when the package is absent, 1 on the first failed check.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";

const [binary, nodeDir] = process.argv.slice(2);
let OpenAI;
try {
  const mod = createRequire(path.join(path.resolve(nodeDir ?? "."), "package.json"))("openai");
  OpenAI = mod.OpenAI ?? mod.default ?? mod;
} catch (e) {
  console.log(`skipped: the openai npm package is not in ${nodeDir}/node_modules (scripts/setup.sh installs it)`);
  process.exit(77);
}

const KEY = "sdk-test-key";

// Starts `minfer serve --port 0` and resolves with its base URL once it prints it.
function startServer() {
  const child = spawn(binary, ["serve", "--port", "0", "-t", "2", "-np", "4", "--api-key", KEY, "--alias", "mini"],
                      { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error("minfer serve printed no URL in 30 s")), 30000);
    child.on("exit", (code) => reject(new Error(`minfer serve exited with ${code}`)));
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.:]+)/);
      if (m) {
        clearTimeout(timer);
        child.removeAllListeners("exit");
        resolve({ child, url: m[1] });
      }
    });
  });
}

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

const greedy = { temperature: 0, ignore_eos: true };
const checks = {
  async models(client) {
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), ["mini"]);
  },

  async chat(client) {
    const r = await client.chat.completions.create({
      model: "mini", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
      max_tokens: 8, ...greedy });
    assert.equal(r.object, "chat.completion");
    assert.equal(r.choices[0].message.role, "assistant");
    assert.equal(typeof r.choices[0].message.content, "string");
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, 8);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  },

  async chatStreamWithUsage(client) {
    const params = { model: "mini", messages: [{ role: "user", content: "Count" }], max_tokens: 10, ...greedy };
    const chunks = await collect(await client.chat.completions.create(
      { ...params, stream: true, stream_options: { include_usage: true } }));
    assert.equal(chunks[0].choices[0].delta.role, "assistant");
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 10);
    assert.equal(typeof last.usage.prompt_tokens_details.cached_tokens, "number");
    assert.equal(chunks.at(-2).choices[0].finish_reason, "length");
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
    const whole = await client.chat.completions.create(params);
    assert.equal(text, whole.choices[0].message.content);
  },

  async completions(client) {
    const r = await client.completions.create({ model: "mini", prompt: "The list type", max_tokens: 6, ...greedy });
    assert.equal(r.object, "text_completion");
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.usage.completion_tokens, 6);
    const chunks = await collect(await client.completions.create(
      { model: "mini", prompt: "The list type", max_tokens: 6, stream: true, ...greedy }));
    assert.equal(chunks.map((c) => c.choices[0].text).join(""), r.choices[0].text);
    assert.equal(chunks.at(-1).choices[0].finish_reason, "length");
  },

  async stopStrings(client) {
    const base = { model: "mini", prompt: "def main():", max_tokens: 24, ...greedy };
    const full = (await client.completions.create(base)).choices[0].text;
    assert.ok(full.length > 8, full);
    const stop = full.slice(4, 7);
    const r = await client.completions.create({ ...base, stop: ["\u0001none", stop] });
    assert.equal(r.choices[0].finish_reason, "stop");
    assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
  },

  async nTwoAndSeeds(client) {
    const params = { model: "mini", messages: [{ role: "user", content: "Tell me a story" }], max_tokens: 12,
                     temperature: 1.0, top_p: 1, seed: 1234, n: 2, ignore_eos: true };
    const a = await client.chat.completions.create(params);
    const b = await client.chat.completions.create(params);
    assert.equal(a.choices.length, 2);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
    assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
    assert.notEqual(a.choices[0].message.content, a.choices[1].message.content);
    const other = await client.chat.completions.create({ ...params, seed: 99, n: 1 });
    assert.notEqual(other.choices[0].message.content, a.choices[0].message.content);
  },

  async logprobs(client) {
    const r = await client.chat.completions.create({
      model: "mini", messages: [{ role: "user", content: "Hi" }], max_tokens: 5, logprobs: true, top_logprobs: 2,
      ...greedy });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    assert.equal(content.map((t) => t.token).join(""), r.choices[0].message.content);
    for (const t of content) {
      assert.equal(t.top_logprobs.length, 2);
      assert.equal(t.top_logprobs[0].logprob, t.logprob);  // greedy: the sampled token is the most likely
    }
  },

  async typedErrors(client, url) {
    await assert.rejects(client.chat.completions.create({ model: "mini", messages: [{ role: "wizard", content: "x" }] }),
                         (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /wizard/.test(e.message));
    await assert.rejects(client.completions.create({ model: "mini", prompt: "x", temperature: 9 }),
                         (e) => e instanceof OpenAI.BadRequestError && /temperature/.test(e.message));
    await assert.rejects(client.completions.create({ model: "mini", prompt: "x", max_tokens: 10 ** 9 }),
                         (e) => e instanceof OpenAI.BadRequestError && /context holds/.test(e.message));
    const wrongKey = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(wrongKey.completions.create({ model: "mini", prompt: "x" }),
                         (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    await assert.rejects(client.get("/no/such/route"), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  },
};

const { child, url } = await startServer();
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
let failed = 0;
for (const [name, check] of Object.entries(checks)) {
  try {
    await check(client, url);
    console.log(`ok ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAILED ${name}: ${e.stack ?? e}`);
  }
}
child.kill("SIGTERM");
const code = await new Promise((resolve) => child.on("exit", (c) => resolve(c)));
assert.equal(code, 0, "minfer serve did not exit 0 on SIGTERM");
console.log(failed ? `${failed} check(s) failed` : "all checks passed");
process.exit(failed ? 1 : 0);
