"""Reasoning through the other APIs, against a daemon whose template opens <think> for the answer (so what
the model writes is reasoning until it closes it): the same reasoning /v1/chat/completions gives as
reasoning_content comes as a Responses API reasoning item (whole, and as response.reasoning_text.delta
events), as an Anthropic thinking block (whole, and as thinking_delta events), and as Ollama's
message.thinking (whole and streamed).
  python thinking_check.py BASE_URL MODEL
Prints "ok" or raises."""
import sys

import anthropic
import ollama
import openai

QUESTION = "Why is the sky blue?"


def main(base, model):
    oai = openai.OpenAI(base_url=base + "/v1", api_key="none")
    chat = oai.chat.completions.create(model=model, messages=[{"role": "user", "content": QUESTION}], max_tokens=6, temperature=0)
    reasoning = chat.choices[0].message.model_extra["reasoning_content"]
    assert reasoning, chat

    whole = oai.responses.create(model=model, input=QUESTION, max_output_tokens=6, temperature=0, store=False)
    items = [o for o in whole.output if o.type == "reasoning"]
    assert items and items[0].content[0].text == reasoning, whole
    assert whole.usage.output_tokens_details.reasoning_tokens == 6, whole.usage
    events = list(oai.responses.create(model=model, input=QUESTION, max_output_tokens=6, temperature=0, store=False, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == reasoning, events
    assert [e.item.type for e in events if e.type == "response.output_item.added"] == ["reasoning"], events

    claude = anthropic.Anthropic(base_url=base, api_key="none")
    message = claude.messages.create(model=model, max_tokens=6, extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": QUESTION}])
    assert message.content[0].type == "thinking" and message.content[0].thinking == reasoning, message
    with claude.messages.stream(model=model, max_tokens=6, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": QUESTION}]) as s:
        deltas = [e.delta.thinking for e in s if e.type == "content_block_delta" and e.delta.type == "thinking_delta"]
    assert "".join(deltas) == reasoning, deltas

    local = ollama.Client(host=base)
    answer = local.chat(model=model, messages=[{"role": "user", "content": QUESTION}], options={"temperature": 0, "num_predict": 6})
    assert answer.message.thinking == reasoning and answer.message.content == "", answer
    pieces = list(local.chat(model=model, messages=[{"role": "user", "content": QUESTION}], stream=True,
                             options={"temperature": 0, "num_predict": 6}))
    assert "".join(p.message.thinking or "" for p in pieces) == reasoning, pieces
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:3])
