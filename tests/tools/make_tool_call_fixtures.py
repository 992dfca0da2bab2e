"""Tool-call transcripts from real chat templates, rendered by Python jinja2 the way transformers does.

For every tests/data/chat-templates/*.jinja, renders a conversation whose last assistant message makes tool
calls, and the same conversation up to the generation prompt; what the first adds after the second is the
text the model would have written for those calls. Records it with the calls into
tests/data/tool-calls/transcripts.json; the engine's tests parse each transcript back (whole and split at
every byte) and must find the same calls. Templates that write no calls, or raise, are left out.
    /path/to/venv/bin/python tests/tools/make_tool_call_fixtures.py   (jinja2 and transformers installed)
"""
import json
import pathlib

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = pathlib.Path(__file__).resolve().parents[1] / "data"
TEMPLATES = ROOT / "chat-templates"
OUT = ROOT / "tool-calls" / "transcripts.json"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "array", "items": {"type": "string"}},
            "options": {"type": "object"}, "code": {"type": "string"}, "exact": {"type": "boolean"}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time in a zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}},
]
# Arguments that test the parsers: quotes, a newline, non-ASCII, a string that looks like a number, nested values.
CALLS = [
    ("get_weather", {"city": "Paris \"Ville\" Lumière\nFrance", "days": 3, "units": ["C", "F"],
                     "options": {"deep": True, "n": [1, 2]}, "code": "42", "exact": False}),
    ("get_time", {"zone": "Asia/Tōkyō"}),
]
IDS = ["abcDEF123", "xyz789QRS"]  # Mistral's templates insist on nine letters or digits
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
USER = {"role": "user", "content": "Weather in Paris, and the time in Tokyo?"}


def render(template, messages, add_generation_prompt):
    out, _ = chat_template_utils.render_jinja_template(
        conversations=[messages], tools=TOOLS, chat_template=template,
        add_generation_prompt=add_generation_prompt, **SPECIAL)
    return out[0]


def transcript(template, calls):
    tool_calls = [{"id": IDS[i], "type": "function", "function": {"name": name, "arguments": args}}
                  for i, (name, args) in enumerate(calls)]
    before = render(template, [USER], True)
    after = render(template, [USER, {"role": "assistant", "content": "", "tool_calls": tool_calls}], False)
    # Where they part; a generation prompt that opens a thought the history leaves out (DeepSeek-R1's
    # "<think>\n") may be left behind.
    common = 0
    while common < min(len(before), len(after)) and before[common] == after[common]:
        common += 1
    if common < len(before):  # part at a tag or line boundary, not inside a shared "<"
        while common > 0 and before[common - 1] not in ">\n":
            common -= 1
    if len(before) - common > 20 or common == len(after):
        return None
    return after[common:]


def main():
    cases = []
    for path in sorted(TEMPLATES.glob("*.jinja")):
        template = path.read_text(encoding="utf-8")
        for calls in (CALLS, CALLS[:1]):  # some templates take one call per message
            try:
                text = transcript(template, calls)
            except Exception:
                continue
            if text and all(name in text for name, _ in calls):
                cases.append({"template": path.name, "text": text, "ids": IDS[:len(calls)],
                              "calls": [{"name": n, "arguments": a} for n, a in calls]})
                break
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(dict(jinja2=jinja2.__version__, transformers=transformers.__version__,
                                   special_tokens=SPECIAL, tools=TOOLS, cases=cases),
                              ensure_ascii=False, indent=1) + "\n")
    print(f"{len(cases)} templates write the calls")


if __name__ == "__main__":
    main()
