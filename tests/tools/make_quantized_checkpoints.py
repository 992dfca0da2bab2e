"""Pre-quantized checkpoints as their makers ship them, for the FP8 and AWQ readers, each next to its
dequantized float32 twin (the oracle): a random Llama of 128 hidden / 256 intermediate, one layer.
  fp8: e4m3 weights (ml_dtypes' float8_e4m3fn) with weight_scale_inv per 128 x 128 block, as DeepSeek V3
       and Qwen3-*-FP8 ship; twin = e4m3 value * scale in float32.
  awq: AutoAWQ GEMM layout, 4 bits, group 128, zero points; twin = (q - zero) * scale in float32.
  deepseek-fp8: a DeepSeek V3 (one dense layer, one MoE layer of 4 experts, MLA) whose linear weights are
       FP8 as DeepSeek ships them (embeddings, norms, router and its bias in float32); twin as for fp8.
Writes tests/data/quantized/{fp8,fp8-ref,awq,awq-ref,deepseek-fp8,deepseek-fp8-ref}. Needs numpy and
ml_dtypes only."""
import json
import pathlib
import struct

import ml_dtypes
import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "data" / "quantized"
H, I, HEADS, KV, VOCAB, G = 128, 256, 4, 2, 256, 128
CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 1,
          "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": H // HEADS, "vocab_size": VOCAB,
          "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
          "bos_token_id": 1, "eos_token_id": 2}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def f32(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return ("F32", a.shape, a.tobytes())


def write_model(name, tensors, quantization=None):
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    config = dict(CONFIG)
    if quantization:
        config["quantization_config"] = quantization
    (d / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    write_safetensors(d / "model.safetensors", tensors)


rng = np.random.default_rng(11)
dense = {"model.embed_tokens.weight": rng.normal(0, 1, (VOCAB, H)), "lm_head.weight": rng.normal(0, 0.05, (VOCAB, H)),
         "model.norm.weight": 1 + rng.normal(0, 0.1, H)}
p = "model.layers.0."
dense[p + "input_layernorm.weight"] = 1 + rng.normal(0, 0.1, H)
dense[p + "post_attention_layernorm.weight"] = 1 + rng.normal(0, 0.1, H)
linears = {p + "self_attn.q_proj": (H, H), p + "self_attn.k_proj": (KV * H // HEADS, H),
           p + "self_attn.v_proj": (KV * H // HEADS, H), p + "self_attn.o_proj": (H, H),
           p + "mlp.gate_proj": (I, H), p + "mlp.up_proj": (I, H), p + "mlp.down_proj": (H, I)}
weights = {name: rng.normal(0, 0.08, shape).astype(np.float32) for name, shape in linears.items()}
plain = {k: f32(v) for k, v in dense.items()}

def to_fp8(w):
    """e4m3 values and float32 scales per 128 x 128 block, and the float32 twin they stand for."""
    n, k = w.shape
    scales = np.zeros(((n + 127) // 128, (k + 127) // 128), np.float32)
    q = np.zeros_like(w, dtype=ml_dtypes.float8_e4m3fn)
    for bi in range(scales.shape[0]):
        for bj in range(scales.shape[1]):
            block = w[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128]
            s = np.float32(np.abs(block).max() / np.float32(448))
            scales[bi, bj] = s
            q[bi * 128:(bi + 1) * 128, bj * 128:(bj + 1) * 128] = (block / s).astype(ml_dtypes.float8_e4m3fn)
    return q, scales, q.astype(np.float32) * np.repeat(np.repeat(scales, 128, 0), 128, 1)[:n, :k]


# FP8, 128 x 128 blocks.
fp8, fp8_ref = dict(plain), dict(plain)
for name, w in weights.items():
    q, scales, back = to_fp8(w)
    fp8[name + ".weight"] = ("F8_E4M3", w.shape, q.tobytes())
    fp8[name + ".weight_scale_inv"] = f32(scales)
    fp8_ref[name + ".weight"] = f32(back)
write_model("fp8", fp8, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})
write_model("fp8-ref", fp8_ref)

# AWQ: intweight[k][n] in groups of G along k; eight columns per int32 in AutoAWQ's order.
ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def pack(cols):  # [rows, N] of 4-bit values -> [rows, N / 8] int32
    rows, n = cols.shape
    out = np.zeros((rows, n // 8), np.uint32)
    for i, c in enumerate(ORDER):
        out |= cols[:, c::8].astype(np.uint32) << np.uint32(4 * i)
    return out.view(np.int32)


awq, awq_ref = dict(plain), dict(plain)
for name, w in weights.items():
    wt = w.T  # [K, N]
    k, n = wt.shape
    g = wt.reshape(k // G, G, n)
    lo, hi = g.min(axis=1), g.max(axis=1)
    scales = ((hi - lo) / 15).astype(np.float16)
    s32 = scales.astype(np.float32)
    zeros = np.clip(np.round(-lo / s32), 0, 15).astype(np.int32)
    q = np.clip(np.round(g / s32[:, None, :]) + zeros[:, None, :], 0, 15).astype(np.int32)
    awq[name + ".qweight"] = ("I32", (k, n // 8), pack(q.reshape(k, n)).tobytes())
    awq[name + ".qzeros"] = ("I32", (k // G, n // 8), pack(zeros).tobytes())
    awq[name + ".scales"] = ("F16", (k // G, n), scales.tobytes())
    back = ((q - zeros[:, None, :]).astype(np.float32) * s32[:, None, :]).reshape(k, n).T
    awq_ref[name + ".weight"] = f32(back)
write_model("awq", awq, {"quant_method": "awq", "bits": 4, "group_size": G, "zero_point": True, "version": "gemm"})
write_model("awq-ref", awq_ref)
# DeepSeek V3 in FP8: hidden 128, 2 heads of MLA (q_lora 128, kv_lora 128, nope 64, rope 64, v 64),
# layer 0 dense (intermediate 256), layer 1 four experts of 128 in two groups plus a shared expert.
DS = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": H, "intermediate_size": 256, "moe_intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": VOCAB,
      "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
      "bos_token_id": 1, "eos_token_id": 2, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
      "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
      "q_lora_rank": 128, "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 64, "v_head_dim": 64,
      "rope_interleave": True}
ds_plain = {"model.embed_tokens.weight": rng.normal(0, 1, (VOCAB, H)), "lm_head.weight": rng.normal(0, 0.05, (VOCAB, H)),
            "model.norm.weight": 1 + rng.normal(0, 0.1, H)}
ds_linears = {}
for layer in range(2):
    p = f"model.layers.{layer}."
    for n in ["input_layernorm", "post_attention_layernorm"]:
        ds_plain[p + n + ".weight"] = 1 + rng.normal(0, 0.1, H)
    ds_plain[p + "self_attn.q_a_layernorm.weight"] = 1 + rng.normal(0, 0.1, 128)
    ds_plain[p + "self_attn.kv_a_layernorm.weight"] = 1 + rng.normal(0, 0.1, 128)
    a = p + "self_attn."
    ds_linears.update({a + "q_a_proj": (128, H), a + "q_b_proj": (2 * 128, 128), a + "kv_a_proj_with_mqa": (128 + 64, H),
                       a + "kv_b_proj": (2 * (64 + 64), 128), a + "o_proj": (H, 2 * 64)})
    mlps = [p + "mlp."] if layer == 0 else [p + f"mlp.experts.{e}." for e in range(4)] + [p + "mlp.shared_experts."]
    inner = 256 if layer == 0 else 128
    for m in mlps:
        ds_linears.update({m + "gate_proj": (inner, H), m + "up_proj": (inner, H), m + "down_proj": (H, inner)})
    if layer == 1:
        ds_plain[p + "mlp.gate.weight"] = rng.normal(0, 0.3, (4, H))
        ds_plain[p + "mlp.gate.e_score_correction_bias"] = rng.normal(0, 0.1, 4)
ds_plain = {k: f32(v) for k, v in ds_plain.items()}
ds_fp8, ds_ref = dict(ds_plain), dict(ds_plain)
for name, shape in ds_linears.items():
    q, scales, back = to_fp8(rng.normal(0, 0.08, shape).astype(np.float32))
    ds_fp8[name + ".weight"] = ("F8_E4M3", shape, q.tobytes())
    ds_fp8[name + ".weight_scale_inv"] = f32(scales)
    ds_ref[name + ".weight"] = f32(back)
CONFIG = DS
write_model("deepseek-fp8", ds_fp8, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [128, 128]})
write_model("deepseek-fp8-ref", ds_ref)
print("wrote", sorted(p.name for p in OUT.iterdir()))
