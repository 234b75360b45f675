"""Tiny random text models built from the real transformers config classes.

Sizes are small so a forward takes milliseconds; every architecture keeps its own structure
(GQA, MoE routing, sliding windows, MLA attention) so the tracer meets the real code paths.
"""

from __future__ import annotations

import torch
import transformers

from patcher.models import random_model

COMMON = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              bos_token_id=1, eos_token_id=2, pad_token_id=0)

# model class name -> (config class name, config overrides, decoder layer class)
TEXT_MODELS: dict[str, tuple[str, dict, str]] = {
    "LlamaForCausalLM": ("LlamaConfig", {}, "LlamaDecoderLayer"),
    "MistralForCausalLM": ("MistralConfig", {"sliding_window": 4}, "MistralDecoderLayer"),
    "MixtralForCausalLM": ("MixtralConfig", {"num_local_experts": 4, "num_experts_per_tok": 2}, "MixtralDecoderLayer"),
    "Qwen2ForCausalLM": ("Qwen2Config", {}, "Qwen2DecoderLayer"),
    "Qwen3ForCausalLM": ("Qwen3Config", {"head_dim": 8}, "Qwen3DecoderLayer"),
    "Gemma3ForCausalLM": ("Gemma3TextConfig", {"head_dim": 8, "sliding_window": 4,
                                               "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
                          "Gemma3DecoderLayer"),
    "GraniteForCausalLM": ("GraniteConfig", {}, "GraniteDecoderLayer"),
    "DeepseekV3ForCausalLM": ("DeepseekV3Config", {"num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "n_group": 2,
                                                   "topk_group": 1, "moe_intermediate_size": 16, "first_k_dense_replace": 1,
                                                   "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
                                                   "qk_nope_head_dim": 8, "v_head_dim": 8}, "DeepseekV3DecoderLayer"),
    "Phi3ForCausalLM": ("Phi3Config", {"pad_token_id": 0}, "Phi3DecoderLayer"),
}


def tiny_config(model_name: str, **overrides):
    config_name, specific, _ = TEXT_MODELS[model_name]
    config_class = getattr(transformers, config_name)
    return config_class(**{**COMMON, **specific, **overrides})


def tiny_model(model_name: str, seed: int = 0, dtype: torch.dtype = torch.float32, **overrides):
    return random_model(getattr(transformers, model_name), tiny_config(model_name, **overrides), seed, dtype)


def decoder_layer(model_name: str) -> str:
    return TEXT_MODELS[model_name][2]



def assert_patched_text_chain_equals_eager(model_class, target: str) -> None:
    """``model_class`` patched by ``load_traceable``, built tiny from its shrunk config, traced on
    the sweep's text sample: one subgraph per ``target`` layer plus the head, its chain's logits
    exactly eager's (cache off)."""
    from patcher import DEFAULT_IGNORE, load_traceable, run_subgraphs, trace_subgraphs
    from patcher.coverage import shrink_config
    from patcher.samples.sweep import coverage_text_sample

    config = shrink_config(model_class.config_class)
    torch.manual_seed(0)
    model = load_traceable(model_class)(config).eval()
    sample = coverage_text_sample(config, batch_size=2, seq_len=6)
    subgraphs = trace_subgraphs(model, sample, [target], DEFAULT_IGNORE)
    assert len(subgraphs) == config.num_hidden_layers + 1
    with torch.no_grad():
        expected = model(**sample, use_cache=False).logits
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], expected)
