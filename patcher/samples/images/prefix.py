"""One fixed-size image per text row, taken by the model itself: ``pixel_values (B, C, S, S)``;
GIT prepends the image features to the text embeddings, BLIP's text decoder cross-attends to
them, so the text holds no image tokens and each row takes exactly one image. The second size needs ``interpolate_pos_encoding`` (the
tower's position embeddings are for ``S x S``), so it is on for every sample of the family: one
graph serves both sizes only if the flag is the same."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, vision_config
from .square import default_size


def other_size(config) -> tuple[int, int]:
    height, width = default_size(config)
    return height, 2 * width  # not square: interpolated position embeddings, a h/w mix-up shows


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict:
    if len(sizes) != rows:
        raise ValueError(f"{config.model_type} takes one image per text row ({len(sizes)} images for {rows} rows)")
    channels = num_channels(vision_config(config))
    height, width = sizes[0]
    sample = {"pixel_values": torch.randn(rows, channels, height, width, generator=generator).to(dtype)}
    if "interpolate_pos_encoding" in accepted:
        sample["interpolate_pos_encoding"] = True
    return sample


LAYOUT = register_layout(ImageLayout(
    name="prefix",
    model_types=("git", "blip"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=lambda config, size: 0,
    prefix=True,
))
