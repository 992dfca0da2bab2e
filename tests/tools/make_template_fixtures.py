"""Golden chat-template renderings from Python jinja2, the way transformers' apply_chat_template renders.

For every tests/data/chat-templates/*.jinja and a fixed set of conversations, calls transformers'
render_jinja_template (jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loop
controls, transformers' tojson, raise_exception and strftime_now) with the clock fixed, and records the
text or the error into tests/data/chat-templates/golden.json, together with the inputs.
    tests/tools/.venv/bin/python tests/tools/make_template_fixtures.py
"""
import datetime as real_datetime
import json
import pathlib

import jinja2
import transformers
from transformers.utils import chat_template_utils

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "chat-templates"
NOW = real_datetime.datetime(2026, 11, 29, 12, 0, 0)  # also in the C++ test: 1796731200 seconds, UTC


class FixedClock:
    @staticmethod
    def now():
        return NOW


chat_template_utils.datetime = FixedClock  # strftime_now reads the module's datetime

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

SCENARIOS = {
    "system_user": dict(messages=[SYSTEM, {"role": "user", "content": "Hello! How are you?"}], add_generation_prompt=True),
    "user_only": dict(messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True),
    "multi_turn": dict(messages=[SYSTEM, {"role": "user", "content": "What is 2+2?"},
                                 {"role": "assistant", "content": "2+2 equals 4."},
                                 {"role": "user", "content": "And 3+3?"}], add_generation_prompt=True),
    "multi_turn_no_generation_prompt": dict(messages=[SYSTEM, {"role": "user", "content": "What is 2+2?"},
                                                      {"role": "assistant", "content": "2+2 equals 4."}],
                                            add_generation_prompt=False),
    "reasoning": dict(messages=[{"role": "user", "content": "Solve x + 1 = 3."},
                                {"role": "assistant", "content": "x = 2",
                                 "reasoning_content": "Subtract 1 from both sides: x = 2."},
                                {"role": "user", "content": "Thanks! And x + 2 = 3?"}], add_generation_prompt=True),
    "tools": dict(messages=[SYSTEM, {"role": "user", "content": "What's the weather in Paris?"},
                            {"role": "assistant", "content": "",
                             "tool_calls": [{"id": "call_1", "type": "function",
                                             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                             "content": "{\"temperature\": 18, \"unit\": \"celsius\"}"}],
                  tools=[WEATHER_TOOL], add_generation_prompt=True),
    "no_thinking": dict(messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                        chat_template_kwargs={"enable_thinking": False}),
}
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}


def render(template, scenario):
    kwargs = dict(SPECIAL, **scenario.get("chat_template_kwargs", {}))
    out, _ = chat_template_utils.render_jinja_template(
        conversations=[scenario["messages"]], tools=scenario.get("tools"), chat_template=template,
        add_generation_prompt=scenario["add_generation_prompt"], **kwargs)
    return out[0]


def main():
    golden = {}
    for path in sorted(DATA.glob("*.jinja")):
        template = path.read_text(encoding="utf-8")
        results = {}
        for name, scenario in SCENARIOS.items():
            try:
                results[name] = {"ok": True, "text": render(template, scenario)}
            except Exception as e:  # the template raised, or jinja2 refused it: ours must fail too
                results[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        golden[path.name] = results
    (DATA / "golden.json").write_text(json.dumps(dict(
        jinja2=jinja2.__version__, transformers=transformers.__version__, now_epoch_utc=int(NOW.replace(
            tzinfo=real_datetime.timezone.utc).timestamp()), special_tokens=SPECIAL, scenarios=SCENARIOS,
        results=golden), ensure_ascii=False, indent=1) + "\n")
    ok = sum(r["ok"] for t in golden.values() for r in t.values())
    print(f"{len(golden)} templates x {len(SCENARIOS)} conversations, {ok} rendered, the rest raised")


if __name__ == "__main__":
    main()
