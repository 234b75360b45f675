"""Merged-patch blocks (Inkling2): one pixel block per image token. ``pixel_values (sum h*w,
patch * merge, patch * merge, C)`` channels last, each block the ``merge x merge`` patches that
become one token, in raster order; ``image_grid_thw (N, 3)`` counted in image tokens (merged
patches), not in patches as in the Qwen-VL layout. Any size in multiples of ``patch_size *
spatial_merge_size``; the sizes and the merge step are the Qwen-VL family's."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, vision_config
from .qwen_vl import default_size, merged_patch, other_size


def grid(config, size) -> tuple[int, int, int]:
    """``(1, rows, columns)`` of image tokens for an image of ``size`` pixels."""
    height, width = size
    step = merged_patch(config)
    if height <= 0 or width <= 0 or height % step or width % step:
        raise ValueError(f"{config.model_type} image size {size} must be positive multiples of patch_size * "
                         f"spatial_merge_size = {step} (the processor pads images to such sizes)")
    return 1, height // step, width // step


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    step, channels = merged_patch(config), num_channels(vision_config(config))
    grids = torch.tensor([grid(config, size) for size in sizes], dtype=torch.long)
    blocks = int(grids.prod(-1).sum())
    values = torch.randn(blocks, step, step, channels, generator=generator).to(dtype)
    return {"pixel_values": values, "image_grid_thw": grids}


def config_count(config, size) -> int:
    t, h, w = grid(config, size)
    return t * h * w


LAYOUT = register_layout(ImageLayout(
    name="merged_patches",
    model_types=("inkling2",),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
))
