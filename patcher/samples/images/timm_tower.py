"""Images for a vision tower that timm builds (``TimmWrapperConfig``): ``pixel_values (N, C, H, W)``.

The config states no image size; the tower does (``patcher.models.timm_towers``). A ViT with absolute
position embeddings (PerceptionLM's Perception Encoder) takes the one size it was made for, so a
second layout is two images per row; a pyramid of strided stages (FastVLM's FastViT, Gemma 3n's
MobileNetV5) takes any multiple of its total stride, here ``PYRAMID_GRID`` by half that many strides,
and the second layout the transpose (a height/width mix-up shows). PerceptionLM's tower takes tiles:
``(N, tiles, C, H, W)``, one tile per image here (the processor's layout for an image no larger
than a tile); found as a variant by running its ``get_image_features``.
"""

from __future__ import annotations

import torch

from ...models.timm_towers import fixed_image_size, timm_level, total_stride
from .layout import ImageLayout, num_channels, register_layout, vision_config
from .square import PYRAMID_GRID
from .tokens import first_field


def _tower(config) -> tuple[str, dict]:
    level = timm_level(vision_config(config))
    if level is None:
        raise ValueError(f"{config.model_type}: vision_config names no timm architecture (no `architecture` and "
                         "`model_args`), so the timm-tower layout cannot size its images")
    return level


def _stride(config) -> int:
    stride = total_stride(*_tower(config))
    if stride is None:
        raise ValueError(f"{config.model_type}: the timm tower {_tower(config)[0]!r} states neither a fixed image size "
                         "nor the strides of its stages (feature_info), or timm is not installed")
    return stride


def default_size(config) -> tuple[int, int]:
    fixed = fixed_image_size(*_tower(config))
    if fixed is not None:
        return fixed
    return PYRAMID_GRID * _stride(config), PYRAMID_GRID // 2 * _stride(config)


def other_size(config) -> tuple[int, int] | None:
    if fixed_image_size(*_tower(config)) is not None:
        return None
    height, width = default_size(config)
    return width, height


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    channels = int((vision_config(config).model_args or {}).get("in_chans", num_channels(vision_config(config))))
    height, width = sizes[0]
    return {"pixel_values": torch.randn(len(sizes), channels, height, width, generator=generator).to(dtype)}


def one_tile_each(config, sample: dict) -> list[dict]:
    return [{**sample, "pixel_values": sample["pixel_values"][:, None]}]


def config_count(config, size) -> int:
    """The count the config states (Gemma 3n's ``vision_soft_tokens_per_image``: its tower pools to a
    fixed grid), else one token per position of the tower's output grid (before any pooling of a
    projector's: PerceptionLM's ``projector_pooling_ratio``)."""
    stated = first_field(config, ("vision_soft_tokens_per_image",))
    if stated is not None:
        return int(stated)
    return (size[0] // _stride(config)) * (size[1] // _stride(config))


LAYOUT = register_layout(ImageLayout(
    name="timm_tower",
    model_types=("fast_vlm", "gemma3n", "perception_lm"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
    variants=one_tile_each,
))
