"""LLaVA-NeXT any-resolution (LLaVA-NeXT, -Video, OneVision, Granite 4 Vision): each image is a base
tile plus the tiles of its best-fitting ``image_grid_pinpoints`` resolution: ``pixel_values (N, 1 +
tiles, C, S, S)`` and the original ``image_sizes (N, 2)``, from which the model unpads its features.
Granite 4 Vision (LLaVA-NeXT's processor) hands its features to the decoder as ``deepstack_features``
alone, each entry as many per image as image tokens; they are counted from its first entry."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, vision_config
from .square import default_size as tile_size


def tiles(config, size) -> int:
    """Base tile plus the grid tiles, as the processor cuts them (transformers' own helper)."""
    from transformers.models.llava_next.modeling_llava_next import image_size_to_num_patches

    return image_size_to_num_patches(list(size), config.image_grid_pinpoints, tile_size(config)[0])


def default_size(config) -> tuple[int, int]:
    height, width = tile_size(config)
    return height, 2 * width  # a wide image: two grid tiles plus the base tile


def other_size(config) -> tuple[int, int]:
    height, width = tile_size(config)
    return 2 * height, width


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    channels = num_channels(vision_config(config))
    height, width = tile_size(config)
    count = tiles(config, sizes[0])
    return {"pixel_values": torch.randn(len(sizes), count, channels, height, width, generator=generator).to(dtype),
            "image_sizes": torch.tensor(sizes, dtype=torch.long)}


def config_count(config, size) -> int:
    raise ValueError(f"{config.model_type}: the image token count of an any-resolution image depends on the "
                     "unpadding of its features; pass model= so the model counts them")


LAYOUT = register_layout(ImageLayout(
    name="anyres",
    model_types=("llava_next", "llava_next_video", "llava_onevision", "granite4_vision"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count,
))
