"""OpenAI's Responses API through the official SDK (responses.create, whole and streamed):
  python responses_check.py BASE_URL MODEL
The streamed events (response.created first, response.completed last, output_text deltas making the text)
give the same output as the whole request, whose text is what /v1/chat/completions gives for the same
greedy request; instructions; max_output_tokens (an incomplete response); text.format json_schema; a
function tool round trip (a forced function_call, its arguments streamed as deltas, then its
function_call_output answered); store and previous_response_id refused, saying why; errors in OpenAI's
shape. Prints "ok" or raises."""
import json
import sys

import openai


def main(base, model):
    client = openai.OpenAI(base_url=base + "/v1", api_key="none")
    whole = client.responses.create(model=model, instructions="You are helpful.", input="What is the capital of France?",
                                    temperature=0, max_output_tokens=24, store=False)
    assert whole.object == "response" and whole.status in ("completed", "incomplete") and whole.output[-1].type == "message", whole
    assert whole.usage.input_tokens > 10 and whole.usage.output_tokens > 0, whole.usage
    chat = client.chat.completions.create(model=model, temperature=0, max_tokens=24, messages=[
        {"role": "system", "content": "You are helpful."}, {"role": "user", "content": "What is the capital of France?"}])
    assert whole.output_text == chat.choices[0].message.content, (whole.output_text, chat.choices[0].message.content)

    events = list(client.responses.create(model=model, instructions="You are helpful.", input="What is the capital of France?",
                                          temperature=0, max_output_tokens=24, store=False, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response." + whole.status, kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == whole.output_text
    assert events[-1].response.output_text == whole.output_text

    short = client.responses.create(model=model, input=[{"role": "user", "content": "Tell me a long story."}],
                                    temperature=0, max_output_tokens=5, store=False)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens", short

    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    shaped = client.responses.create(model=model, input="What is the capital of France?", temperature=0, max_output_tokens=60,
                                     store=False, text={"format": {"type": "json_schema", "name": "place", "schema": schema}})
    assert shaped.status == "completed" and sorted(json.loads(shaped.output_text)) == ["city", "country"], shaped

    tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = {"type": "function", "name": "get_weather"}
    called = client.responses.create(model=model, input=ask, tools=tools, tool_choice=forced, parallel_tool_calls=False,
                                     temperature=0, max_output_tokens=60, store=False)
    calls = [o for o in called.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather" and isinstance(json.loads(calls[0].arguments)["city"], str), called
    streamed = list(client.responses.create(model=model, input=ask, tools=tools, tool_choice=forced, parallel_tool_calls=False,
                                            temperature=0, max_output_tokens=60, store=False, stream=True))
    pieces = "".join(e.delta for e in streamed if e.type == "response.function_call_arguments.delta")
    done = [e for e in streamed if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == pieces and json.loads(pieces) == json.loads(calls[0].arguments), streamed
    answer = client.responses.create(model=model, tools=tools, temperature=0, max_output_tokens=20, store=False, input=ask + [
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 21 C"}])
    assert answer.output, answer

    for args, says in [({"store": True}, "keeps no responses"), ({"previous_response_id": "resp_1"}, "previous_response_id"),
                       ({"input": [{"role": "wizard", "content": "x"}]}, "role"), ({"temperature": 7}, "temperature"),
                       ({"model": "nope"}, "not loaded"), ({"tools": [{"type": "web_search"}]}, "function tools")]:
        request = dict(model=model, input="Hi", max_output_tokens=4, store=False)
        request.update(args)
        try:
            client.responses.create(**request)
            raise AssertionError("no error for %r" % args)
        except openai.APIStatusError as e:
            assert e.status_code in (400, 404) and says in e.body["message"], (args, e.status_code, e.body)
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:3])
