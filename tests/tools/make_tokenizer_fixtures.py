"""Golden tokenization from Hugging Face `tokenizers` for tests/data/tokenizers/corpus.json.

For each of tests/data/tokenizers/{qwen3,llama3,llama2}/tokenizer.json and a corpus of texts (several
languages, code, emoji, whitespace runs, long numbers, special-token text, invalid-looking input), records
the ids without and with special tokens and the decoded text. Run through make_fixtures.sh's environment:
    tests/tools/.venv/bin/python tests/tools/make_tokenizer_fixtures.py
"""
import json
import pathlib

import tokenizers

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizers"

CORPUS = [
    "Hello world", " Hello world", "Hello, World!", "HELLO WORLD", "hello\nworld", "hello\r\nworld",
    "I'm sure you're right, it's what WE'LL do. They've said I'd go; don't.",
    "The quick brown fox jumps over the lazy dog.",
    "Der Bär läuft über die Straße. Größe, Maß, Äpfel und Öl.",
    "Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel?",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "我想在苹果公司工作。今天天气很好，我们去公园散步吧！",
    "日本語のテキストとカタカナ、ひらがな、漢字が混ざっています。",
    "한국어 문장도 잘 토큰화되어야 합니다. 감사합니다!",
    "مرحبا بالعالم! هذا نص عربي للاختبار.",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "Việt Nam có nhiều cảnh đẹp. Tiếng Việt rất phong phú.",
    "Ελληνικά: Καλημέρα κόσμε, ώρα για δοκιμή.",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    '{"name": "ftllm", "version": [0, 1, 0], "ok": true, "nested": {"a": null}}',
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ 🦙🦙 ✅ 🚀",
    "Spaces:    four, tabs:\t\t\ttwo, newlines:\n\n\n\nend", "   leading and trailing   ", "\n\n\n", "\t", " ",
    "trailing newline\n", "mixed \t \n \r\n whitespace \u00a0 nbsp \u3000 ideographic \u2028 line sep",
    "Numbers: 0 7 42 123 1234 12345 123456789012345678901234567890 3.14159 2,718 1e-9 -273.15 0x1F",
    "Dates 2026-11-29 12:34:56 and phone +1 (555) 123-4567",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<s>[INST] What is 2+2? [/INST] 4</s>", "<think>\nreasoning\n</think>\n\nanswer", "<|endoftext|>",
    "https://example.com/path?query=1&other=two#frag and mail@example.org",
    "Markdown **bold** _italic_ `code` [link](http://x.y) # Heading\n- item 1\n- item 2",
    "e\u0301 vs \u00e9, n\u0303 vs \u00f1, Å vs A\u030a (combining forms)",
    "zero\u200bwidth\u200cjoiner\u200d and \ufeffBOM", "fullwidth ＡＢＣ１２３ and ligature ﬁ",
    "àààààààààààààààààààààààààààààààààààààààà", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!!!!!!!!????????........------======", "a" * 3 + " " * 20 + "b", "",
]


def vocab_strings(name):
    text = (DATA.parent / "vocab" / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
    return text.split("\n__ggml_vocab_test__\n")


def main():
    results = {}
    for name in ["qwen3", "llama3", "llama2"]:
        tok = tokenizers.Tokenizer.from_file(str(DATA / name / "tokenizer.json"))
        rows = []
        for text in CORPUS:
            plain = tok.encode(text, add_special_tokens=False).ids
            special = tok.encode(text, add_special_tokens=True).ids
            rows.append(dict(ids=plain, ids_special=special, decoded=tok.decode(plain, skip_special_tokens=False)))
        results[name] = rows
    # The llama2 fixture's vocabulary is not Llama 2's (it is Mistral's: "Hello" is 22557, not 15043), so
    # the llama-spm GGUF cannot be its oracle; record transformers' ids for those strings instead.
    llama2 = tokenizers.Tokenizer.from_file(str(DATA / "llama2" / "tokenizer.json"))
    spm_strings = vocab_strings("llama-spm")
    spm_ids = [llama2.encode(t, add_special_tokens=False).ids for t in spm_strings]
    (DATA / "corpus.json").write_text(json.dumps(dict(tokenizers=tokenizers.__version__, texts=CORPUS,
                                                       results=results, llama2_vocab_strings=dict(texts=spm_strings, ids=spm_ids)),
                                                  ensure_ascii=False) + "\n")
    print(f"{len(CORPUS)} texts x {len(results)} tokenizers, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
