"""GGUF copies of transformers fixtures, written as llama.cpp's convert_hf_to_gguf.py lays them out (its
tensor names, llama's q/k rows permuted for its rotary layout, qwen's not; MoE experts stacked per
projection, gpt-oss's MXFP4 blocks repacked to ggml's nibble order), for the GGUF reader's tests: the
GGUF must compute what the safetensors fixture computes, whose logits transformers recorded.
Writes tests/data/gguf/*.gguf (weights only, no vocabulary). Needs gguf and numpy."""
import json
import math
import pathlib
import struct

import gguf
import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, RopeScalingType, quants

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
LAYER = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
         "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
         "mlp.down_proj.weight": "ffn_down.weight", "self_attn.q_proj.bias": "attn_q.bias",
         "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
         "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}


# Where Gemma and Phi-3 differ from llama's names (convert_hf_to_gguf.py's tensor map for those archs).
GEMMA = {"post_attention_layernorm.weight": "post_attention_norm.weight",
         "pre_feedforward_layernorm.weight": "ffn_norm.weight",
         "post_feedforward_layernorm.weight": "post_ffw_norm.weight"}
PHI3 = {"self_attn.qkv_proj.weight": "attn_qkv.weight", "mlp.gate_up_proj.weight": "ffn_up.weight"}


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] in ("F32", "U8")
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], np.float32 if t["dtype"] == "F32" else np.uint8).reshape(t["shape"])
    return out


