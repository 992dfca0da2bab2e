"""A Kimi-style tiktoken tokenizer (tests/data/tokenizers/kimi-synth/) and the ids the `tiktoken` package
gives for a corpus, the oracle of the engine's tiktoken reader.

Kimi-K2 ships `tiktoken.model` (base64 token, rank per line) and `tokenizer_config.json` (its special
tokens), read by its tokenization_kimi.py: tiktoken's BPE with Kimi's split pattern, special tokens after
the base ranks (named by added_tokens_decoder, the rest <|reserved_token_N|>), text cut into pieces of at
most 400,000 characters and runs of at most 25,000 whitespace or non-whitespace characters. Kimi's own
ranks are not redistributable here, so the ranks are Qwen3's byte-level vocabulary (itself tiktoken-born)
turned back into bytes; the pattern, special-token layout and chunking are Kimi's.
Run: tests/tools/.venv/bin/python tests/tools/make_tiktoken_fixtures.py (needs tiktoken).
"""
import base64
import json
import pathlib

import tiktoken

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizers"
OUT = DATA / "kimi-synth"

# tokenization_kimi.py's pat_str (fancy-regex syntax, class intersections included).
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
NAMED_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>", 6: "<|start_header_id|>",
                  7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>", 15: "<|tool_calls_section_begin|>",
                  16: "<|tool_calls_section_end|>", 17: "<|tool_call_begin|>", 18: "<|tool_call_argument_begin|>",
                  19: "<|tool_call_end|>", 20: "<|im_middle|>", 257: "[UNK]"}  # offsets past the base ranks


def gpt2_byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def kimi_encode(enc, text):
    """Kimi's encode: 400,000-character pieces, each cut where a run of whitespace or of non-whitespace
    (str.isspace) would pass 25,000 characters; every piece through tiktoken with all specials allowed."""
    out = []
    for i in range(0, len(text), 400_000):
        s = text[i:i + 400_000]
        start, run, space = 0, 0, s[0].isspace() if s else False
        for j, ch in enumerate(s):
            if ch.isspace() != space:
                run, space = 1, ch.isspace()
            else:
                run += 1
                if run > 25_000:
                    out += enc.encode(s[start:j], allowed_special="all")
                    start, run = j, 1
        out += enc.encode(s[start:], allowed_special="all")
    return out


def main():
    qwen = json.loads((DATA / "qwen3" / "tokenizer.json").read_text(encoding="utf-8"))
    decode = gpt2_byte_decoder()
    ranks = {bytes(decode[c] for c in token): rank for token, rank in qwen["model"]["vocab"].items()}
    assert sorted(ranks.values()) == list(range(len(ranks)))
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "tiktoken.model", "w") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    base = len(ranks)
    specials = {NAMED_SPECIALS.get(i, f"<|reserved_token_{base + i}|>"): base + i for i in range(256 + 2)}
    config = {"tokenizer_class": "TikTokenTokenizer", "bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]",
              "pad_token": "[EOS]", "model_max_length": 131072,
              "added_tokens_decoder": {str(base + i): {"content": name, "special": True, "lstrip": False, "rstrip": False,
                                                       "normalized": False, "single_word": False}
                                       for i, name in NAMED_SPECIALS.items()}}
    (OUT / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")

    enc = tiktoken.Encoding(name="kimi-synth", pat_str=KIMI_PATTERN, mergeable_ranks=ranks, special_tokens=specials)
    corpus = json.loads((DATA / "corpus.json").read_text(encoding="utf-8"))["texts"]
    corpus += [
        "中文English混合", "汉字abc", "北京市 Pascal", "DON'T Stop's ÉCOLE's naïve CAFÉ'S",
        "Ünïcödé ﬁrst and 〇二三 and ー長音 and 、。「」", "ǅungla ǈ titlecase ǋ", "x̧̌ combining marks Ａ̊",
        "[BOS]hello[EOS] <|im_user|>user<|im_middle|>hi<|im_end|> <|reserved_token_" + str(base + 30) + "|>",
        " " * 30000 + "x", "a" * 30000, ("ab " * 5) + "b" * 25001 + " end", "\n" * 26000 + "\t" * 10,
        "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace") + "\x00\x01 control",
    ]
    rows = [dict(text=t, ids=kimi_encode(enc, t)) for t in corpus]
    for r in rows:
        assert enc.decode(r["ids"]) == r["text"], r["text"][:40]
    (OUT / "golden.json").write_text(json.dumps(dict(tiktoken=tiktoken.__version__, base_tokens=base, rows=rows),
                                                ensure_ascii=False) + "\n")
    print(f"kimi-synth: {base} ranks, {len(specials)} specials, {len(rows)} texts, tiktoken {tiktoken.__version__}")


if __name__ == "__main__":
    main()
