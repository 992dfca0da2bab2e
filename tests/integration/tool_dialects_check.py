"""Tool calls in each dialect, against a running ftllmd serving one model per chat template (argv: base URL,
then NAME=DIALECT for each). Through the OpenAI SDK: tool_choice required and named give calls whose
arguments validate (Python's jsonschema), streamed calls arrive name first with their arguments growing,
the call goes back to the model with a tool result (its template must accept the ids and arguments it
was given), and tool_choice none gives no call. Prints a line per model and exits non-zero on a failure.
"""
import json
import re
import sys
from types import SimpleNamespace

import jsonschema
import openai

from example_tools import add, schemas, tools, weather

base, models = sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)

question = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_id(dialect, call_id, name, index):
    if dialect == "kimi-k2":
        assert call_id == f"functions.{name}:{index}", call_id
    elif dialect.startswith("mistral"):
        assert re.fullmatch(r"[A-Za-z0-9]{9}", call_id), call_id
    else:
        assert call_id, call_id


def check(model, dialect):
    # Required: one call, valid arguments, no content.
    r = client.chat.completions.create(model=model, messages=question, tools=tools, tool_choice="required",
                                       parallel_tool_calls=False, max_tokens=200, temperature=0)
    choice = r.choices[0]
    # A random-weight model may loop greedily inside a number the grammar lets grow (gemma2's "8888...")
    # until max_tokens; the call is then cut off unfinished, which is all a limit can do (a stand-in call
    # goes back in the history below).
    first = SimpleNamespace(id="call_0", function=SimpleNamespace(name="add", arguments='{"a": 1, "b": 2}'))
    if choice.finish_reason != "length":
        assert choice.finish_reason == "tool_calls" and choice.message.content is None, choice
        assert len(choice.message.tool_calls) == 1, choice.message.tool_calls
        first = choice.message.tool_calls[0]
        jsonschema.validate(json.loads(first.function.arguments), schemas[first.function.name])
        check_id(dialect, first.id, first.function.name, 0)
    # Named, sampled.
    for seed in range(2):
        # 80 tokens hold a call and more (sampled, most of these run to the limit: parallel calls, or loops).
        r = client.chat.completions.create(model=model, messages=question, tools=tools, max_tokens=80, temperature=1.0,
                                           seed=seed, tool_choice={"type": "function", "function": {"name": "add"}})
        calls = r.choices[0].message.tool_calls or []
        if not calls and r.choices[0].finish_reason == "length":
            # A model that thinks first may think until max_tokens: cut off, with nothing but reasoning; a
            # random one may loop inside the call's number: cut off, the unfinished call left as text.
            content = r.choices[0].message.content
            assert not content or "add" in content, r.choices[0]
            continue
        assert calls and {c.function.name for c in calls} == {"add"}, r.choices[0]
        for c in calls:
            jsonschema.validate(json.loads(c.function.arguments), add)
    # Streamed: the first delta of the call names it (with its id), the arguments follow in pieces.
    name, arguments, call_id, pieces, finish = None, "", None, 0, None
    for chunk in client.chat.completions.create(model=model, messages=question, tools=tools, stream=True, max_tokens=200,
                                                temperature=0, parallel_tool_calls=False,
                                                tool_choice={"type": "function", "function": {"name": "get_weather"}}):
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for delta in c.delta.tool_calls or []:
                if delta.function.name:
                    assert name is None and not arguments, "the name came after arguments"
                    name, call_id = delta.function.name, delta.id
                arguments += delta.function.arguments or ""
                pieces += 1
    assert finish == "tool_calls" and name == "get_weather", (finish, name)
    jsonschema.validate(json.loads(arguments), weather)
    check_id(dialect, call_id, name, 0)
    assert pieces > 2, f"the call came in {pieces} pieces"
    # The call goes back with its result, as agents send it: the template takes our ids and arguments.
    history = question + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": first.id, "type": "function", "function": {"name": first.function.name, "arguments": first.function.arguments}}]},
        {"role": "tool", "tool_call_id": first.id, "content": "{\"temperature\": 18}"}]
    r = client.chat.completions.create(model=model, messages=history, tools=tools, tool_choice="none", max_tokens=16, temperature=0)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason != "tool_calls", r.choices[0]
    # tool_choice none: text, never a call.
    r = client.chat.completions.create(model=model, messages=question, tools=tools, tool_choice="none", max_tokens=24, temperature=0)
    assert r.choices[0].message.tool_calls is None, r.choices[0]
    print(f"{model} ({dialect}) ok: {first.function.name}({first.function.arguments}) id {first.id}; streamed in {pieces} pieces")


for model, dialect in models.items():
    check(model, dialect)
print("ALL OK")
