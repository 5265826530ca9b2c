// Real chat templates read from the test GGUFs, rendered exactly as HF transformers renders them: the
// conversations in refs/tokenizer.ref.json, plus Qwen3 tool calling, thinking and reasoning cases whose
// expected prompts were produced by Python jinja2 configured like transformers' apply_chat_template.
#include <fstream>

#include "gguf/gguf.h"
#include "template_test_util.h"
#include "test_data.h"

namespace minfer::test {
namespace {

struct ModelTemplate {
    std::string source;
    nlohmann::ordered_json extra;  // bos_token and eos_token, as HF passes its special tokens
};

ModelTemplate model_template(const std::string& path) {
    const auto gguf = GgufFile::open(path);
    const std::vector<std::string> tokens = gguf->get_str_array("tokenizer.ggml.tokens");
    ModelTemplate t{gguf->get_str("tokenizer.chat_template"), nlohmann::ordered_json::object()};
    t.extra["bos_token"] = tokens.at(static_cast<size_t>(gguf->get_int("tokenizer.ggml.bos_token_id")));
    t.extra["eos_token"] = tokens.at(static_cast<size_t>(gguf->get_int("tokenizer.ggml.eos_token_id")));
    return t;
}

nlohmann::ordered_json load_json(const std::string& path) {
    std::ifstream f(path);
    return nlohmann::ordered_json::parse(f);
}

class ChatTemplateReference : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatTemplateReference, RendersLikeTheReference) {
    const std::string refs = ref_path("tokenizer.ref.json");
    MINFER_REQUIRE_FILE(refs);
    const nlohmann::ordered_json ref = load_json(refs).at(GetParam());
    const std::string model = model_path(ref.at("model").get<std::string>());
    MINFER_REQUIRE_FILE(model);
    const ModelTemplate t = model_template(model);
    EXPECT_EQ(render_chat_template(t.source, ref.at("messages"), true, t.extra),
              ref.at("rendered_with_generation_prompt").get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Models, ChatTemplateReference,
                         ::testing::Values("qwen3-chat-template", "qwen2-chat-template",
                                           "llama3-chat-template"));

TEST(ChatTemplate, Qwen3ToolsToolCallsAndThinkStripping) {
    const std::string model = model_path("qwen-vocab.gguf");
    MINFER_REQUIRE_FILE(model);
    const ModelTemplate t = model_template(model);
    const auto messages = nlohmann::ordered_json::parse(R"([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "<think>\nIt is warm.\n</think>\n\nIt is 21°C and sunny."},
        {"role": "user", "content": "Thanks"}])");
    nlohmann::ordered_json extra = t.extra;
    extra["tools"] =
        nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "description": "Weather for a city — ☀", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    EXPECT_EQ(
        render_chat_template(t.source, messages, true, extra),
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the "
        "user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather for a "
        "city — ☀\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
        "\"string\"}}, "
        "\"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function "
        "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": "
        "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
        "<tool_response>\n{\"temp\": 21}\n</tool_response>\n<tool_response>\nsunny\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\nIt is 21°C and sunny.<|im_end|>\n<|im_start|>user\nThanks"
        "<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen3ThinkingVariants) {
    const std::string model = model_path("qwen-vocab.gguf");
    MINFER_REQUIRE_FILE(model);
    const ModelTemplate t = model_template(model);
    const auto last_think = nlohmann::ordered_json::parse(
        R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!"}])");
    EXPECT_EQ(render_chat_template(t.source, last_think, false, t.extra),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</"
              "think>\n\nHello!<|im_end|>\n");
    const auto reasoning = nlohmann::ordered_json::parse(
        R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo", "reasoning_content": "greet"}])");
    EXPECT_EQ(
        render_chat_template(t.source, reasoning, false, t.extra),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\ngreet\n</think>\n\nYo<|im_end|>\n");
    nlohmann::ordered_json no_thinking = t.extra;
    no_thinking["enable_thinking"] = false;
    const auto hi = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
    EXPECT_EQ(render_chat_template(t.source, hi, true, no_thinking),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(render_chat_template(t.source, hi, true, t.extra),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen2DefaultSystemPromptAndLlama3WithoutGenerationPrompt) {
    const std::string qwen2 = model_path("qwen2-mini-F16.gguf");
    const std::string llama3 = model_path("llama3-vocab.gguf");
    MINFER_REQUIRE_FILE(qwen2);
    MINFER_REQUIRE_FILE(llama3);
    const auto hi = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
    const ModelTemplate q = model_template(qwen2);
    EXPECT_EQ(render_chat_template(q.source, hi, false, q.extra),
              "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    const ModelTemplate l = model_template(llama3);
    const auto padded = nlohmann::ordered_json::parse(R"([{"role": "user", "content": " Hi "}])");
    EXPECT_EQ(render_chat_template(l.source, padded, false, l.extra),
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>"
              "assistant"
              "<|end_header_id|>\n\n");
}

// Every prefix of a real template either renders or fails with minfer::Error; nothing else escapes.
TEST(ChatTemplate, TruncatedTemplatesFailCleanly) {
    const std::string model = model_path("qwen-vocab.gguf");
    MINFER_REQUIRE_FILE(model);
    const ModelTemplate t = model_template(model);
    const auto messages = nlohmann::ordered_json::parse(
        R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>x</think>Yo"}])");
    size_t rendered = 0;
    size_t failed = 0;
    for (size_t n = 0; n <= t.source.size(); n += 3) {
        try {
            render_chat_template(t.source.substr(0, n), messages, true, t.extra);
            ++rendered;
        } catch (const Error&) {
            ++failed;
        } catch (const std::exception& e) {
            ADD_FAILURE() << "prefix of " << n << " chars threw a non-minfer error: " << e.what();
        }
    }
    EXPECT_GT(rendered, 0u);
    EXPECT_GT(failed, 0u);
}

}  // namespace
}  // namespace minfer::test
