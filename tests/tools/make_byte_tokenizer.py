"""A tokenizer for the random-weight fixture models (vocab_size 512, bos 1, eos 2): Llama 2's layout cut
down to its special and byte tokens (<unk>, <s>, </s>, <0x00>..<0xFF>, ids 0..258), no merges, no
normaliser: every byte of text is one token, so constrained decoding can be run on those models with any
grammar. Written from tests/data/tokenizers/llama2/tokenizer.json into tests/data/tokenizers/bytes/
(tokenizer.json.xz, which scripts/setup.sh unpacks).
    python3 tests/tools/make_byte_tokenizer.py
"""
import json
import lzma
import pathlib

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizers"

llama2 = json.loads((DATA / "llama2" / "tokenizer.json").read_text())
llama2["model"]["vocab"] = {token: i for token, i in llama2["model"]["vocab"].items() if i < 259}
llama2["model"]["merges"] = []
llama2["normalizer"] = None
llama2["decoder"] = {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}
text = json.dumps(llama2, ensure_ascii=False, indent=1) + "\n"
(DATA / "bytes" / "tokenizer.json").write_text(text)
# Stored compressed like the other test vocabularies; scripts/setup.sh unpacks it.
(DATA / "bytes" / "tokenizer.json.xz").write_bytes(lzma.compress(text.encode()))
print(len(llama2["model"]["vocab"]), "tokens")
