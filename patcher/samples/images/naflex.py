"""SigLIP2 NaFlex towers (LFM2-VL): images of any patch grid, flattened and padded to one patch
count: ``pixel_values (N, patches, C * patch * patch)``, ``spatial_shapes (N, 2)`` (patch rows,
columns) and ``pixel_attention_mask (N, patches)``."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, side, vision_config
from .tokens import first_field


def _patch(config) -> int:
    return side(vision_config(config).patch_size)


def _factor(config) -> int:
    return int(first_field(config, ("downsample_factor",), 1))


def default_size(config) -> tuple[int, int]:
    step = _patch(config) * _factor(config)
    return 2 * step, 3 * step


def other_size(config) -> tuple[int, int]:
    step = _patch(config) * _factor(config)
    return 3 * step, 2 * step


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    patch = _patch(config)
    height, width = sizes[0]
    grid = (height // patch, width // patch)
    count = grid[0] * grid[1]
    dim = num_channels(vision_config(config)) * patch * patch
    return {"pixel_values": torch.randn(len(sizes), count, dim, generator=generator).to(dtype),
            "spatial_shapes": torch.tensor([grid] * len(sizes), dtype=torch.long),
            # int32, as Lfm2VlImageProcessor builds it (its pad_along_first_dim)
            "pixel_attention_mask": torch.ones(len(sizes), count, dtype=torch.int32)}


def config_count(config, size) -> int:
    patch, factor = _patch(config), _factor(config)
    return (size[0] // patch // factor) * (size[1] // patch // factor)


LAYOUT = register_layout(ImageLayout(
    name="naflex",
    model_types=("lfm2_vl",),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
))
