"""Pix2Struct-style flattened patches (Kosmos-2.5): ``flattened_patches (B, max_patches, 2 + C *
patch * patch)``, one image per text row; each patch row starts with its 1-based row and column in
the patch grid, padding rows are all zeros (the tower masks them by that). The image features
(``latent_query_num`` per image) go where ``image_embeds_position_mask`` is 1; the processor puts
``<s>`` (the text's BOS id) at those positions. Any grid of whole patches: the patch side is
``sqrt(patch_embed_hidden_size / C)``."""

from __future__ import annotations

import math

import torch

from .layout import ImageLayout, num_channels, register_layout, vision_config
from .tokens import first_field


def _patch(config) -> int:
    vision = vision_config(config)
    dim = first_field(vision, ("patch_embed_hidden_size",))
    channels = num_channels(vision)
    patch = math.isqrt(dim // channels) if dim else 0
    if not patch or patch * patch * channels != dim:
        raise ValueError(f"{config.model_type}: patch_embed_hidden_size={dim} is not {channels} * patch * patch")
    return patch


def default_size(config) -> tuple[int, int]:
    return 2 * _patch(config), 3 * _patch(config)  # two by three patches: a row/column mix-up shows


def other_size(config) -> tuple[int, int]:
    return 3 * _patch(config), 2 * _patch(config)


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    if len(sizes) != rows:
        raise ValueError(f"{config.model_type} takes one image per text row ({len(sizes)} images for {rows} rows)")
    patch, channels = _patch(config), num_channels(vision_config(config))
    height, width = sizes[0]
    grid_rows, grid_columns = height // patch, width // patch
    real = grid_rows * grid_columns
    padded = real + grid_columns  # one row of padding: the processor pads to max_patches
    ids = torch.cartesian_prod(torch.arange(grid_rows), torch.arange(grid_columns)) + 1  # 1-based, row-major
    patches = torch.zeros(rows, padded, 2 + channels * patch * patch)
    patches[:, :real, :2] = ids.float()
    patches[:, :real, 2:] = torch.randn(rows, real, channels * patch * patch, generator=generator)
    return {"flattened_patches": patches.to(dtype)}


def other_pixels(sample: dict, generator: torch.Generator) -> dict:
    """Other patch values, the same grid: the row/column ids and the zero padding stay."""
    patches = sample["flattened_patches"].clone()
    real = patches[..., :2].ne(0).all(-1)
    patches[..., 2:][real] = torch.randn(patches[..., 2:][real].shape, generator=generator).to(patches.dtype)
    return {**sample, "flattened_patches": patches}


def config_count(config, size) -> int:
    return int(config.latent_query_num)


LAYOUT = register_layout(ImageLayout(
    name="pix2struct",
    model_types=("kosmos-2.5",),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
    placeholder=lambda config: int(config.get_text_config().bos_token_id),
    other_pixels=other_pixels,
))
