"""tool_choice enforced, against a running ftllmd whose model writes <tool_call> blocks (argv: base URL,
model name). Python's jsonschema checks each call's arguments against its tool's parameters.
Prints one line per check and exits non-zero on the first failure.
"""
import json
import sys

import jsonschema
import openai

from example_tools import add, schemas, tools, weather

base, model = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)

messages = [{"role": "user", "content": "Tell me a joke."}]  # a request no tool fits: the choice forces one


def calls(tool_choice, parallel=None, temperature=0.0, seed=0, max_tokens=200):
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    r = client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice=tool_choice,
                                       max_tokens=max_tokens, temperature=temperature, seed=seed, **extra)
    choice = r.choices[0]
    if choice.finish_reason == "length" and parallel is not False:
        # With parallel calls allowed, a sampling model may go on calling until max_tokens (seen in a
        # sanitized build, whose floating point takes another path): the call cut off stays text, the
        # complete ones before it must be valid.
        assert choice.message.tool_calls, choice
    else:
        assert choice.finish_reason == "tool_calls", choice
        assert choice.message.content is None, choice.message
    for call in choice.message.tool_calls:
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    return [c.function.name for c in choice.message.tool_calls]


for seed in range(4):
    names = calls("required", parallel=False, temperature=1.2, seed=seed)
    assert len(names) == 1, names
names = calls("required", max_tokens=400)
assert len(names) >= 1, names
print("required ok: one valid call, or several when parallel calls are allowed:", names)
add_only = {"type": "function", "function": {"name": "add"}}
for seed in range(3):
    names = calls(add_only, temperature=1.2, seed=seed)
    assert set(names) == {"add"}, names
    names = calls(add_only, parallel=False, temperature=1.2, seed=seed)
    assert names == ["add"], names
print("named ok: only that function, once without parallel calls")

# Streamed, the call arrives with its name and arguments, and the stream ends with tool_calls.
pieces, finish, chunks = {}, None, 0
for chunk in client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True, max_tokens=200,
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                            parallel_tool_calls=False, temperature=0):
    for choice in chunk.choices:
        finish = choice.finish_reason or finish
        for call in choice.delta.tool_calls or []:
            entry = pieces.setdefault(call.index, {"name": "", "arguments": ""})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
            chunks += 1
assert finish == "tool_calls" and list(pieces) == [0] and pieces[0]["name"] == "get_weather", (finish, pieces)
jsonschema.validate(json.loads(pieces[0]["arguments"]), weather)
assert chunks > 3, f"the arguments came in {chunks} chunks, not as they grew"
print(f"streamed ok: name first, then the arguments in {chunks - 1} pieces:", pieces[0])

try:
    client.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="required",
                                   response_format={"type": "json_object"})
    raise SystemExit("tool_choice required with response_format was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "tool_choice", e.body
    print("400 ok:", e.body["message"])
print("ALL OK")
