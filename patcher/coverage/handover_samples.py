"""Samples for the parts of the Omni models that read another part's outputs, not tokens.

Qwen2.5-Omni's and Qwen3-Omni's top-level ``generate`` runs the thinker, then hands the talker
(and Qwen3's talker its code predictor) embeddings made of the thinker's hidden states. The sweep
draws tensors of the shapes that hand-over produces, at unit scale (a hidden state's), with the
token ids the talker reads next to them:

- Qwen2.5-Omni talker (``Qwen2_5OmniForConditionalGeneration.generate``): ``inputs_embeds``
  ``(batch, L + 2, thinker width)`` (the prompt's thinker states, the text BOS, the first reply
  token), ``input_text_ids`` the prompt with BOS and the first
  reply token (its rope index), ``thinker_reply_part`` ``(batch, R, thinker width)`` (the reply's
  later states) and the prompt's ``attention_mask`` with two more ones;
- Qwen3-Omni talker (``Qwen3OmniMoeForConditionalGeneration.generate``): ``inputs_embeds``
  ``(batch, L, talker width)`` (the projected thinker states), ``talker_input_ids`` the prompt and
  its ``attention_mask``;
- Qwen3-Omni code predictor (the talker's ``forward``): its prefill, ``inputs_embeds``
  ``(batch, 2, width)``: the talker's last hidden state and the embedding of the first codebook's
  code.

:func:`check_handover_reaches_output` proves that eager reads the drawn embeddings.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

#: the talker's reply part: one more thinker state per drafted reply token after the first
REPLY_TOKENS = 3


def _text(config, batch: int, length: int, padding: int, seed: int) -> dict[str, Any]:
    from ..samples.sweep import coverage_text_sample

    return coverage_text_sample(config, batch_size=batch, seq_len=length, left_padding=padding, seed=seed)


def _qwen2_5_omni_talker(config, batch: int, length: int, padding: int, seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed + 104723)
    prompt = _text(config, batch, length, padding, seed)
    ids, mask = prompt["input_ids"], prompt["attention_mask"]
    width = config.embedding_size
    # generate also hands it the codec ids (mask tokens, pad, BOS), which the prefill never reads
    # (inputs_embeds given): left out, as inputs eager ignores are
    return {
        "input_text_ids": torch.cat([ids, ids[:, -2:]], dim=1),
        "inputs_embeds": torch.randn(batch, length + 2, width, generator=generator),
        "thinker_reply_part": torch.randn(batch, REPLY_TOKENS, width, generator=generator),
        "attention_mask": torch.cat([mask, mask.new_ones(batch, 2)], dim=1),
    }


def _qwen3_omni_talker(config, batch: int, length: int, padding: int, seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed + 104723)
    text = config.text_config
    prompt = _text(text, batch, length, padding, seed)
    return {"inputs_embeds": torch.randn(batch, length, text.hidden_size, generator=generator),
            "talker_input_ids": prompt["input_ids"], "attention_mask": prompt["attention_mask"]}


def _qwen3_omni_code_predictor(config, batch: int, length: int, padding: int, seed: int) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed + 104723)
    # the prefill is always the talker's hidden state and the first code's embedding: 2 positions
    return {"inputs_embeds": torch.randn(batch, 2, config.hidden_size, generator=generator)}


#: class name -> ``builder(config, batch, length, left_padding, seed)``
HANDOVER_BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "Qwen2_5OmniTalkerForConditionalGeneration": _qwen2_5_omni_talker,
    "Qwen3OmniMoeTalkerForConditionalGeneration": _qwen3_omni_talker,
    "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration": _qwen3_omni_code_predictor,
}


def handover_builder(model) -> Callable[..., dict[str, Any]] | None:
    return HANDOVER_BUILDERS.get(type(model).__name__) if model is not None else None


def handover_samples(model, config, seed: int) -> list[dict[str, Any]]:
    """The two layouts of the text attempt (another batch size and prompt length on the second)."""
    build = handover_builder(model)
    return [build(config, 2, 7, 1, seed), build(config, 3, 11, 2, seed + 1)]


def with_other_embeddings(sample: dict[str, Any], seed: int) -> dict[str, Any]:
    """``sample`` with every drawn embedding (floating-point input) redrawn, same shapes."""
    generator = torch.Generator().manual_seed(seed + 15485863)
    return {name: torch.randn(value.shape, generator=generator).to(value.dtype)
            if isinstance(value, torch.Tensor) and value.is_floating_point() else value
            for name, value in sample.items()}


def check_handover_reaches_output(model, sample: dict[str, Any], seed: int, minimum: float) -> float:
    """The largest change of eager's logits when only the handed-over embeddings change; raises
    when it is not above ``minimum``. Each run gets its own copy: the Qwen2.5-Omni talker adds its
    codec BOS and pad embeddings into ``inputs_embeds`` in place."""
    def run(inputs):
        with torch.no_grad():
            return model(**{name: value.clone() if isinstance(value, torch.Tensor) else value
                            for name, value in inputs.items()}).logits

    change = (run(sample) - run(with_other_embeddings(sample, seed))).abs().max().item()
    if not change > minimum:
        raise ValueError(f"{type(model).__name__}'s logits changed by {change:.1e} (<= {minimum}) when only the "
                         "handed-over embeddings changed: they never reach them (patcher/coverage/handover_samples.py)")
    return change
