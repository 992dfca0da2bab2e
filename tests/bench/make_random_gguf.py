"""Random-weight GGUF models of real shapes, for speed measurements without downloading weights:
float16 weights (normal, std 0.02) in llama.cpp's layout, with a real vocabulary of the right family
copied from a GGUF vocabulary file so llama.cpp and ftllm both accept them. Quantize the result with
llama-quantize for the other block types, or give TYPE q8_0 / q4_0 to have gguf-py quantize the matrices
(every matrix; llama-quantize keeps the embedding at a higher type, so pass the same TYPE to both sides).
  python make_random_gguf.py SHAPE OUT.gguf VOCAB.gguf [f16|q8_0|q4_0]
SHAPE: smollm2-135m, qwen2.5-0.5b, qwen3-0.6b, llama-3.2-1b. Needs gguf and numpy."""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants

# arch, hidden, intermediate, layers, heads, kv heads, head dim, tied, qkv bias, qk norm, rope theta
SHAPES = {
    "smollm2-135m": ("llama", 576, 1536, 30, 9, 3, 64, True, False, False, 100000.0),
    "qwen2.5-0.5b": ("qwen2", 896, 4864, 24, 14, 2, 64, True, True, False, 1000000.0),
    "qwen3-0.6b": ("qwen3", 1024, 3072, 28, 16, 8, 128, True, False, True, 1000000.0),
    "llama-3.2-1b": ("llama", 2048, 8192, 16, 32, 8, 64, True, False, False, 500000.0),
}


def main(shape, out, vocab_path, dtype="f16"):
    arch, hidden, inter, layers, heads, kv, hd, tied, bias, qk_norm, theta = SHAPES[shape]
    vocab = GGUFReader(vocab_path)
    w = GGUFWriter(out, arch)
    n_vocab = 0
    for name, field in vocab.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = field.contents()
        if field.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(name, value, GGUFValueType.ARRAY, sub_type=field.types[-1])
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            w.add_key_value(name, value, field.types[0])
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(inter)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(theta)
    w.add_context_length(4096)
    w.add_vocab_size(n_vocab)
    rng = np.random.default_rng(0)

    qtype = {"q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0}.get(dtype)

    def mat(rows, cols):
        m = rng.standard_normal((rows, cols), dtype=np.float32).__imul__(0.02)
        return m.astype(np.float16) if qtype is None else quants.quantize(m, qtype)

    add_tensor = w.add_tensor

    def add_matrix_or_vector(name, t):
        add_tensor(name, t, raw_dtype=qtype if qtype is not None and t.dtype == np.uint8 else None)

    w.add_tensor = add_matrix_or_vector

    def ones(n):
        return np.ones(n, np.float32)

    w.add_tensor("token_embd.weight", mat(n_vocab, hidden))
    w.add_tensor("output_norm.weight", ones(hidden))
    if not tied:
        w.add_tensor("output.weight", mat(n_vocab, hidden))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(hidden))
        w.add_tensor(p + "attn_q.weight", mat(heads * hd, hidden))
        w.add_tensor(p + "attn_k.weight", mat(kv * hd, hidden))
        w.add_tensor(p + "attn_v.weight", mat(kv * hd, hidden))
        w.add_tensor(p + "attn_output.weight", mat(hidden, heads * hd))
        if bias:
            for t, n in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd)):
                w.add_tensor(p + f"attn_{t}.bias", np.zeros(n, np.float32))
        if qk_norm:
            w.add_tensor(p + "attn_q_norm.weight", ones(hd))
            w.add_tensor(p + "attn_k_norm.weight", ones(hd))
        w.add_tensor(p + "ffn_norm.weight", ones(hidden))
        w.add_tensor(p + "ffn_gate.weight", mat(inter, hidden))
        w.add_tensor(p + "ffn_up.weight", mat(inter, hidden))
        w.add_tensor(p + "ffn_down.weight", mat(hidden, inter))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: {shape}, vocabulary of {n_vocab} from {vocab_path}")


if __name__ == "__main__":
    main(*sys.argv[1:5])
