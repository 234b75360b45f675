"""Patches with their (x, y) grid positions (Gemma 4): ``pixel_values (N, max_patches, 3 * patch *
patch)`` and ``image_position_ids (N, max_patches, 2)``, padded to one patch count with ``(-1, -1)``
positions (the processor pads every image to its patch budget; here by one token's worth of
patches, so the padding path runs). Gemma 4's tower pools ``pooling_kernel_size``-squared patches
into one token; the encoder-free Gemma 4 Unified merges them in the processor instead
(``model_patch_size``-wide patches, one token each). Any size in multiples of ``patch *
pooling_kernel_size``."""

from __future__ import annotations

import torch

from .layout import ImageLayout, register_layout, side, vision_config
from .tokens import first_field


def _merged_in_processor(config) -> bool:
    return first_field(vision_config(config), ("model_patch_size",)) is not None


def _patch(config) -> int:
    """Side of one patch in ``pixel_values``: the merged ``model_patch_size`` where the processor
    merges, else ``patch_size``."""
    return side(first_field(vision_config(config), ("model_patch_size", "patch_size")))


def _pool(config) -> int:
    """Patches per side the tower pools into one token (1 where the processor merged them)."""
    return 1 if _merged_in_processor(config) else int(first_field(vision_config(config), ("pooling_kernel_size",), 1))


def _step(config) -> int:
    return _patch(config) * _pool(config)


def default_size(config) -> tuple[int, int]:
    return 2 * _step(config), 3 * _step(config)  # two by three tokens: an x/y mix-up shows


def other_size(config) -> tuple[int, int]:
    return 3 * _step(config), 4 * _step(config)  # another token count: another pixel_values shape


def grid(config, size) -> tuple[int, int]:
    """Patch rows and columns of an image of ``size``."""
    height, width = size
    step, patch = _step(config), _patch(config)
    if height <= 0 or width <= 0 or height % step or width % step:
        raise ValueError(f"{config.model_type} image size {size} must be positive multiples of patch * "
                         f"pooling_kernel_size = {step} (the processor resizes images to such sizes)")
    return height // patch, width // patch


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    height, width = grid(config, sizes[0])
    real = height * width
    padded = real + _pool(config) ** 2
    ys, xs = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    positions = torch.full((padded, 2), -1, dtype=torch.long)
    positions[:real] = torch.stack([xs.flatten(), ys.flatten()], -1)  # (x, y), x fastest: row-major
    values = torch.zeros(len(sizes), padded, 3 * _patch(config) ** 2)
    values[:, :real] = torch.rand(len(sizes), real, values.shape[-1], generator=generator)  # in [0, 1]
    return {"pixel_values": values.to(dtype), "image_position_ids": positions.expand(len(sizes), -1, -1).clone()}


def config_count(config, size) -> int:
    height, width = grid(config, size)
    return height * width // _pool(config) ** 2


def markers(config) -> tuple[list[int], list[int]]:
    start, end = first_field(config, ("boi_token_id",)), first_field(config, ("eoi_token_id",))
    return ([int(start)] if start is not None else []), ([int(end)] if end is not None else [])


LAYOUT = register_layout(ImageLayout(
    name="patch_positions",
    model_types=("gemma4", "gemma4_unified"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count, markers=markers,
))
