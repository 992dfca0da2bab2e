"""Ollama's API through the official `ollama` client library, as tools that speak it use the daemon:
  python ollama_check.py BASE_URL MODEL EMBED_BASE_URL EMBED_MODEL EMBED_REFERENCE_JSON
list, ps, show and version; chat and generate whole and streamed (a stream's pieces make the whole answer,
which is what /v1/chat/completions gives for the same greedy request); format "json"; an embedding model's
vectors for texts (sentence-transformers' for the same texts, cosine > 0.99999); and Ollama's error shape
for an unknown model, a wrong option and the model-management routes. Prints "ok" or raises."""
import json
import math
import sys

import ollama
import openai


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def expect_error(status, says, fn):
    try:
        fn()
    except ollama.ResponseError as e:
        assert e.status_code == status, (e.status_code, e.error)
        assert says in e.error, e.error
        return
    raise AssertionError("no error; expected %d %r" % (status, says))


def main(base, model, embed_base, embed_model, reference):
    client = ollama.Client(host=base)
    assert [m.model for m in client.list().models] == [model]
    running = client.ps().models
    assert running[0].model == model and running[0].context_length > 0, running
    shown = client.show(model)
    assert "completion" in shown.capabilities and shown.modelinfo["general.parameter_count"] > 1e8, shown
    assert shown.details.format == "gguf"

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    options = {"temperature": 0, "num_predict": 24}
    whole = client.chat(model=model, messages=messages, options=options)
    assert whole.done and whole.done_reason in ("stop", "length") and whole.eval_count > 0 and whole.prompt_eval_count > 10, whole
    assert whole.total_duration >= whole.eval_duration > 0, whole
    pieces = list(client.chat(model=model, messages=messages, options=options, stream=True))
    assert all(not p.done for p in pieces[:-1]) and pieces[-1].done and pieces[-1].done_reason == whole.done_reason
    assert "".join(p.message.content for p in pieces) == whole.message.content
    oai = openai.OpenAI(base_url=base + "/v1", api_key="none").chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=24)
    assert oai.choices[0].message.content == whole.message.content, (oai.choices[0].message.content, whole.message.content)
    assert oai.usage.completion_tokens == whole.eval_count

    generated = client.generate(model=model, prompt="Hello", system="You are terse.", options=options)
    streamed = list(client.generate(model=model, prompt="Hello", system="You are terse.", options=options, stream=True))
    assert "".join(p.response for p in streamed) == generated.response and generated.response, generated
    raw = client.generate(model=model, prompt="The capital of France is", raw=True, options={"temperature": 0, "num_predict": 4})
    assert raw.done_reason == "length" and raw.eval_count == 4, raw
    loaded = client.generate(model=model, prompt="")
    assert loaded.done and loaded.done_reason == "load", loaded

    as_json = client.chat(model=model, messages=[{"role": "user", "content": "Give me a JSON object about a cat."}],
                          format="json", options={"temperature": 0, "num_predict": 60})
    if as_json.done_reason == "stop":
        json.loads(as_json.message.content)
    # Tools and a tool result named as Ollama names them (tool_name, arguments as an object) are taken.
    tools = [{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    turn = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "Sunny, 21 C", "tool_name": "weather"}]
    assert client.chat(model=model, messages=turn, tools=tools, options={"num_predict": 8}).done

    expect_error(404, "not found", lambda: client.chat(model="nope", messages=messages))
    expect_error(400, "temperature", lambda: client.chat(model=model, messages=messages, options={"temperature": "hot"}))
    expect_error(400, "messages", lambda: client.chat(model=model, messages=[{"role": "wizard", "content": "x"}]))
    expect_error(403, "ftllmctl load", lambda: client.pull("llama3"))
    expect_error(403, "ftllmctl unload", lambda: client.delete(model))
    expect_error(400, "not an embedding model", lambda: client.embed(model=model, input="x"))

    ref = json.load(open(reference))
    got = ollama.Client(host=embed_base).embed(model=embed_model, input=ref["texts"])
    assert len(got.embeddings) == len(ref["texts"]) and got.prompt_eval_count == sum(len(t) for t in ref["token_ids"]), got
    for v, want in zip(got.embeddings, ref["embeddings"]):
        assert cosine(v, want) > 0.99999, cosine(v, want)
    one = ollama.Client(host=embed_base).embed(model=embed_model, input=ref["texts"][0], dimensions=16)
    assert len(one.embeddings[0]) == 16 and abs(sum(x * x for x in one.embeddings[0]) - 1) < 1e-5
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:6])
