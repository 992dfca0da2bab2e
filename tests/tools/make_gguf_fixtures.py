"""GGUF copies of transformers fixtures, written as llama.cpp's convert_hf_to_gguf.py lays them out (its
tensor names, llama's q/k rows permuted for its rotary layout, qwen's not), for the GGUF reader's tests:
the GGUF must compute what the safetensors fixture computes, whose logits transformers recorded.
Writes tests/data/gguf/*.gguf (weights only, no vocabulary). Needs gguf and numpy."""
import json
import pathlib
import struct

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, quants

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
LAYER = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
         "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias",
         "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
         "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32"
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], np.float32).reshape(t["shape"])
    return out


def permute(w, heads):  # convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(fixture, arch, out_name, qtype=GGMLQuantizationType.F32):
    src = DATA / "models" / fixture
    c = json.loads((src / "config.json").read_text())
    tensors = read_safetensors(src / "model.safetensors")
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    w = GGUFWriter(str(DATA / "gguf" / out_name), arch)
    w.add_block_count(c["num_hidden_layers"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_parameters"]["rope_theta"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_vocab_size(c["vocab_size"])
    for name, t in tensors.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            parts = name.split(".")
            gname = f"blk.{parts[2]}." + LAYER[".".join(parts[3:])]
        if arch == "llama" and gname.endswith("attn_q.weight"):
            t = permute(t, heads)
        if arch == "llama" and gname.endswith("attn_k.weight"):
            t = permute(t, kv)
        if t.ndim == 2 and qtype != GGMLQuantizationType.F32:
            w.add_tensor(gname, quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gname, np.ascontiguousarray(t))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


(DATA / "gguf").mkdir(exist_ok=True)
convert("llama-f32", "llama", "llama-f32.gguf")
convert("qwen2-f32", "qwen2", "qwen2-f32.gguf")
convert("qwen3-f32", "qwen3", "qwen3-f32.gguf")
convert("qwen3-f32", "qwen3", "qwen3-q8_0.gguf", GGMLQuantizationType.Q8_0)
convert("llama-f32", "llama", "llama-q5_1.gguf", GGMLQuantizationType.Q5_1)
print("wrote", sorted(p.name for p in (DATA / "gguf").iterdir()))
