"""Samples for the coverage check: text tokens that avoid every special token of the config."""

from __future__ import annotations

from typing import Any

import torch

from ..config_tokens import special_tokens
from ..samples import multimodal_sample, text_sample


def _vocab_size(config) -> int:
    try:
        return int(config.get_text_config(decoder=True).vocab_size)
    except Exception:  # noqa: BLE001
        return int(config.vocab_size)


def coverage_text_sample(config, *, batch_size: int, seq_len: int, left_padding: int = 0,
                         seed: int = 0) -> dict[str, Any]:
    """``text_sample`` with special tokens replaced by ordinary ones (an image token in a text-only
    sample asks for image features); encoder-decoder models also get ``decoder_input_ids``."""
    generator = torch.Generator().manual_seed(seed)
    sample = text_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                         generator=generator)
    vocab = _vocab_size(config)
    allowed = torch.ones(vocab, dtype=torch.bool)
    special = [token for token in special_tokens(config) if 0 <= token < vocab]
    if special:
        allowed[special] = False
    pool = allowed.nonzero().flatten()

    def draw(shape):
        return pool[torch.randint(len(pool), shape, generator=generator)]

    sample["input_ids"] = draw(sample["input_ids"].shape)
    if getattr(config, "is_encoder_decoder", False):
        sample["decoder_input_ids"] = draw((batch_size, max(2, seq_len // 2)))
    return sample


def coverage_multimodal_sample(config, *, batch_size: int, seq_len: int, left_padding: int = 0,
                               seed: int = 0, **layout) -> dict[str, Any]:
    """``multimodal_sample`` with a seeded generator; ``layout``: ``num_images``, ``image_size``,
    ``model`` (counts image tokens with the model's own vision path where the builder takes it)."""
    generator = torch.Generator().manual_seed(seed)
    return multimodal_sample(config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                             generator=generator, **layout)


def has_multimodal_builder(config) -> bool:
    from ..samples import multimodal_builder

    return multimodal_builder(config.model_type) is not None
