"""Flat patches, no vision tower (Fuyu): each image cut into ``patch x patch`` pixel patches,
flattened and projected into the text by one linear layer. ``pixel_values (sum of patches, C *
patch * patch)``, the patches of all images one after the other (the processor's layout); one
image token per patch. The patch size and channels are on the top-level config: there is no
``vision_config``."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, side
from .tokens import first_field


def _patch(config) -> int:
    patch = first_field(config, ("patch_size",))
    if patch is None:
        raise ValueError(f"{config.model_type}: the config has no patch_size; the flat-patch layout needs one")
    return side(patch)


def default_size(config) -> tuple[int, int]:
    return _patch(config), 2 * _patch(config)  # one by two patches


def other_size(config) -> tuple[int, int]:
    return 3 * _patch(config), 2 * _patch(config)  # another patch count: another pixel_values shape


def patch_count(config, size) -> int:
    height, width = size
    patch = _patch(config)
    if height <= 0 or width <= 0 or height % patch or width % patch:
        raise ValueError(f"{config.model_type} image size {size} must be positive multiples of patch_size = {patch}")
    return (height // patch) * (width // patch)


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    dim = num_channels(config) * _patch(config) ** 2
    total = sum(patch_count(config, size) for size in sizes)
    # transformers 5.17 and older name them image_patches: their forward's **kwargs took
    # pixel_values without a word, and the model never saw the image
    name = "image_patches" if "pixel_values" not in accepted and "image_patches" in accepted else "pixel_values"
    return {name: torch.randn(total, dim, generator=generator).to(dtype)}


LAYOUT = register_layout(ImageLayout(
    name="flat_patches",
    model_types=("fuyu",),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=patch_count,
))
