"""The registry of multimodal sample builders per ``model_type``, and the text sample they start from.

Builders register here (``patcher.samples.images`` one per pixel layout, model collections such as the
zoo their own); :mod:`patcher.samples` looks them up, loading those registrations first.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from transformers import PretrainedConfig

from ..registry.normalize import sample_shape

MultimodalBuilder = Callable[..., dict[str, Any]]
_MULTIMODAL_BUILDERS: dict[str, MultimodalBuilder] = {}


def register_multimodal_sample(model_type: str):
    """Decorator: register ``builder(config, *, batch_size, seq_len, left_padding, device, generator,
    **kw) -> dict``. Optional keywords a builder may take: ``num_images``, ``image_size`` and
    ``model`` (a built model whose own vision path counts the image tokens); callers pass ``model``
    only to builders that declare it."""

    def register(builder: MultimodalBuilder) -> MultimodalBuilder:
        _MULTIMODAL_BUILDERS[model_type] = builder
        return builder

    return register


def registered_builder(model_type: str) -> MultimodalBuilder | None:
    """The builder registered so far for ``model_type`` (no registration is loaded here)."""
    return _MULTIMODAL_BUILDERS.get(model_type)


def registered_model_types() -> list[str]:
    return sorted(_MULTIMODAL_BUILDERS)


def text_sample(
    config: PretrainedConfig,
    *,
    batch_size: int = 1,
    seq_len: int = 16,
    left_padding: int = 0,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` (left padding on the first row when asked).

    ``batch_size`` and ``seq_len`` are ints >= 1 with at most
    :data:`patcher.registry.normalize.MAX_SAMPLE_TOKENS` tokens in all (else ``TypeError``/``ValueError``,
    before anything is allocated)."""
    batch_size, seq_len = sample_shape(batch_size, seq_len)
    try:
        vocab_size = config.get_text_config().vocab_size
    except ValueError:  # a text encoder and a text decoder (MusicGen): input_ids go to the encoder
        vocab_size = config.get_text_config(encoder=True).vocab_size
    input_ids = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    attention_mask = torch.ones(batch_size, seq_len, dtype=torch.long)
    if left_padding:
        attention_mask[0, :left_padding] = 0
    return {"input_ids": input_ids.to(device), "attention_mask": attention_mask.to(device)}
