"""The official OpenAI Python SDK against a running ftllmd (argv: base URL, model name).

Prints one line per check and exits non-zero on the first failure; the C++ integration test runs it.
"""
import sys

import openai

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)

models = [m.id for m in client.models.list().data]
assert models == [model], models
print("models.list ok")

messages = [{"role": "user", "content": "Name three colors."}]
whole = client.chat.completions.create(model=model, messages=messages, max_tokens=20, temperature=0.7, seed=11)
assert whole.choices[0].message.role == "assistant"
assert whole.choices[0].finish_reason in ("stop", "length")
assert whole.usage.completion_tokens > 0 and whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
print("chat.completions ok:", repr(whole.choices[0].message.content[:40]))

pieces, usage, finish = [], None, None
for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=20, temperature=0.7, seed=11,
                                            stream=True, stream_options={"include_usage": True}):
    if chunk.usage:
        usage = chunk.usage
    for choice in chunk.choices:
        pieces.append(choice.delta.content or "")
        finish = choice.finish_reason or finish
assert "".join(pieces) == whole.choices[0].message.content, ("".join(pieces), whole.choices[0].message.content)
assert usage.completion_tokens == whole.usage.completion_tokens and finish == whole.choices[0].finish_reason
print("chat.completions stream ok: equals the whole response for the same seed")

text = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0, stop=["."])
assert "." not in text.choices[0].text and text.choices[0].finish_reason == "stop", text
print("completions ok:", repr(text.choices[0].text))

try:
    client.chat.completions.create(model="no-such-model", messages=messages)
    raise SystemExit("an unknown model was accepted")
except openai.NotFoundError as e:
    assert model in str(e)
    print("unknown model ok: 404 naming the loaded model")

try:
    client.chat.completions.create(model=model, messages=messages, temperature="hot")
    raise SystemExit("a string temperature was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "temperature", e.body
    print("bad parameter ok: 400 naming temperature")
# The tool round trip as the SDK sends it back: the assistant's tool calls with null content, then the result.
weather = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
round_trip = [{"role": "user", "content": "What's the weather in Paris?"},
              {"role": "assistant", "content": None,
               "tool_calls": [{"id": "call_1", "type": "function",
                               "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
              {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"}]
answer = client.chat.completions.create(model=model, messages=round_trip, tools=[weather], max_tokens=8, temperature=0)
assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls"), answer
print("tool round trip ok:", repr((answer.choices[0].message.content or "")[:40]))
try:
    client.chat.completions.create(model=model, messages=[{"role": "wizard", "content": "x"}])
    raise SystemExit("an unknown role was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "messages[0].role", e.body
    print("unknown role ok: 400 naming messages[0].role")
print("ALL OK")
