"""Pixtral towers (Mistral3, LightOnOCR): images of any size in patch multiples, with
``image_sizes (N, 2)`` telling the tower which part of the padded ``pixel_values`` is image."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, side, vision_config
from .tokens import first_field


def _step(config) -> int:
    patch = side(vision_config(config).patch_size)
    return patch * int(first_field(config, ("spatial_merge_size",), 1))


def default_size(config) -> tuple[int, int]:
    return _step(config), 2 * _step(config)  # not square: a height/width mix-up shows


def other_size(config) -> tuple[int, int]:
    return 2 * _step(config), _step(config)


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    channels = num_channels(vision_config(config))
    height, width = sizes[0]
    return {"pixel_values": torch.randn(len(sizes), channels, height, width, generator=generator).to(dtype),
            "image_sizes": torch.tensor(sizes, dtype=torch.long)}


def config_count(config, size) -> int:
    """One token per merged patch, plus one ``[IMG_BREAK]``/``[IMG_END]`` per row (the processor's
    layout; the model only counts image tokens)."""
    step = _step(config)
    return (size[0] // step) * (size[1] // step)


LAYOUT = register_layout(ImageLayout(
    name="pixtral",
    model_types=("mistral3", "mistral_large4", "lighton_ocr"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
))
