"""Patches as clips, no grid (Inkling): one image token per ``patch x patch`` patch, each patch a
clip of ``temporal_patch_size`` identical frames, channels last: ``pixel_values (sum of patches,
temporal_patch, patch, patch, C)``, the patches of all images one after the other. The tower folds
each clip to one feature and never sees where a patch sat: no grid goes with the pixels.

The patches are the image processor's: ``ceil(height / patch)`` rows of ``width // patch + 1``
columns (its ``divide_to_patches`` always cuts one column more than the width fills, padded like
the ragged edges); it keeps the image's size (no resize by default), so any size is one the
processor gives."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, side, vision_config


def _patch(config) -> int:
    return side(vision_config(config).patch_size)


def _frames(config) -> int:
    return int(getattr(vision_config(config), "temporal_patch_size", None) or 1)


def default_size(config) -> tuple[int, int]:
    return 2 * _patch(config), 3 * _patch(config)


def other_size(config) -> tuple[int, int]:
    return 3 * _patch(config), 2 * _patch(config)  # another patch count: another pixel_values shape


def patch_count(config, size) -> int:
    height, width = size
    if height <= 0 or width <= 0:
        raise ValueError(f"{config.model_type} image size {size} must be positive")
    patch = _patch(config)
    return -(-height // patch) * (width // patch + 1)


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    patch, channels = _patch(config), num_channels(vision_config(config))
    total = sum(patch_count(config, size) for size in sizes)
    frame = torch.randn(total, 1, patch, patch, channels, generator=generator).to(dtype)
    # the processor repeats the still image into every frame of the clip
    return {"pixel_values": frame.repeat(1, _frames(config), 1, 1, 1)}


LAYOUT = register_layout(ImageLayout(
    name="temporal_patches",
    model_types=("inkling_mm_model",),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=patch_count,
))
