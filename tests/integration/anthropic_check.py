"""Anthropic's Messages API through the official `anthropic` SDK:
  python anthropic_check.py BASE_URL MODEL
messages.create whole and streamed (the stream's events, in Anthropic's order, make the same message the
whole request gives, and its text is what /v1/chat/completions gives for the same greedy request);
stop_sequences; output_config's JSON schema; a tool round trip (a forced tool_use whose input fits the tool's schema, then its
tool_result answered); count_tokens; x-api-key; and Anthropic's error shape. Prints "ok" or raises."""
import sys

import json

import anthropic
import openai

GREEDY = {"temperature": 0}  # the SDK no longer has the parameter; the API still takes it


def main(base, model):
    client = anthropic.Anthropic(base_url=base, api_key="none")
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    whole = client.messages.create(model=model, max_tokens=24, extra_body=GREEDY, system="You are helpful.", messages=messages)
    assert whole.type == "message" and whole.role == "assistant" and whole.model == model, whole
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.input_tokens > 10 and whole.usage.output_tokens > 0, whole
    text = "".join(b.text for b in whole.content if b.type == "text")
    assert text, whole
    oai = openai.OpenAI(base_url=base + "/v1", api_key="none").chat.completions.create(
        model=model, extra_body=GREEDY, max_tokens=24, messages=[{"role": "system", "content": "You are helpful."}] + messages)
    assert oai.choices[0].message.content == text, (oai.choices[0].message.content, text)

    kinds = []
    with client.messages.stream(model=model, max_tokens=24, extra_body=GREEDY, system="You are helpful.", messages=messages) as s:
        for event in s:
            kinds.append(event.type)
        final = s.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_start" in kinds, kinds
    assert kinds.index("content_block_stop") > kinds.index("content_block_delta") and "message_delta" in kinds, kinds
    assert "".join(b.text for b in final.content if b.type == "text") == text, final
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens, final

    stopped = client.messages.create(model=model, max_tokens=40, extra_body=GREEDY, messages=messages, stop_sequences=["Paris"])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "Paris", stopped
    assert "Paris" not in stopped.content[0].text and stopped.content[0].text, stopped

    tools = [{"name": "get_weather", "description": "The weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    call = client.messages.create(model=model, max_tokens=60, extra_body=GREEDY, messages=ask, tools=tools,
                                  tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    uses = [b for b in call.content if b.type == "tool_use"]
    assert call.stop_reason == "tool_use" and uses and uses[0].name == "get_weather", call
    assert isinstance(uses[0].input, dict) and isinstance(uses[0].input.get("city"), str), uses[0]
    with client.messages.stream(model=model, max_tokens=60, extra_body=GREEDY, messages=ask, tools=tools,
                                tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}) as s:
        streamed_call = s.get_final_message()
    streamed_uses = [b for b in streamed_call.content if b.type == "tool_use"]
    assert streamed_uses and streamed_uses[0].input == uses[0].input, streamed_call
    answer = client.messages.create(model=model, max_tokens=20, extra_body=GREEDY, tools=tools, messages=ask + [
        {"role": "assistant", "content": call.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "Sunny, 21 C"}]}])
    assert answer.stop_reason in ("end_turn", "max_tokens", "tool_use") and answer.content, answer

    schema = {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
              "required": ["city", "country"], "additionalProperties": False}
    shaped = client.messages.create(model=model, max_tokens=60, extra_body=GREEDY, messages=messages,
                                    output_config={"format": {"type": "json_schema", "schema": schema}})
    assert shaped.stop_reason == "end_turn" and sorted(json.loads(shaped.content[0].text)) == ["city", "country"], shaped

    counted = client.messages.count_tokens(model=model, system="You are helpful.", messages=messages)
    assert counted.input_tokens == whole.usage.input_tokens, (counted, whole.usage)

    for bad, kind, says in [({"model": "nope"}, anthropic.NotFoundError, "not loaded"),
                            ({"max_tokens": 0}, anthropic.BadRequestError, "max_tokens"),
                            ({"messages": [{"role": "system", "content": "x"}]}, anthropic.BadRequestError, "role"),
                            ({"extra_body": {"temperature": 7}}, anthropic.BadRequestError, "temperature")]:
        args = dict(model=model, max_tokens=8, messages=messages)
        args.update(bad)
        try:
            client.messages.create(**args)
            raise AssertionError("no error for %r" % bad)
        except kind as e:
            assert e.body["type"] == "error" and says in e.body["error"]["message"], e.body
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:3])
