"""Structured output against a running ftllmd (argv: base URL, model name or names separated by commas,
number of generated schemas, and "schemas" to check the schemas alone). Every schema goes to every model.

Python's jsonschema is the oracle. Generated schemas (every keyword the README lists: types, properties,
required, additionalProperties, enum, const, anyOf/oneOf, $ref/$defs with recursion, arrays with
items/prefixItems/minItems/maxItems, string lengths/pattern/format, number bounds, nullable types) plus the
shapes Pydantic and zod write, each sent greedy or sampled at a high temperature so the model's own
wishes are close to random: whatever it picks, an answer that finished ("stop") must parse and validate;
only a max_tokens cut-off ("length") may be incomplete. Then the OpenAI SDK's parse() with a Pydantic
model, json_object mode, llama-server's json_schema and grammar fields, and the 400s.
Prints one line per check and exits non-zero on the first failure.
"""
import concurrent.futures
import json
import random
import sys
from typing import List, Literal, Optional

import jsonschema
import openai
import pydantic

base, models, count = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
schemas_only = sys.argv[4:] == ["schemas"]
model = models[0]
client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=300)
rng = random.Random(20261202)


def leaf(depth):
    kind = rng.choice(["string", "integer", "number", "boolean", "enum", "const", "format", "pattern", "null"])
    if kind == "string":
        s = {"type": "string", "maxLength": rng.randint(1, 12)}
        if rng.random() < 0.5:
            s["minLength"] = rng.randint(0, s["maxLength"])
        return s
    if kind == "integer":
        lo = rng.randint(-1000, 1000)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 5000)}
    if kind == "number":
        s = {"type": "number"}
        if rng.random() < 0.5:
            s["minimum"] = -rng.randint(0, 10)
            s["exclusiveMaximum"] = rng.randint(1, 100)
        return s
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 3, None, True, "a b", "x\"y"], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["fixed", 42, False, None])}
    if kind == "format":
        return {"type": "string", "format": rng.choice(["date", "date-time", "uuid", "email", "time"])}
    if kind == "pattern":
        return {"type": "string", "pattern": rng.choice(["^[a-z]{1,5}$", "^[0-9]{3}-[0-9]{2}$", "^(yes|no)$"])}
    return {"type": "null"}


def schema(depth=0):
    if depth >= 3 or rng.random() < 0.3:
        s = leaf(depth)
        if rng.random() < 0.15 and "type" in s and s["type"] != "null":
            s["type"] = [s["type"], "null"]  # a nullable type
        return s
    kind = rng.choice(["object", "object", "array", "tuple", "anyOf", "oneOf"])
    if kind == "object":
        props = {f"p{i}": schema(depth + 1) for i in range(rng.randint(1, 4))}
        s = {"type": "object", "properties": props,
             "required": rng.sample(sorted(props), rng.randint(0, len(props))),
             "additionalProperties": False}
        return s
    if kind == "array":
        lo = rng.randint(0, 2)
        return {"type": "array", "items": schema(depth + 1), "minItems": lo, "maxItems": lo + rng.randint(0, 3)}
    if kind == "tuple":
        return {"type": "array", "prefixItems": [schema(depth + 1) for _ in range(rng.randint(1, 3))], "items": False}
    if kind == "oneOf":  # disjoint branches, as oneOf requires
        return {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 5}, {"type": "boolean"}][:rng.randint(2, 3)]}
    return {"anyOf": [schema(depth + 1) for _ in range(rng.randint(2, 3))]}


