"""NaViT-packed patches (MiniCPM-V 4.6 / 4.7, MiniCPM-OCR): every crop of every image, at its own
patch grid, cut into ``patch x patch`` squares laid side by side in one row:
``pixel_values (1, C, patch, sum(rows * cols) * patch)`` and ``target_sizes (crops, 2)`` (patch rows,
columns per crop, int32 as the processor gives them).

The tower merges the patch grid twice: a window-attention merger inside the encoder (its
``window_kernel_size``, skipped in ``downsample_mode="4x"``), then ``merger_times`` rounds of
``merge_kernel_size`` in the projector; each image here is one crop (the thumbnail, no detail
slices) whose grid both merges divide. ``<image>`` / ``</image>`` (``image_start_id`` /
``image_end_id``, where the config has them) frame each crop: MiniCPM-V 4.7 lays its canvas
positions out from them.
"""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, pair, register_layout, side, vision_config


def _patch(config) -> int:
    return side(vision_config(config).patch_size)


def _merge_factor(config) -> tuple[int, int]:
    """Patches a side that become one image token: the window merger (unless ``4x`` skips it)
    times every round of the projector's merge kernel."""
    height, width = 1, 1
    if getattr(config, "downsample_mode", None) != "4x":
        window = pair(getattr(vision_config(config), "window_kernel_size", None) or (2, 2))
        height, width = window
    merge_height, merge_width = pair(getattr(config, "merge_kernel_size", None) or (2, 2))
    rounds = int(getattr(config, "merger_times", None) or 1)
    return height * merge_height**rounds, width * merge_width**rounds


def _size(config, rows: int, cols: int) -> tuple[int, int]:
    """An image ``rows x cols`` image tokens large, in pixels."""
    patch = _patch(config)
    factor_height, factor_width = _merge_factor(config)
    return rows * factor_height * patch, cols * factor_width * patch


def default_size(config) -> tuple[int, int]:
    return _size(config, 2, 3)


def other_size(config) -> tuple[int, int]:
    return _size(config, 3, 2)


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    patch = _patch(config)
    grids = [(height // patch, width // patch) for height, width in sizes]
    total = sum(grid_rows * grid_cols for grid_rows, grid_cols in grids)
    channels = num_channels(vision_config(config))
    # one row for the whole batch: the processor packs all crops of all images into it
    return {"pixel_values": torch.randn(1, channels, patch, total * patch, generator=generator).to(dtype),
            "target_sizes": torch.tensor(grids, dtype=torch.int32)}


def config_count(config, size) -> int:
    patch = _patch(config)
    factor_height, factor_width = _merge_factor(config)
    return (size[0] // patch // factor_height) * (size[1] // patch // factor_width)


def markers(config) -> tuple[list[int], list[int]]:
    start, end = getattr(config, "image_start_id", None), getattr(config, "image_end_id", None)
    return ([int(start)] if start is not None else []), ([int(end)] if end is not None else [])


LAYOUT = register_layout(ImageLayout(
    name="navit_packed",
    model_types=("minicpm_ocr", "minicpmv4_6", "minicpmv4_7"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
    markers=markers,
))
