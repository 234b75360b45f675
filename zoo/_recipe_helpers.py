"""Helpers shared by the zoo recipes' tiny models and sample builders."""

from __future__ import annotations

from typing import Sequence

import torch
import transformers

from patcher.coverage.wake import wake_zero_parameters
from patcher.images.tokens import place_spans


def resolve(model_class: type | str) -> type:
    return getattr(transformers, model_class) if isinstance(model_class, str) else model_class


def tiny_model(model_class: type | str, config, seed: int, dtype: torch.dtype) -> torch.nn.Module:
    """A random model of ``model_class`` (a class or a ``transformers`` class name) in eval mode.
    The same seed gives the same weights to any class with the same module structure (original and
    zoo class); every all-zero parameter is woken so no path is dead."""
    model_class = resolve(model_class)
    torch.manual_seed(seed)
    model = model_class._from_config(config) if hasattr(model_class, "_from_config") else model_class(config)
    wake_zero_parameters(model, seed)
    return model.to(dtype).eval()


def pair(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, int):
        return size, size
    height, width = size
    return int(height), int(width)


def image_sizes(image_size, num_images: int, default) -> list[tuple[int, int]]:
    """One ``(height, width)`` per image of a row (a pair of ints is always one size)."""
    if image_size is None:
        return [pair(default)] * num_images
    if isinstance(image_size, int) or (len(image_size) == 2 and all(isinstance(v, int) for v in image_size)):
        return [pair(image_size)] * num_images
    sizes = [pair(size) for size in image_size]
    if len(sizes) != num_images:
        raise ValueError(f"image_size lists {len(sizes)} sizes for num_images={num_images}: give one per image")
    return sizes


def check_counts(batch_size: int, seq_len: int, num_images: int, left_padding: int) -> None:
    if batch_size < 1 or num_images < 1:
        raise ValueError(f"batch_size and num_images must be >= 1 (got {batch_size}, {num_images}); "
                         "use multimodal=False for a text-only sample")
    if not 0 <= left_padding < seq_len:
        raise ValueError(f"left_padding must be in [0, seq_len) (got {left_padding} with seq_len={seq_len})")


def pad_token_id(config) -> int:
    for candidate in (getattr(config.get_text_config(), "pad_token_id", None), getattr(config, "pad_token_id", None)):
        if candidate is not None:
            return int(candidate)
    return 0


def token_rows(config, batch_size: int, seq_len: int, spans: list[list[int]], left_padding: int,
                special: list[int | None], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` / ``attention_mask``: per row, ``seq_len`` text tokens (row 0 starts with
    ``left_padding`` pads) with the image ``spans`` inserted in order at random text positions."""
    vocab_size = config.get_text_config().vocab_size
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    allowed[[token for token in special if token is not None and 0 <= token < vocab_size]] = False
    text_pool = allowed.nonzero().flatten()
    return place_spans(text_pool, pad_token_id(config), batch_size, seq_len, spans, left_padding, generator)

