"""Samples for a vision tower with one fixed input size ``S = vision_config.image_size`` (CLIP,
SigLIP): the size every image must have, its ``pixel_values`` ``(batch_size * num_images, C, S,
S)`` in row-major image order, and the whole image part of the sample (:func:`image_inputs`),
from the recipe's ``SampleLayout``. Shared by the recipes of such models (Llava, Gemma3)."""

from __future__ import annotations

import torch

from ._recipe import SampleLayout
from ._recipe_helpers import pair, token_rows


def default_image_size(config) -> tuple[int, int]:
    return config.vision_config.image_size, config.vision_config.image_size


def example_image_sizes(config) -> list[tuple[int, int]]:
    """Image sizes for tests and sweeps to draw from: the one size the vision tower takes."""
    return [default_image_size(config)]


def check_sizes(config, sizes: list[tuple[int, int]], tower: str) -> None:
    """Raise unless every size is the tower's (``tower`` names it in the message)."""
    fixed = default_image_size(config)
    if any(size != fixed for size in sizes):
        raise ValueError(f"{tower} takes {fixed[0]}x{fixed[1]} images only (got {sizes})")


def check_size(config, image_size, tower: str) -> None:
    """Raise unless ``image_size`` (None: no size given) is the tower's."""
    if image_size is not None:
        check_sizes(config, [pair(image_size)], tower)


def pixel_values(config, batch_size: int, num_images: int, generator: torch.Generator,
                 dtype: torch.dtype) -> torch.Tensor:
    """Random ``pixel_values`` ``(batch_size * num_images, C, S, S)``."""
    vision = config.vision_config
    pixels = torch.randn(batch_size * num_images, vision.num_channels, *default_image_size(config),
                         generator=generator)
    return pixels.to(dtype)


def image_inputs(config, sizes: list[tuple[int, int]], layout: SampleLayout, tower: str, *, batch_size: int,
                 seq_len: int, left_padding: int, generator: torch.Generator, dtype: torch.dtype) -> dict:
    """A recipe's image inputs (``zoo._recipe_helpers.multimodal_sample_builder``) for a fixed-size
    tower: ``input_ids`` / ``attention_mask`` with one ``layout.span_ids`` per image, the layout's
    token-type ids if it has some, and :func:`pixel_values`. Refuses any size but the tower's
    (``tower`` names it)."""
    check_sizes(config, sizes, tower)
    spans = [layout.span_ids(config, size) for size in sizes]
    image_token = layout.image_token_id(config)
    input_ids, attention_mask = token_rows(config, batch_size, seq_len, spans, left_padding,
                                           [*layout.marker_ids(config), image_token], generator)
    sample = {"input_ids": input_ids, "attention_mask": attention_mask}
    if layout.token_type_key:
        sample[layout.token_type_key] = (input_ids == image_token).long()
    sample["pixel_values"] = pixel_values(config, batch_size, len(sizes), generator, dtype)
    return sample
