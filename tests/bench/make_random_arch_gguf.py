"""Random-weight GGUF models of the Gemma 3, Phi-4-mini and gpt-oss shapes, for speed measurements next to
llama.cpp on the same file without downloading weights. Tensors as llama.cpp's converter names and lays
them out (Gemma's 1 + w norms, Phi-3's fused qkv and gate_up with LongRoPE factor tensors, gpt-oss's
stacked MXFP4 experts with biases and sinks); matrices float16 (normal, std 0.02), gpt-oss's experts
MXFP4 with exponents that keep the values near that scale. No vocabulary: llama.cpp's "no_vocab" with the
real vocabulary size, so the embedding and LM head have their real size. Quantize with llama-quantize for
other types. Tensors are generated one at a time while writing, so a 12 GB model needs little memory.
  python make_random_arch_gguf.py SHAPE OUT.gguf
SHAPE: gemma-3-1b, phi-4-mini, gpt-oss-20b, qwen3-30b-a3b (Q4_0 matrices made directly, router float16:
17 GB instead of 61), qwen3-next-80b-a3b-16l (Q4_0, 16 of its 48 layers: 15 GB). Needs gguf and numpy."""
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType

rng = np.random.default_rng(0)


# A tensor to write: its shape and numpy dtype as stored, and how to make it (called once, while writing).
def lazy(shape, dtype, make):
    return tuple(shape), np.dtype(dtype), make


def f16(rows, cols=None):
    shape = (rows,) if cols is None else (rows, cols)
    return lazy(shape, np.float16, lambda: (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16))


def const(shape, value):
    return lazy(np.atleast_1d(shape), np.float32, lambda: np.full(shape, value, np.float32))


