// The official `@anthropic-ai/sdk` npm client against `minfer serve` on /v1/messages: a message created
// whole, a forced tool's tool_use block, streaming through messages.stream() (its final message and
// events) and through `stream: true`, and error statuses surfacing as the SDK's typed errors.
//   node anthropic_client.test.mjs MINFER_BINARY NODE_DIR
// NODE_DIR holds node_modules/@anthropic-ai/sdk (scripts/setup.sh installs it into build/node). Exits 77
// (ctest's SKIP_RETURN_CODE) when the package is absent, 1 on the first failed check.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";

const [binary, nodeDir] = process.argv.slice(2);
let Anthropic;
try {
  const mod = createRequire(path.join(path.resolve(nodeDir ?? "."), "package.json"))("@anthropic-ai/sdk");
  Anthropic = mod.Anthropic ?? mod.default ?? mod;
} catch (e) {
  console.log(`skipped: @anthropic-ai/sdk is not in ${nodeDir}/node_modules (scripts/setup.sh installs it)`);
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

const hello = { model: "mini", max_tokens: 16, temperature: 0, system: "Be brief.",
                messages: [{ role: "user", content: "Hello" }] };
const weather = {
  model: "mini", max_tokens: 200, temperature: 0,
  messages: [{ role: "user", content: "What is the weather in Paris?" }],
  tools: [{ name: "get_weather", description: "Weather of a city",
            input_schema: { type: "object", properties: { city: { type: "string", maxLength: 24 },
                                                         unit: { enum: ["celsius", "fahrenheit"] } },
                            required: ["city", "unit"], additionalProperties: false } }],
  tool_choice: { type: "tool", name: "get_weather" },
};
const textOf = (msg) => msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");

function expectWeatherCall(block) {
  assert.equal(block.type, "tool_use");
  assert.match(block.id, /^toolu_/);
  assert.equal(block.name, "get_weather");
  assert.equal(typeof block.input, "object");
  assert.equal(typeof block.input.city, "string");
  assert.ok(["celsius", "fahrenheit"].includes(block.input.unit), JSON.stringify(block.input));
  assert.deepEqual(Object.keys(block.input).sort(), ["city", "unit"]);
}

const checks = {
  async create(client) {
    const m = await client.messages.create(hello);
    assert.equal(m.type, "message");
    assert.equal(m.role, "assistant");
    assert.match(m.id, /^msg_/);
    assert.equal(m.content[0].type, "text");
    assert.ok(m.content[0].text.length > 0);
    assert.ok(["end_turn", "max_tokens"].includes(m.stop_reason), m.stop_reason);
    assert.ok(m.usage.input_tokens > 0);
    assert.ok(m.usage.output_tokens > 0 && m.usage.output_tokens <= 16);
  },

  async forcedTool(client) {
    const m = await client.messages.create(weather);
    assert.equal(m.stop_reason, "tool_use");
    assert.equal(m.content.length, 1);
    expectWeatherCall(m.content[0]);
    // The call and its result sent back: the conversation goes on.
    const next = await client.messages.create({
      ...weather, tool_choice: { type: "auto" }, max_tokens: 8,
      messages: [...weather.messages, { role: "assistant", content: m.content },
                 { role: "user", content: [{ type: "tool_result", tool_use_id: m.content[0].id, content: "18 C" }] }] });
    assert.equal(next.type, "message");
  },

  async messagesStream(client) {
    const whole = await client.messages.create(hello);
    const stream = client.messages.stream(hello);
    const seen = [];
    let text = "";
    stream.on("streamEvent", (e) => seen.push(e.type));
    stream.on("text", (delta) => { text += delta; });
    const final = await stream.finalMessage();
    assert.equal(textOf(final), text);
    assert.equal(text, textOf(whole));
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
    assert.equal(seen[0], "message_start");
    assert.equal(seen[1], "content_block_start");
    assert.ok(seen.includes("content_block_delta"));
    assert.deepEqual(seen.slice(-3), ["content_block_stop", "message_delta", "message_stop"]);
  },

  async toolStream(client) {
    const final = await client.messages.stream(weather).finalMessage();
    assert.equal(final.stop_reason, "tool_use");
    expectWeatherCall(final.content[0]);
  },

  async streamTrue(client) {
    const whole = await client.messages.create(hello);
    const events = [];
    for await (const e of await client.messages.create({ ...hello, stream: true })) events.push(e);
    assert.equal(events[0].type, "message_start");
    assert.equal(events.at(-1).type, "message_stop");
    const text = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta")
      .map((e) => e.delta.text).join("");
    assert.equal(text, textOf(whole));
    assert.equal(events.at(-2).delta.stop_reason, whole.stop_reason);
  },

  async typedErrors(client, url) {
    await assert.rejects(client.messages.create({ model: "mini", messages: [{ role: "wizard", content: "x" }], max_tokens: 4 }),
                         (e) => e instanceof Anthropic.BadRequestError && e.status === 400 && /wizard/.test(e.message)
                                && e.error?.error?.type === "invalid_request_error");
    await assert.rejects(client.messages.create({ ...hello, temperature: 3 }),
                         (e) => e instanceof Anthropic.BadRequestError && /temperature/.test(e.message));
    await assert.rejects(client.messages.create({ ...hello, max_tokens: 10 ** 9 }),
                         (e) => e instanceof Anthropic.BadRequestError && /context holds/.test(e.message));
    const wrongKey = new Anthropic({ baseURL: url, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(wrongKey.messages.create(hello),
                         (e) => e instanceof Anthropic.AuthenticationError && e.status === 401);
  },
};

const { child, url } = await startServer();
const client = new Anthropic({ baseURL: url, apiKey: KEY, maxRetries: 0, timeout: 60000 });
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
