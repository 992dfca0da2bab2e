"""The two tools the tool-call checks offer (tool_choice_check.py, tool_dialects_check.py): their parameter
schemas, the tools as OpenAI's API takes them, and each tool's schema by name for jsonschema."""
weather = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"], "additionalProperties": False}
add = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
       "required": ["a", "b"], "additionalProperties": False}
tools = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": weather}},
         {"type": "function", "function": {"name": "add", "description": "Adds two integers.", "parameters": add}}]
schemas = {"get_weather": weather, "add": add}
