"""Samples for draft models that read a target model's states (Gemma 4's assistants).

``Gemma4AssistantForCausalLM`` (and the Unified one) has no token input of its own: assisted
generation (transformers' ``Gemma4AssistantCandidateGenerator.get_candidates``) hands it

- ``inputs_embeds``: the target's input embedding of the last token, concatenated with the
  target's last hidden state (``2 * backbone_hidden_size`` wide);
- ``shared_kv_states``: the keys and values the target's last non-shared layer of each layer type
  stored (``return_shared_kv_states=True``), ``(batch, kv_heads, kv_len, head_dim)`` each;
- ``attention_mask`` over the target's tokens and ``position_ids`` of the drafted position.

The sweep builds exactly that: a tiny target of the assistant's own text config (its widths, heads
and layer kinds, ``backbone_hidden_size`` wide), run eagerly on the text sample's tokens.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

#: The forward argument that marks a class as a draft model fed by a target.
SHARED_STATES = "shared_kv_states"


def needs_target_states(model) -> bool:
    import inspect

    try:
        return SHARED_STATES in inspect.signature(type(model).forward).parameters
    except (TypeError, ValueError):
        return False


def target_model(config, seed: int):
    """A tiny target for the assistant ``config``: its text config ``backbone_hidden_size`` wide,
    each layer kind twice, the second half sharing the first half's kv (so that the last
    non-shared layer of each kind stores its states, as a real target's do)."""
    from transformers import AutoModelForCausalLM

    from ..models import random_model

    text = copy.deepcopy(config.get_text_config())
    kinds = list(text.layer_types)
    text.hidden_size = config.backbone_hidden_size
    text.layer_types = kinds * 2
    text.num_hidden_layers = 2 * len(kinds)
    text.num_kv_shared_layers = len(kinds)
    cls = AutoModelForCausalLM._model_mapping[type(text)]
    return random_model(cls, text, seed + 7919).eval()


def assistant_sample(config, text_sample: dict[str, Any], seed: int, target=None) -> dict[str, Any]:
    """The inputs assisted generation hands the assistant after the target's prefill of
    ``text_sample``'s tokens: the first drafted position, a query of one token."""
    target = target if target is not None else target_model(config, seed)
    input_ids = text_sample["input_ids"]
    attention_mask = text_sample.get("attention_mask")
    with torch.no_grad():
        outputs = target(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                         return_shared_kv_states=True, use_cache=False)
    states = outputs.shared_kv_states
    if not states:
        raise ValueError(f"the target {type(target).__name__} returned no shared_kv_states "
                         f"(patcher/coverage/assistant_samples.py: target_model must share the kv of a layer of each kind)")
    last_token = input_ids[:, -1:]
    embeds = torch.cat([target.get_input_embeddings()(last_token), outputs.hidden_states[-1][:, -1:]], dim=-1)
    position = torch.full((input_ids.shape[0], 1), input_ids.shape[1] - 1, dtype=torch.long)
    sample = {"inputs_embeds": embeds, "position_ids": position,
              SHARED_STATES: {kind: (keys.clone(), values.clone()) for kind, (keys, values) in dict(states).items()}}
    if attention_mask is not None:
        sample["attention_mask"] = attention_mask
    return sample


def with_other_states(sample: dict[str, Any], seed: int) -> dict[str, Any]:
    """``sample`` with only the target's shared keys and values redrawn (same shapes)."""
    generator = torch.Generator().manual_seed(seed + 15485863)
    states = {kind: tuple(torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype) for tensor in pair)
              for kind, pair in sample[SHARED_STATES].items()}
    return {**sample, SHARED_STATES: states}


def check_states_reach_output(model, sample: dict[str, Any], seed: int, minimum: float) -> float:
    """The largest change of eager's logits when only the shared states change; raises when it is
    not above ``minimum`` (the states never reach the logits: the sample would prove nothing)."""
    with torch.no_grad():
        first = model(**sample).logits
        second = model(**with_other_states(sample, seed)).logits
    change = (first - second).abs().max().item()
    if not change > minimum:
        raise ValueError(f"{type(model).__name__}'s logits changed by {change:.1e} (<= {minimum}) when only "
                         f"{SHARED_STATES} changed: the target's states never reach them "
                         "(patcher/coverage/assistant_samples.py: check the target's stored kv and the sample's mask)")
    return change
