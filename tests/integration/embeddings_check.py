"""/v1/embeddings through the official OpenAI SDK (which asks for base64 by default and decodes it):
  python embeddings_check.py BASE_URL MODEL REFERENCE_JSON
The token-id inputs of a fixture give sentence-transformers' vectors (cosine > 0.99999), as floats and
as base64; `dimensions` gives the first N values renormalised. Prints "ok" or raises."""
import base64
import json
import math
import struct
import sys

import openai


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main(base_url, model, reference):
    ref = json.load(open(reference))
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="none")
    # The SDK's default (base64, decoded by the SDK), floats, and base64 asked for (the SDK hands the text over).
    for fmt in (openai.NOT_GIVEN, "float", "base64"):
        r = client.embeddings.create(model=model, input=ref["token_ids"], encoding_format=fmt)
        assert [d.index for d in r.data] == list(range(len(ref["token_ids"]))), r.data
        for d, want in zip(r.data, ref["embeddings"]):
            got = d.embedding
            if isinstance(got, str):
                raw = base64.b64decode(got)
                got = list(struct.unpack(f"<{len(raw) // 4}f", raw))
            assert len(got) == len(want), (fmt, len(got), len(want))
            assert cosine(got, want) > 0.99999, (fmt, d.index, cosine(got, want))
        assert r.usage.prompt_tokens == sum(len(t) for t in ref["token_ids"]), r.usage
        assert r.model == model
    one = client.embeddings.create(model=model, input=ref["token_ids"][0])  # one input as token ids
    assert len(one.data) == 1 and cosine(one.data[0].embedding, ref["embeddings"][0]) > 0.99999
    short = client.embeddings.create(model=model, input=ref["token_ids"][:1], dimensions=16).data[0].embedding
    head = ref["embeddings"][0][:16]
    norm = math.sqrt(sum(x * x for x in head))
    assert len(short) == 16 and abs(sum(x * x for x in short) - 1) < 1e-5
    assert max(abs(a - b / norm) for a, b in zip(short, head)) < 1e-4
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:4])