FIXED = [
    # Pydantic: a model with a nested model through $defs, Optional (anyOf with null), a Literal, a list.
    {"$defs": {"Address": {"properties": {"city": {"title": "City", "type": "string", "maxLength": 20},
                                          "zip": {"title": "Zip", "type": "string", "pattern": "^[0-9]{5}$"}},
                           "required": ["city", "zip"], "title": "Address", "type": "object",
                           "additionalProperties": False}},
     "properties": {"name": {"title": "Name", "type": "string", "maxLength": 20},
                    "age": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 150}, {"type": "null"}], "title": "Age"},
                    "role": {"enum": ["admin", "user"], "title": "Role", "type": "string"},
                    "address": {"$ref": "#/$defs/Address"},
                    "tags": {"items": {"type": "string", "maxLength": 8}, "title": "Tags", "type": "array", "maxItems": 3}},
     "required": ["name", "age", "role", "address", "tags"], "title": "Person", "type": "object",
     "additionalProperties": False},
    # zod (zod-to-json-schema): $schema, additionalProperties false, nullable as a type list.
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"id": {"type": "string", "format": "uuid"}, "done": {"type": "boolean"},
                    "due": {"type": ["string", "null"], "format": "date"},
                    "priority": {"type": "integer", "minimum": 1, "maximum": 5}},
     "required": ["id", "done", "due", "priority"], "additionalProperties": False},
    # A recursive tree through $ref.
    {"$defs": {"Node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                                         "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2}},
                        "required": ["v", "kids"], "additionalProperties": False}},
     "$ref": "#/$defs/Node"},
]


def ask(i, s, model):
    greedy = i % 2 == 0
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Reply with JSON."}], max_tokens=160,
        temperature=0 if greedy else 1.5, seed=i,
        response_format={"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": s, "strict": True}})
    return r.choices[0]


schemas = FIXED + [schema() for _ in range(count)]
jobs = [(i, s, m) for i, s in enumerate(schemas) for m in models]
checked = cut = 0
with concurrent.futures.ThreadPoolExecutor(16) as pool:
    for (i, s, m), choice in zip(jobs, pool.map(lambda job: ask(*job), jobs)):
        text = choice.message.content
        if choice.finish_reason == "length":
            cut += 1
            continue
        assert choice.finish_reason == "stop", (choice.finish_reason, text)
        try:
            value = json.loads(text)
            jsonschema.validate(value, s, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        except Exception as e:
            raise SystemExit(f"{m}, schema {i} {json.dumps(s)}\noutput {text!r}\n{e}")
        checked += 1
assert checked >= len(jobs) * 3 // 4, f"only {checked} of {len(jobs)} answers finished within max_tokens"
print(f"json_schema ok: {checked} answers validate, {cut} cut off by max_tokens, of {len(schemas)} schemas"
      f" on each of {len(models)} model(s)")
if schemas_only:
    print("ALL OK")
    sys.exit(0)


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    kind: Literal["cat", "dog", "fish"]
    age: Optional[int] = pydantic.Field(ge=0, le=30)
    toys: List[str] = pydantic.Field(max_length=2)


parsed = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "Describe a pet as JSON."}],
                                       response_format=Pet, max_tokens=120, temperature=0)
pet = parsed.choices[0].message.parsed
assert isinstance(pet, Pet), parsed
print("SDK parse() with a Pydantic model ok:", pet)

obj = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Give me a JSON object."}],
                                     response_format={"type": "json_object"}, max_tokens=120, temperature=0)
if obj.choices[0].finish_reason == "stop":
    assert isinstance(json.loads(obj.choices[0].message.content), dict), obj
print("json_object ok:", obj.choices[0].message.content[:60])

# llama-server's fields, on both endpoints.
raw = client.completions.create(model=model, prompt="Is the sky blue? Answer:", max_tokens=10, temperature=1.5, seed=3,
                                extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
assert raw.choices[0].text in (" yes.", " no."), raw
print("grammar (GBNF) ok:", repr(raw.choices[0].text))
raw = client.completions.create(model=model, prompt="A number:", max_tokens=10, temperature=0,
                                extra_body={"json_schema": {"type": "integer", "minimum": 10, "maximum": 99}})
assert 10 <= json.loads(raw.choices[0].text) <= 99, raw
print("json_schema field ok:", repr(raw.choices[0].text))


def refused(param, **kwargs):
    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=4, **kwargs)
    except openai.BadRequestError as e:
        assert e.body["param"] == param, e.body
        return e.body["message"]
    raise SystemExit(f"accepted: {kwargs}")


print("400 ok:", refused("response_format.type", response_format={"type": "yaml"}))
print("400 ok:", refused("response_format.json_schema.schema", response_format={
    "type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "array", "uniqueItems": True}}}))
print("400 ok:", refused("grammar", extra_body={"grammar": "root ::= undefined_rule"}))
print("400 ok:", refused("json_schema", response_format={"type": "json_object"}, extra_body={"json_schema": {"type": "object"}}))
print("ALL OK")