def mxfp4(experts, rows, cols):
    """ggml block_mxfp4 rows: [e8m0 exponent, 16 bytes of e2m1 pairs] per 32 values; exponents 119-121
    give values up to about 12 * 2^-7 (std near 0.02)."""
    def make():
        out = rng.integers(0, 256, size=(experts, rows, cols // 32, 17), dtype=np.uint8)
        out[..., 0] = rng.integers(119, 122, size=(experts, rows, cols // 32), dtype=np.uint8)
        return out.reshape(experts, rows, cols // 32 * 17)
    return lazy((experts, rows, cols // 32 * 17), np.uint8, make)


def q4_0(*shape):
    """ggml Q4_0 rows of random nibbles, float16 scales near 0.02 / 4.6 (values of std about 0.02)."""
    rows, cols = int(np.prod(shape[:-1])), shape[-1]
    def make():
        out = rng.integers(0, 256, size=(rows, cols // 32, 18), dtype=np.uint8)
        out[..., :2] = np.frombuffer(np.float16(0.0043).tobytes(), np.uint8)
        return out.reshape(*shape[:-1], cols // 32 * 18)
    return lazy((*shape[:-1], cols // 32 * 18), np.uint8, make)


def qwen3_moe(w, t):
    H, L, heads, kv, hd, E, used, I, V = 2048, 48, 32, 4, 128, 128, 8, 768, 151936
    w.add_block_count(L); w.add_embedding_length(H); w.add_feed_forward_length(6144)
    w.add_head_count(heads); w.add_head_count_kv(kv); w.add_key_length(hd); w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(1000000.0); w.add_context_length(40960)
    w.add_expert_count(E); w.add_expert_used_count(used); w.add_expert_feed_forward_length(I); w.add_vocab_size(V)
    Q = GGMLQuantizationType.Q4_0
    t("token_embd.weight", q4_0(V, H), Q); t("output_norm.weight", const(H, 1.0)); t("output.weight", q4_0(V, H), Q)
    for i in range(L):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", const(H, 1.0)); t(p + "ffn_norm.weight", const(H, 1.0))
        t(p + "attn_q_norm.weight", const(hd, 1.0)); t(p + "attn_k_norm.weight", const(hd, 1.0))
        t(p + "attn_q.weight", q4_0(heads * hd, H), Q); t(p + "attn_k.weight", q4_0(kv * hd, H), Q)
        t(p + "attn_v.weight", q4_0(kv * hd, H), Q); t(p + "attn_output.weight", q4_0(H, heads * hd), Q)
        t(p + "ffn_gate_inp.weight", f16(E, H))
        t(p + "ffn_gate_exps.weight", q4_0(E, I, H), Q); t(p + "ffn_up_exps.weight", q4_0(E, I, H), Q)
        t(p + "ffn_down_exps.weight", q4_0(E, H, I), Q)


def qwen3_next(w, t, layers=16):
    """Qwen3-Next-80B-A3B's layer shape (gated DeltaNet 16 key / 32 value heads of 128, 512 experts, 10 per
    token, a shared expert) over its first `layers` of 48 layers: all 48 are 45 GB in Q4_0, past this
    machine's 24 GiB. Every fourth layer is full attention, as in the real model."""
    H, heads, kv, hd, E, used, I, V = 2048, 16, 2, 256, 512, 10, 512, 151936
    nk, nv, dk, dv, K = 16, 32, 128, 128, 4
    w.add_block_count(layers); w.add_embedding_length(H); w.add_feed_forward_length(5120)
    w.add_head_count(heads); w.add_head_count_kv(kv); w.add_key_length(hd); w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(10000000.0); w.add_context_length(262144)
    w.add_expert_count(E); w.add_expert_used_count(used); w.add_expert_feed_forward_length(I)
    w.add_expert_shared_feed_forward_length(I); w.add_vocab_size(V)
    w.add_ssm_conv_kernel(K); w.add_ssm_state_size(dk); w.add_ssm_group_count(nk); w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(nv * dv); w.add_full_attention_interval(4); w.add_rope_dimension_count(hd // 4)
    Q = GGMLQuantizationType.Q4_0
    t("token_embd.weight", q4_0(V, H), Q); t("output_norm.weight", const(H, 1.0)); t("output.weight", q4_0(V, H), Q)
    for i in range(layers):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", const(H, 1.0)); t(p + "post_attention_norm.weight", const(H, 1.0))
        if (i + 1) % 4:
            t(p + "attn_qkv.weight", q4_0(2 * nk * dk + nv * dv, H), Q); t(p + "attn_gate.weight", q4_0(nv * dv, H), Q)
            t(p + "ssm_ba.weight", q4_0(2 * nv, H), Q); t(p + "ssm_conv1d.weight", lazy((2 * nk * dk + nv * dv, K), np.float32,
              lambda: (rng.standard_normal((2 * nk * dk + nv * dv, K), dtype=np.float32) * 0.2)))
            t(p + "ssm_dt.bias", const(nv, 0.0)); t(p + "ssm_a", const(nv, -1.0)); t(p + "ssm_norm.weight", const(dv, 1.0))
            t(p + "ssm_out.weight", q4_0(H, nv * dv), Q)
        else:
            t(p + "attn_q_norm.weight", const(hd, 1.0)); t(p + "attn_k_norm.weight", const(hd, 1.0))
            t(p + "attn_q.weight", q4_0(2 * heads * hd, H), Q); t(p + "attn_k.weight", q4_0(kv * hd, H), Q)
            t(p + "attn_v.weight", q4_0(kv * hd, H), Q); t(p + "attn_output.weight", q4_0(H, heads * hd), Q)
        t(p + "ffn_gate_inp.weight", f16(E, H))
        t(p + "ffn_gate_exps.weight", q4_0(E, I, H), Q); t(p + "ffn_up_exps.weight", q4_0(E, I, H), Q)
        t(p + "ffn_down_exps.weight", q4_0(E, H, I), Q)
        t(p + "ffn_gate_inp_shexp.weight", const(H, 0.0))
        t(p + "ffn_gate_shexp.weight", q4_0(I, H), Q); t(p + "ffn_up_shexp.weight", q4_0(I, H), Q)
        t(p + "ffn_down_shexp.weight", q4_0(H, I), Q)


def gemma3(w, t):
    H, I, L, heads, kv, hd, V = 1152, 6912, 26, 4, 1, 256, 262144
    w.add_block_count(L); w.add_embedding_length(H); w.add_feed_forward_length(I)
    w.add_head_count(heads); w.add_head_count_kv(kv); w.add_key_length(hd); w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6); w.add_rope_freq_base(1000000.0); w.add_context_length(32768)
    w.add_sliding_window(512); w.add_vocab_size(V)
    t("token_embd.weight", f16(V, H)); t("output_norm.weight", const(H, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"):
            t(p + n + ".weight", const(H, 1.0))
        t(p + "attn_q_norm.weight", const(hd, 1.0)); t(p + "attn_k_norm.weight", const(hd, 1.0))
        t(p + "attn_q.weight", f16(heads * hd, H)); t(p + "attn_k.weight", f16(kv * hd, H))
        t(p + "attn_v.weight", f16(kv * hd, H)); t(p + "attn_output.weight", f16(H, heads * hd))
        t(p + "ffn_gate.weight", f16(I, H)); t(p + "ffn_up.weight", f16(I, H)); t(p + "ffn_down.weight", f16(H, I))


def phi3(w, t):
    H, I, L, heads, kv, hd, V = 3072, 8192, 32, 24, 8, 128, 200064
    w.add_block_count(L); w.add_embedding_length(H); w.add_feed_forward_length(I)
    w.add_head_count(heads); w.add_head_count_kv(kv); w.add_key_length(hd); w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-5); w.add_rope_freq_base(10000.0); w.add_context_length(131072)
    w.add_rope_dimension_count(96); w.add_rope_scaling_orig_ctx_len(4096); w.add_sliding_window(0)
    w.add_rope_scaling_attn_factors(1.1902380714238083); w.add_vocab_size(V)
    t("token_embd.weight", f16(V, H)); t("output_norm.weight", const(H, 1.0))
    t("rope_factors_long.weight", const(48, 1.5)); t("rope_factors_short.weight", const(48, 1.0))
    for i in range(L):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", const(H, 1.0)); t(p + "ffn_norm.weight", const(H, 1.0))
        t(p + "attn_qkv.weight", f16((heads + 2 * kv) * hd, H)); t(p + "attn_output.weight", f16(H, heads * hd))
        t(p + "ffn_up.weight", f16(2 * I, H)); t(p + "ffn_down.weight", f16(H, I))


def gpt_oss(w, t):
    H, L, heads, kv, hd, E, used, I, V = 2880, 24, 64, 8, 64, 32, 4, 2880, 201088
    w.add_block_count(L); w.add_embedding_length(H); w.add_feed_forward_length(I)
    w.add_head_count(heads); w.add_head_count_kv(kv); w.add_key_length(hd); w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-5); w.add_rope_freq_base(150000.0); w.add_context_length(131072)
    w.add_expert_count(E); w.add_expert_used_count(used); w.add_expert_feed_forward_length(I)
    w.add_sliding_window(128); w.add_rope_scaling_type(RopeScalingType.YARN); w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096); w.add_vocab_size(V)
    t("token_embd.weight", f16(V, H)); t("output_norm.weight", const(H, 1.0)); t("output.weight", f16(V, H))
    for i in range(L):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", const(H, 1.0)); t(p + "post_attention_norm.weight", const(H, 1.0))
        t(p + "attn_q.weight", f16(heads * hd, H)); t(p + "attn_k.weight", f16(kv * hd, H))
        t(p + "attn_v.weight", f16(kv * hd, H)); t(p + "attn_output.weight", f16(H, heads * hd))
        for n, size in (("attn_q", heads * hd), ("attn_k", kv * hd), ("attn_v", kv * hd), ("attn_output", H)):
            t(p + n + ".bias", const(size, 0.0))
        t(p + "attn_sinks.weight", const(heads, 0.0))
        t(p + "ffn_gate_inp.weight", f16(E, H)); t(p + "ffn_gate_inp.bias", const(E, 0.0))
        for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            t(p + n + ".weight", mxfp4(E, I if n != "ffn_down_exps" else H, H if n != "ffn_down_exps" else I),
              GGMLQuantizationType.MXFP4)
            t(p + n + ".bias", const((E, I if n != "ffn_down_exps" else H), 0.0))


SHAPES = {"gemma-3-1b": ("gemma3", gemma3), "phi-4-mini": ("phi3", phi3), "gpt-oss-20b": ("gpt-oss", gpt_oss),
          "qwen3-30b-a3b": ("qwen3moe", qwen3_moe), "qwen3-next-80b-a3b-16l": ("qwen3next", qwen3_next)}


def main(shape, out):
    arch, build = SHAPES[shape]
    w = GGUFWriter(out, arch)
    w.add_string("tokenizer.ggml.model", "no_vocab")
    plan = []

    def tensor(name, spec, raw_dtype=None):
        shape, dtype, make = spec
        w.add_tensor_info(name, shape, dtype, int(np.prod(shape)) * dtype.itemsize, raw_dtype=raw_dtype)
        plan.append(make)

    build(w, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for make in plan:
        w.write_tensor_data(make())
    w.close()
    print(f"wrote {out}: {shape}, {len(plan)} tensors")


if __name__ == "__main__":
    main(*sys.argv[1:3])