def permute(w, heads):  # convert_hf_to_gguf.py's LlamaModel.permute
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(fixture, arch, out_name, qtype=GGMLQuantizationType.F32, pooling=None):
    """pooling: an embedding model's (tests/data/embedding/FIXTURE, the base model's prefix-less weights) as
    llama.cpp's converter marks it, a gguf.PoolingType."""
    src = DATA / ("embedding" if pooling else "models") / fixture
    c = json.loads((src / "config.json").read_text())
    tensors = read_safetensors(src / "model.safetensors")
    if "embed_tokens.weight" in tensors:
        tensors = {k if k.startswith("lm_head.") else "model." + k: v for k, v in tensors.items()}
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
    rope = c["rope_parameters"].get("full_attention", c["rope_parameters"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_vocab_size(c["vocab_size"])
    if pooling is not None:
        w.add_pooling_type(pooling)
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    if arch.startswith("gemma"):
        w.add_sliding_window(c["sliding_window"])
        if c.get("attn_logit_softcapping"):
            w.add_attn_logit_softcapping(c["attn_logit_softcapping"])
        if c.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(c["final_logit_softcapping"])
    if arch == "phi3":
        # What Phi3MiniModel writes: the rotated dimensions, the pretrained context, LongRoPE's cos/sin
        # factor and its factors as tensors.
        orig = rope["original_max_position_embeddings"]
        w.add_rope_dimension_count(int(rope.get("partial_rotary_factor", 1.0) * c["hidden_size"]) // heads)
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_sliding_window(c.get("sliding_window") or 0)
        scale = c["max_position_embeddings"] / orig
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
        w.add_tensor("rope_factors_long.weight", np.array(rope["long_factor"], np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rope["short_factor"], np.float32))
    for name, t in tensors.items():
        if name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
        elif name == "lm_head.weight":
            gname = "output.weight"
        else:
            parts = name.split(".")
            own = GEMMA if arch.startswith("gemma") else PHI3 if arch == "phi3" else {}
            suffix = ".".join(parts[3:])
            gname = f"blk.{parts[2]}." + own.get(suffix, LAYER.get(suffix))
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            t = t + 1  # Gemma's norms scale by 1 + w; the converter stores 1 + w
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


def ggml_mxfp4(blocks, scales):
    """OpenAI's MXFP4 (value 2j in the low nibble of byte j, 2j + 1 in the high one; scales apart) as ggml's
    block_mxfp4 rows: [exponent, 16 bytes with value j low and j + 16 high] per 32 values."""
    codes = np.stack([blocks & 0x0F, blocks >> 4], axis=-1).reshape(*blocks.shape[:-1], 32)
    qs = codes[..., :16] | (codes[..., 16:] << 4)
    packed = np.concatenate([scales[..., None], qs.astype(np.uint8)], axis=-1)
    return packed.reshape(*packed.shape[:-2], packed.shape[-2] * 17)


MOE_ARCHS = {"qwen3moe": gguf.MODEL_ARCH.QWEN3MOE, "qwen2moe": gguf.MODEL_ARCH.QWEN2MOE,
             "glm4moe": gguf.MODEL_ARCH.GLM4_MOE, "gpt-oss": gguf.MODEL_ARCH.GPT_OSS, "deepseek2": gguf.MODEL_ARCH.DEEPSEEK2}


def convert_moe(src, arch, out_name, expert_qtype=GGMLQuantizationType.F32, split_tensors=0, legacy_kv_b=False,
                fuse_gate_up=False):
    """An MoE fixture as the converter writes it: per-expert (or OpenAI's MXFP4) tensors stacked per
    projection under gguf-py's tensor names for the architecture, its MoE keys; other tensors float32.
    split_tensors > 0 splits it as gguf-split does (OUT-00001-of-0000N.gguf, at most that many tensors each).
    deepseek2: kv_b_proj split per head into k_b (transposed) and v_b as DeepseekV2Model writes it now, or
    whole (legacy_kv_b) as older converters did. fuse_gate_up: the gate and up experts as one
    ffn_gate_up_exps [E, 2I, H] (gate rows first), as the converter's fuse_gate_up_exps writes them."""
    c = json.loads((src / "config.json").read_text())
    tensors = read_safetensors(src / "model.safetensors")
    n_layers, heads = c["num_hidden_layers"], c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    names = gguf.get_tensor_name_map(MOE_ARCHS[arch], n_layers)
    # Qwen's mlp_only_layers keep a dense MLP, which llama.cpp's qwen2moe/qwen3moe tensor lists lack: written
    # under llama's names (ffn_gate, ...), as the reader takes a layer without a router for dense.
    dense_names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, n_layers)
    w = GGUFWriter(str(DATA / "gguf" / out_name), arch, split_max_tensors=split_tensors)
    w.add_block_count(n_layers)
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    if arch == "deepseek2":  # DeepseekV2Model.set_gguf_parameters: MLA seen as MQA with wide heads
        w.add_head_count_kv(1)
        w.add_key_length(c["kv_lora_rank"] + c["qk_rope_head_dim"])
        w.add_value_length(c["kv_lora_rank"])
        w.add_key_length_mla(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
        w.add_value_length_mla(c["v_head_dim"])
        w.add_kv_lora_rank(c["kv_lora_rank"])
        if c.get("q_lora_rank"):
            w.add_q_lora_rank(c["q_lora_rank"])
        w.add_rope_dimension_count(c["qk_rope_head_dim"])
        w.add_leading_dense_block_count(c["first_k_dense_replace"])
        w.add_expert_shared_count(c["n_shared_experts"])
        w.add_expert_weights_scale(c["routed_scaling_factor"])
        if c.get("norm_topk_prob"):
            w.add_expert_weights_norm(True)
        # What the real configs' scoring_func says (transformers 5 drops the key): V3 sigmoid, V2 softmax.
        v3 = c["architectures"][0] == "DeepseekV3ForCausalLM"
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if v3 else gguf.ExpertGatingFuncType.SOFTMAX)
        if c["rope_parameters"].get("rope_type") == "yarn":
            rp = c["rope_parameters"]
            w.add_rope_scaling_type(RopeScalingType.YARN)
            w.add_rope_scaling_factor(rp["factor"])
            w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
            w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
            w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
            w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    else:
        w.add_head_count_kv(c["num_key_value_heads"])
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    rope = c["rope_parameters"]
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_vocab_size(c["vocab_size"])
    w.add_expert_count(c.get("num_experts") or c.get("n_routed_experts") or c["num_local_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(c.get("moe_intermediate_size") or c["intermediate_size"])
    if c.get("n_group") is not None:  # TextModel.set_gguf_parameters writes the groups for any MoE
        w.add_expert_group_count(c["n_group"])
        w.add_expert_group_used_count(c["topk_group"])
    if arch == "qwen2moe":
        w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    if arch == "glm4moe":  # Glm4MoeModel.set_gguf_parameters
        w.add_rope_dimension_count(int(head_dim * rope.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.5))))
        w.add_expert_shared_count(c["n_shared_experts"])
        w.add_leading_dense_block_count(c["first_k_dense_replace"])
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        w.add_expert_weights_scale(c["routed_scaling_factor"])
        w.add_expert_weights_norm(c["norm_topk_prob"])
    if arch == "gpt-oss":  # GptOssModel.set_gguf_parameters and the base class's YaRN keys
        w.add_sliding_window(c["sliding_window"])
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rope["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rope["beta_slow"])

    def add(hf_name, t, qtype=GGMLQuantizationType.F32):
        gname = names.get_name(hf_name, try_suffixes=(".weight", ".bias")) or dense_names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gname, hf_name
        if qtype != GGMLQuantizationType.F32:
            w.add_tensor(gname, quants.quantize(np.ascontiguousarray(t, np.float32), qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gname, np.ascontiguousarray(t, np.float32))

    experts = {}
    for name, t in tensors.items():
        if ".mlp.experts." in name:
            experts[name] = t
            continue
        if name.endswith("e_score_correction_bias"):
            name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        if name.endswith("self_attn.sinks"):
            name += ".weight"
        if name.endswith("shared_expert_gate.weight"):
            t = t.reshape(-1)  # llama.cpp's ffn_gate_inp_shexp is {n_embd}
        if name.endswith("kv_b_proj.weight") and not legacy_kv_b:
            nope, v = c["qk_nope_head_dim"], c["v_head_dim"]
            kv_b = t.reshape(heads, nope + v, t.shape[-1])
            add(name.replace("kv_b_proj", "k_b_proj"), kv_b[:, :nope].transpose(0, 2, 1))
            add(name.replace("kv_b_proj", "v_b_proj"), kv_b[:, nope:])
            continue
        add(name, t)
    for layer in range(n_layers):
        p = f"model.layers.{layer}.mlp.experts."
        if p + "gate_up_proj_blocks" in experts:  # gpt-oss as OpenAI ships it: gate rows even, up rows odd
            gb, gs = experts[p + "gate_up_proj_blocks"], experts[p + "gate_up_proj_scales"]
            for proj, b, sc in [("gate_proj", gb[:, ::2], gs[:, ::2]), ("up_proj", gb[:, 1::2], gs[:, 1::2]),
                                ("down_proj", experts[p + "down_proj_blocks"], experts[p + "down_proj_scales"])]:
                w.add_tensor(names.get_name(p + proj + ".weight", try_suffixes=(".weight",)), ggml_mxfp4(b, sc),
                             raw_dtype=GGMLQuantizationType.MXFP4)
            bias = experts[p + "gate_up_proj_bias"]
            add(p + "gate_proj.bias", bias[:, ::2])
            add(p + "up_proj.bias", bias[:, 1::2])
            add(p + "down_proj.bias", experts[p + "down_proj_bias"])
            continue
        count = sum(1 for n in experts if n.startswith(p) and n.endswith(".gate_proj.weight"))
        if count and fuse_gate_up:
            gate_up = np.concatenate([np.stack([experts[f"{p}{e}.{proj}.weight"] for e in range(count)])
                                      for proj in ("gate_proj", "up_proj")], axis=1)
            w.add_tensor(f"blk.{layer}.ffn_gate_up_exps.weight", np.ascontiguousarray(gate_up, np.float32))
        for proj in ["down_proj"] if count and fuse_gate_up else ["gate_proj", "up_proj", "down_proj"]:
            if count:
                stacked = np.stack([experts[f"{p}{e}.{proj}.weight"] for e in range(count)])
                add(p + proj + ".weight", stacked, expert_qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert_qwen3next(src, out_name):
    """Qwen3-Next as llama.cpp's Qwen3NextModel writes it: in_proj_qkvz regrouped into the convolution's channels
    (attn_qkv) and the gates (attn_gate), A_log as -exp(A_log), the conv squeezed, every zero-centred norm + 1
    (not the DeltaNet's output norm); the Qwen2-MoE keys and tensors for the rest."""
    c = json.loads((src / "config.json").read_text())
    t = read_safetensors(src / "model.safetensors")
    n_layers, heads, hidden = c["num_hidden_layers"], c["num_attention_heads"], c["hidden_size"]
    dk, dv, nk, nv = c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_num_key_heads"], c["linear_num_value_heads"]
    w = GGUFWriter(str(DATA / "gguf" / out_name), "qwen3next")
    w.add_block_count(n_layers)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_parameters"]["rope_theta"])
    w.add_vocab_size(c["vocab_size"])
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    w.add_ssm_conv_kernel(c["linear_conv_kernel_dim"])
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv)
    w.add_ssm_inner_size(dv * nv)
    w.add_array("qwen3next.attention.recurrent_layers", [x == "linear_attention" for x in c["layer_types"]])
    w.add_full_attention_interval(c.get("full_attention_interval", 4))
    w.add_rope_dimension_count(int(c["head_dim"] * c["rope_parameters"].get("partial_rotary_factor", 0.25)))

    def add(name, x):
        w.add_tensor(name, np.ascontiguousarray(x, np.float32))

    add("token_embd.weight", t["model.embed_tokens.weight"])
    add("output_norm.weight", t["model.norm.weight"] + 1)
    add("output.weight", t["lm_head.weight"])
    for l in range(n_layers):
        p, b = f"model.layers.{l}.", f"blk.{l}."
        add(b + "attn_norm.weight", t[p + "input_layernorm.weight"] + 1)
        add(b + "post_attention_norm.weight", t[p + "post_attention_layernorm.weight"] + 1)
        if c["layer_types"][l] == "linear_attention":
            r = nv // nk
            qkvz = t[p + "linear_attn.in_proj_qkvz.weight"].T.reshape(hidden, nk, 2 * dk + 2 * r * dv)
            q, k, v, z = np.split(qkvz, [dk, 2 * dk, 2 * dk + r * dv], axis=-1)
            add(b + "attn_qkv.weight", np.concatenate([x.reshape(hidden, -1) for x in (q, k, v)], axis=-1).T)
            add(b + "attn_gate.weight", z.reshape(hidden, -1).T)
            add(b + "ssm_ba.weight", t[p + "linear_attn.in_proj_ba.weight"])
            add(b + "ssm_conv1d.weight", t[p + "linear_attn.conv1d.weight"].squeeze())
            add(b + "ssm_dt.bias", t[p + "linear_attn.dt_bias"])
            add(b + "ssm_a", -np.exp(t[p + "linear_attn.A_log"]))
            add(b + "ssm_norm.weight", t[p + "linear_attn.norm.weight"])
            add(b + "ssm_out.weight", t[p + "linear_attn.out_proj.weight"])
        else:
            for hf, g in [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")]:
                add(b + g + ".weight", t[p + "self_attn." + hf + ".weight"])
            add(b + "attn_q_norm.weight", t[p + "self_attn.q_norm.weight"] + 1)
            add(b + "attn_k_norm.weight", t[p + "self_attn.k_norm.weight"] + 1)
        if l in c["mlp_only_layers"]:
            for proj, g in [("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")]:
                add(b + g + ".weight", t[p + "mlp." + proj + ".weight"])
            continue
        add(b + "ffn_gate_inp.weight", t[p + "mlp.gate.weight"])
        for proj, g in [("gate_proj", "ffn_gate"), ("up_proj", "ffn_up"), ("down_proj", "ffn_down")]:
            add(b + g + "_exps.weight", np.stack([t[f"{p}mlp.experts.{e}.{proj}.weight"] for e in range(c["num_experts"])]))
            add(b + g + "_shexp.weight", t[p + "mlp.shared_expert." + proj + ".weight"])
        add(b + "ffn_gate_inp_shexp.weight", t[p + "mlp.shared_expert_gate.weight"].reshape(-1))
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
convert("gemma2-f32", "gemma2", "gemma2-f32.gguf")
convert("gemma3-pattern-f32", "gemma3", "gemma3-f32.gguf")
convert("phi3-f32", "phi3", "phi3-f32.gguf")
convert("qwen3-last-normalized", "qwen3", "qwen3-embedding-last.gguf", pooling=gguf.PoolingType.LAST)
convert_moe(DATA / "models" / "qwen3-moe-f32", "qwen3moe", "qwen3moe-f32.gguf")
convert_moe(DATA / "models" / "qwen3-moe-f32", "qwen3moe", "qwen3moe-q8_0.gguf", GGMLQuantizationType.Q8_0)
convert_moe(DATA / "models" / "qwen2-moe-f32", "qwen2moe", "qwen2moe-f32.gguf")
convert_moe(DATA / "models" / "qwen3-moe-f32", "qwen3moe", "qwen3moe-fused-f32.gguf", fuse_gate_up=True)
convert_moe(DATA / "models" / "qwen3-moe-f32", "qwen3moe", "qwen3moe-split.gguf", split_tensors=16)
convert_moe(DATA / "models" / "deepseek-v3-f32", "deepseek2", "deepseek-v3-f32.gguf")
convert_moe(DATA / "models" / "deepseek-v3-yarn-f32", "deepseek2", "deepseek-v3-yarn-f32.gguf")
convert_moe(DATA / "models" / "deepseek-v2-f32", "deepseek2", "deepseek-v2-kv_b-f32.gguf", legacy_kv_b=True)
convert_moe(DATA / "models" / "glm4-moe-f32", "glm4moe", "glm4moe-f32.gguf")
convert_moe(DATA / "quantized" / "gpt-oss-mxfp4", "gpt-oss", "gpt-oss-mxfp4.gguf")
convert_qwen3next(DATA / "models" / "qwen3-next-f32", "qwen3next-f32.gguf")
print("wrote", sorted(p.name for p in (DATA / "gguf").iterdir()))
