"""The Idefics family (Idefics2/3, SmolVLM, Granite-Docling): ``pixel_values (B, N, C, S, S)`` per
text row, ``pixel_attention_mask (B, N, S, S)`` (int64, as the processors give it) marking real
pixels (all ones here: the images are not padded), or ``(B, N)`` marking real tiles
(Granite-Docling)."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, vision_config
from .square import default_size
from .tokens import first_field


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    channels = num_channels(vision_config(config))
    height, width = sizes[0]
    per_row = len(sizes) // rows  # images come row-major, the same number per row
    values = torch.randn(rows, per_row, channels, height, width, generator=generator).to(dtype)
    mask = torch.ones(rows, per_row, height, width, dtype=torch.long)
    return {"pixel_values": values, "pixel_attention_mask": mask}


def variants(config, pixels: dict) -> list[dict]:
    """Granite-Docling marks real tiles, not real pixels: ``pixel_attention_mask (B, N)``."""
    mask = pixels["pixel_attention_mask"]
    return [{**pixels, "pixel_attention_mask": mask.flatten(2).any(-1)}]


def config_count(config, size) -> int:
    """Idefics3 / SmolVLM: ``(S / patch)**2 / scale_factor**2`` after pixel shuffle (the factor in the
    config, or in the vision config for Granite-Docling, whose connector lives in the tower);
    Idefics2: the perceiver's ``resampler_n_latents``."""
    latents = first_field(getattr(config, "perceiver_config", None) or config, ("resampler_n_latents",))
    if latents is not None:
        return int(latents)
    vision = vision_config(config)
    patch = vision.patch_size
    scale = int(first_field(config, ("scale_factor",), first_field(vision, ("scale_factor",), 1)))
    return (size[0] // patch) * (size[1] // patch) // scale**2


LAYOUT = register_layout(ImageLayout(
    name="idefics",
    model_types=("idefics2", "idefics3", "smolvlm", "granite_docling"),
    pixels=pixels, default_size=default_size, config_count=config_count, variants=variants,
))
