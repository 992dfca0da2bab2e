"""LangChain (langchain-openai) against a running ftllmd whose model writes <tool_call> blocks (argv: base
URL, model name): with_structured_output returns the Pydantic object, and a full tool round trip
(bind_tools, invoke, the ToolMessage back, a final answer) completes.
Prints one line per check and exits non-zero on the first failure.
"""
import sys
from typing import Literal

import pydantic
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

base, model = sys.argv[1], sys.argv[2]
llm = ChatOpenAI(base_url=base + "/v1", api_key="unused", model=model, temperature=0, max_tokens=120, max_retries=0,
                 timeout=300)


class City(pydantic.BaseModel):
    """A city and the country it is in."""
    name: str = pydantic.Field(max_length=20)
    country: str = pydantic.Field(max_length=20)
    size: Literal["small", "medium", "large"]


city = llm.with_structured_output(City, method="json_schema").invoke("Name a city in France.")
assert isinstance(city, City), city
print("with_structured_output ok:", city)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"22 C and sunny in {city}"


with_tools = llm.bind_tools([get_weather], tool_choice="get_weather")
question = HumanMessage("What is the weather in Paris?")
asked = with_tools.invoke([question])
assert asked.tool_calls and asked.tool_calls[0]["name"] == "get_weather", asked
call = asked.tool_calls[0]
assert isinstance(call["args"].get("city"), str), call
print("bind_tools ok:", call)

result = ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])
final = llm.bind_tools([get_weather]).invoke([question, asked, result])
assert isinstance(final.content, str) and final.response_metadata.get("finish_reason") in ("stop", "length", "tool_calls"), final
print("tool round trip ok:", repr(final.content[:60]))
print("ALL OK")
