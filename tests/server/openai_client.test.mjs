// The official `openai` npm client against `minfer serve`: chat and completions, streamed and not, usage
// with include_usage, stop strings, n = 2, seeded sampling reproducible, max_tokens -> finish_reason
// "length", embeddings (the SDK asks for base64 and decodes it), and error statuses surfacing as the SDK's
// typed errors. Tools and structured output: chat with a named tool (whole and through the stream
// iterator) and with a strict json_schema response_format; the Responses API (client.responses.create
// whole and streamed, the SDK's responses.stream helper) with text and with a forced function tool.
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

// A function whose arguments the grammar bounds (a short string, an enum), so a forced call ends soon.
const weatherParams = {
  type: "object", properties: { city: { type: "string", maxLength: 24 }, unit: { enum: ["celsius", "fahrenheit"] } },
  required: ["city", "unit"], additionalProperties: false };
const chatTool = { type: "function", function: { name: "get_weather", description: "Weather of a city",
                                                  parameters: weatherParams } };
const responsesTool = { type: "function", name: "get_weather", description: "Weather of a city",
                        parameters: weatherParams, strict: true };

function assertWeatherArguments(text) {
  const args = JSON.parse(text);
  assert.deepEqual(Object.keys(args).sort(), ["city", "unit"]);
  assert.equal(typeof args.city, "string");
  assert.ok(["celsius", "fahrenheit"].includes(args.unit), text);
}

// The message text of a Responses API response (what the SDK's output_text joins).
function responseText(r) {
  return r.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
}
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

  async embeddings(client) {
    const r = await client.embeddings.create({ model: "mini", input: ["Hello there", "Hello there", "other"] });
    assert.equal(r.object, "list");
    assert.deepEqual(r.data.map((d) => d.index), [0, 1, 2]);
    const v = r.data.map((d) => Array.from(d.embedding));
    assert.equal(v[0].length, 256);
    assert.ok(Math.abs(Math.hypot(...v[0]) - 1) < 1e-5);
    assert.deepEqual(v[0], v[1]);
    assert.notDeepEqual(v[0], v[2]);
    assert.ok(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens);
    const floats = await client.embeddings.create({ model: "mini", input: "Hello there", encoding_format: "float" });
    assert.deepEqual(floats.data[0].embedding, v[0]);
    await assert.rejects(client.embeddings.create({ model: "mini", input: "" }),
                         (e) => e instanceof OpenAI.BadRequestError && /'input'/.test(e.message));
  },

  async chatToolsNamed(client) {
    const params = { model: "mini", messages: [{ role: "user", content: "Weather in Paris?" }], tools: [chatTool],
                     tool_choice: { type: "function", function: { name: "get_weather" } }, max_tokens: 100,
                     temperature: 0 };
    const r = await client.chat.completions.create(params);
    assert.equal(r.choices[0].finish_reason, "tool_calls");
    const call = r.choices[0].message.tool_calls[0];
    assert.equal(call.type, "function");
    assert.equal(call.function.name, "get_weather");
    assertWeatherArguments(call.function.arguments);

    const calls = [];
    let finish = null;
    for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) {
      const c = chunk.choices[0];
      finish = c.finish_reason ?? finish;
      for (const t of c.delta.tool_calls ?? []) {
        calls[t.index] ??= { id: t.id, name: t.function.name, arguments: "" };
        calls[t.index].arguments += t.function.arguments ?? "";
      }
    }
    assert.equal(finish, "tool_calls");
    assert.equal(calls.length, 1);
    assert.match(calls[0].id, /^call_/);
    assert.equal(calls[0].name, "get_weather");
    assert.equal(calls[0].arguments, call.function.arguments);
  },

  async chatJsonSchema(client) {
    const schema = { type: "object", properties: { name: { type: "string", maxLength: 16 },
                                                   count: { type: "integer", minimum: 0, maximum: 999 } },
                     required: ["name", "count"], additionalProperties: false };
    const r = await client.chat.completions.create({
      model: "mini", messages: [{ role: "user", content: "A city as JSON" }], max_tokens: 80, temperature: 0,
      response_format: { type: "json_schema", json_schema: { name: "city", schema, strict: true } } });
    assert.equal(r.choices[0].finish_reason, "stop");
    const v = JSON.parse(r.choices[0].message.content);
    assert.deepEqual(Object.keys(v).sort(), ["count", "name"]);
    assert.equal(typeof v.name, "string");
    assert.ok(Number.isInteger(v.count) && v.count >= 0 && v.count <= 999, JSON.stringify(v));
  },

  async responses(client) {
    const r = await client.responses.create({ model: "mini", instructions: "Be brief.", input: "Hello",
                                              max_output_tokens: 8, temperature: 0 });
    assert.equal(r.object, "response");
    assert.match(r.id, /^resp_/);
    assert.ok(["completed", "incomplete"].includes(r.status), r.status);
    assert.equal(r.output[0].type, "message");
    assert.equal(r.output[0].role, "assistant");
    assert.equal(r.output[0].content[0].type, "output_text");
    assert.equal(r.output_text, responseText(r));  // the SDK joins it
    assert.ok(r.usage.output_tokens <= 8);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    if (r.status === "incomplete") assert.equal(r.incomplete_details.reason, "max_output_tokens");
  },

  async responsesStream(client) {
    const params = { model: "mini", input: [{ role: "user", content: "Tell me a story" }], max_output_tokens: 12,
                     temperature: 0 };
    const whole = await client.responses.create(params);
    const types = new Set();
    let text = "", last = null, seq = -1;
    for await (const e of await client.responses.create({ ...params, stream: true })) {
      types.add(e.type);
      assert.ok(e.sequence_number > seq, `sequence_number ${e.sequence_number} after ${seq}`);
      seq = e.sequence_number;
      if (e.type === "response.output_text.delta") text += e.delta;
      last = e;
    }
    for (const t of ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done"])
      assert.ok(types.has(t), `no ${t} event`);
    assert.equal(last.type, whole.status === "completed" ? "response.completed" : "response.incomplete");
    assert.equal(text, responseText(last.response));
    assert.equal(text, whole.output_text);
  },

  async responsesFunctionTool(client) {
    const params = { model: "mini", input: "What is the weather in Paris?", tools: [responsesTool],
                     tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 100, temperature: 0 };
    const r = await client.responses.create(params);
    assert.equal(r.status, "completed");
    assert.equal(r.output.length, 1);
    const call = r.output[0];
    assert.equal(call.type, "function_call");
    assert.equal(call.name, "get_weather");
    assert.match(call.call_id, /^call_/);
    assertWeatherArguments(call.arguments);

    // The SDK's helper builds the response from the events; its snapshot must agree with ours.
    const stream = client.responses.stream(params);
    let args = "";
    stream.on("response.function_call_arguments.delta", (e) => { args += e.delta; });
    const final = await stream.finalResponse();
    assert.equal(args, call.arguments);
    assert.equal(final.output[0].type, "function_call");
    assert.equal(final.output[0].arguments, call.arguments);
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
    await assert.rejects(client.responses.create({ model: "mini", input: "x", previous_response_id: "resp_1" }),
                         (e) => e instanceof OpenAI.BadRequestError && /previous_response_id/.test(e.message));
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
