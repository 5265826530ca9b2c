#!/usr/bin/env python3
"""Reference renders of multi-turn tool conversations for tests/template/test_tool_renders.cpp.

Renders every case below with Python's jinja2, set up the way HF transformers' apply_chat_template
sets it up (transformers/utils/chat_template_utils.py, _compile_jinja_template and
render_jinja_template), and writes tests/template/data/tool-renders.json. This script is the only
source of the expected text: never produce it with minfer's own engine.

    python3 scripts/make-template-refs.py                 # rewrite the JSON
    python3 scripts/make-template-refs.py --check-gguf ../shared/models/qwen-vocab.gguf
                                                          # qwen3.jinja == the GGUF's template?
"""
import argparse
import copy
import datetime
import json
import pathlib
import struct
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "template" / "data"

# Template file and the special tokens transformers passes as variables (bos_token/eos_token of the
# model; the Qwen3 ones are those of the GGUF the template was read from).
TEMPLATES = {
    "qwen3": ("qwen3.jinja", {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}),
    "qwen2.5": ("qwen2.5-instruct.jinja", {"eos_token": "<|im_end|>"}),
    "llama3.1": ("llama3.1-instruct.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    "llama3.2": ("llama3.2-instruct.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
}

# strftime_now() returns this instant, so renders are reproducible; each case records the formats
# it was called with and the text returned, for the test to substitute the real clock.
FIXED_NOW = datetime.datetime(2025, 3, 14, 9, 26, 53)


def environment(strftime_calls):
    """transformers' jinja environment, with strftime_now on a fixed clock."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        out = FIXED_NOW.strftime(format)
        if [format, out] not in strftime_calls:
            strftime_calls.append([format, out])
        return out

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# --- tools, as the server passes them ([{"type": "function", "function": {...}}]) -------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Current weather for a city — in °C unless asked otherwise",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Zürich or 東京"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time",
    "description": "Local time in an IANA time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
ALARMS = {"type": "function", "function": {
    "name": "list_alarms",
    "description": "List <all> & \"active\" alarms",
    "parameters": {"type": "object", "properties": {}, "required": []}}}
FLIGHTS = {"type": "function", "function": {
    "name": "search_flights",
    "description": "Search flights",
    "parameters": {"type": "object", "properties": {
        "from": {"type": "string"}, "to": {"type": "string"},
        "passengers": {"type": "integer", "minimum": 1}, "max_price": {"type": "number"},
        "flexible": {"type": "boolean"}, "stops": {"type": ["integer", "null"]},
        "filters": {"type": "object", "properties": {
            "cabin": {"type": "string"}, "airlines": {"type": "array", "items": {"type": "string"}}}},
        "note": {"type": "string"}},
        "required": ["from", "to"]}}}


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def user(text):
    return {"role": "user", "content": text}


def assistant(content, *calls, reasoning=None):
    m = {"role": "assistant", "content": content}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    if calls:
        m["tool_calls"] = list(calls)
    return m


def tool(call_id, content):
    return {"role": "tool", "tool_call_id": call_id, "content": content}


ZURICH = call("call_1", "get_weather", {"city": "Zürich"})
TOKYO = call("call_2", "get_weather", {"city": "東京", "unit": "celsius"})
TOKYO_TIME = call("call_3", "get_time", {"zone": "Asia/Tokyo"})
RICH = call("call_9", "search_flights", {
    "from": "Paris", "to": "東京", "passengers": 2, "max_price": 900.0, "flexible": True, "stops": None,
    "filters": {"cabin": "economy", "airlines": ["AF", "JL"]}, "ratio": 0.1, "tiny": 1.5e-07, "big": 1e+21,
    "neg": -7,
    "note": "say \"hi\"\n\ttab \\ back / slash <b>&amp;</b> ☀️ ü"})
JSON_RESULT = '{"city": "Zürich", "temp_c": 21.5, "conditions": ["cloudy", "windy"], "alert": null}'

# --- conversations ---------------------------------------------------------------------------------

CONVERSATIONS = {
    "single_call": ([user("What's the weather in Zürich?"), assistant("", ZURICH)], [WEATHER]),
    "parallel_calls": ([
        user("Weather in Zürich and in 東京?"), assistant("", ZURICH, TOKYO),
        tool("call_1", "14°C, light rain"), tool("call_2", "22°C, sunny")], [WEATHER]),
    "call_result_answer": ([
        user("What's the weather in Zürich?"), assistant("", ZURICH), tool("call_1", "14°C, light rain"),
        assistant("It is 14°C with light rain in Zürich.")], [WEATHER]),
    "two_rounds": ([
        user("Weather in 東京, and what time is it there?"), assistant("", TOKYO),
        tool("call_2", "22°C, sunny"), assistant("", TOKYO_TIME), tool("call_3", "18:05"),
        assistant("Sunny and 22°C; it is 18:05 in 東京."), user("Thanks! And in Zürich?")], [WEATHER, TIME]),
    "json_tool_result": ([
        user("Weather in Zürich?"), assistant("", ZURICH), tool("call_1", JSON_RESULT)], [WEATHER]),
    "system_and_tools": ([
        {"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
        user("Is it raining in Zürich?"), assistant("Let me check.", ZURICH),
        tool("call_1", "14°C, light rain")], [WEATHER, ALARMS]),
    "object_arguments": ([
        user("Two seats Paris → 東京 under 900, any stops."), assistant("", RICH),
        tool("call_9", '[{"flight": "AF276", "price": 874.5}]')], [FLIGHTS]),
    "string_arguments": ([
        user("What's the weather in Zürich?"),
        assistant("", call("call_1", "get_weather", '{"city": "Zürich"}')), tool("call_1", "14°C")], [WEATHER]),
    # OpenAI clients send content null beside tool_calls (Qwen3's template fails on it in jinja2 too).
    "null_content_call": ([
        user("Weather in 東京?"), assistant(None, TOKYO), tool("call_2", "22°C, sunny")], [WEATHER]),
    "no_tools_chat": ([user("Hi there"), assistant("Hello! How can I help?"), user("Tell me a joke.")], None),
}

QWEN3_ONLY = {
    "reasoning_content": ([
        user("Hi"), assistant("Hello!", reasoning="A greeting; reply in kind."),
        user("Weather in Zürich?"), assistant("", ZURICH, reasoning="The user wants the weather: call the tool."),
        tool("call_1", "14°C, light rain"),
        assistant("14°C and light rain.", reasoning="The tool says 14°C with rain.")], [WEATHER]),
    "reasoning_in_content": ([
        user("Weather in Zürich?"), assistant("<think>\nI should call the tool.\n</think>\n\n", ZURICH),
        tool("call_1", "14°C, light rain")], [WEATHER]),
}

LLAMA_ONLY = {
    "ipython_role": ([
        user("Weather in Zürich?"), assistant("", ZURICH),
        {"role": "ipython", "content": "14°C, light rain"}], [WEATHER]),
}

LLAMA31_ONLY = {
    "builtin_tools": ([
        user("Search the web for the Zürich weather."),
        assistant("", call("call_7", "brave_search", {"query": "Zürich weather today"})),
        tool("call_7", "14°C, light rain")], [WEATHER]),
}

# (template, conversation, add_generation_prompt, variables); "custom_tools" moves the conversation's
# tools into that variable.
PLAN = []
for conv, agp in [("single_call", False), ("parallel_calls", True), ("call_result_answer", False),
                  ("two_rounds", True), ("json_tool_result", True), ("system_and_tools", True),
                  ("object_arguments", True), ("string_arguments", True), ("null_content_call", True),
                  ("no_tools_chat", True)]:
    PLAN.append(("qwen3", conv, agp, {}))
    PLAN.append(("qwen2.5", conv, agp, {}))
PLAN += [
    ("qwen3", "reasoning_content", False, {}),
    ("qwen3", "reasoning_content", True, {"enable_thinking": True}),
    ("qwen3", "reasoning_in_content", True, {}),
    ("qwen3", "two_rounds", True, {"enable_thinking": False}),
    ("qwen3", "single_call", True, {"enable_thinking": True}),
    ("qwen2.5", "system_and_tools", False, {}),
]
for t in ("llama3.1", "llama3.2"):
    PLAN += [
        (t, "single_call", False, {}),
        (t, "parallel_calls", True, {}),  # raises: one call per turn
        (t, "call_result_answer", False, {"date_string": "02 Jan 2025"}),
        (t, "two_rounds", True, {"tools_in_user_message": False, "date_string": "02 Jan 2025"}),
        (t, "json_tool_result", True, {}),
        (t, "system_and_tools", True, {"tools_in_user_message": False}),
        (t, "system_and_tools", True, {"date_string": "02 Jan 2025"}),
        (t, "object_arguments", True, {}),
        (t, "ipython_role", True, {}),
        (t, "call_result_answer", True, {"custom_tools": True}),
        (t, "null_content_call", True, {}),
        (t, "no_tools_chat", True, {}),
    ]
PLAN += [
    ("llama3.1", "builtin_tools", True, {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}),
]


def conversation(name):
    for table in (CONVERSATIONS, QWEN3_ONLY, LLAMA_ONLY, LLAMA31_ONLY):
        if name in table:
            messages, tools = table[name]
            return copy.deepcopy(messages), copy.deepcopy(tools)
    raise KeyError(name)


def render_case(template, conv, agp, variables):
    file, special = TEMPLATES[template]
    source = (DATA / file).read_text(encoding="utf-8")
    messages, tools = conversation(conv)
    variables = dict(variables)
    if variables.pop("custom_tools", False):
        variables["custom_tools"], tools = tools, None
    variables = {**special, **variables}
    strftime_calls = []
    compiled = environment(strftime_calls).from_string(source)
    case = {"template": file, "name": conv, "messages": messages, "tools": tools,
            "add_generation_prompt": agp, "variables": variables}
    try:
        # As render_jinja_template calls it: tools (None when absent) and documents always passed.
        case["expected"] = compiled.render(messages=copy.deepcopy(messages), tools=copy.deepcopy(tools),
                                           documents=None, add_generation_prompt=agp, **copy.deepcopy(variables))
    except jinja2.exceptions.TemplateError as e:  # raise_exception(): the test looks for this message
        case["expected"] = None
        case["error"] = str(e)
    except TypeError as e:  # a Python error; the test only asks our engine to fail too
        case["expected"] = None
        case["error"] = ""
        case["python_error"] = f"{type(e).__name__}: {e}"
    if strftime_calls:
        case["strftime_now"] = strftime_calls
    return case


def gguf_chat_template(path):
    """tokenizer.chat_template of a GGUF file (v2/v3 metadata)."""
    with open(path, "rb") as f:
        def u(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize(fmt)))[0]

        def s():
            return f.read(u("Q")).decode("utf-8")

        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def value(t):
            if t == 8:
                return s()
            if t == 9:
                et, n = u("I"), u("Q")
                return [value(et) for _ in range(n)]
            return u(scalar[t])

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        u("I"), u("Q")
        for _ in range(u("Q")):
            key, kind = s(), u("I")
            v = value(kind)
            if key == "tokenizer.chat_template":
                return v
    raise KeyError(f"{path}: no tokenizer.chat_template")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check-gguf", metavar="GGUF", help="compare qwen3.jinja with this GGUF's chat template")
    ap.add_argument("--out", default=str(DATA / "tool-renders.json"))
    args = ap.parse_args()
    if args.check_gguf:
        same = gguf_chat_template(args.check_gguf) == (DATA / "qwen3.jinja").read_text(encoding="utf-8")
        print("qwen3.jinja " + ("matches " if same else "DIFFERS from ") + args.check_gguf)
        return 0 if same else 1
    cases = [render_case(*p) for p in PLAN]
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    counts = {}
    for c in cases:
        counts[c["template"]] = counts.get(c["template"], 0) + 1
    print(f"{args.out}: {len(cases)} cases " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
