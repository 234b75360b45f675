"""Images for a vision tower with one fixed input size ``S = vision_config.image_size`` (CLIP,
SigLIP): the size every image must have, and its ``pixel_values`` ``(batch_size * num_images, C,
S, S)`` in row-major image order. Shared by the recipes of such models (Llava, Gemma3)."""

from __future__ import annotations

import torch


def default_image_size(config) -> tuple[int, int]:
    return config.vision_config.image_size, config.vision_config.image_size


def example_image_sizes(config) -> list[tuple[int, int]]:
    """Image sizes for tests and sweeps to draw from: the one size the vision tower takes."""
    return [default_image_size(config)]


def check_sizes(config, sizes: list[tuple[int, int]], tower: str) -> None:
    """Raise unless every size is the tower's (``tower`` names it in the message)."""
    fixed = default_image_size(config)
    if any(size != fixed for size in sizes):
        raise ValueError(f"{tower} takes {fixed[0]}x{fixed[1]} images only (got {sizes})")


def pixel_values(config, batch_size: int, num_images: int, generator: torch.Generator,
                 dtype: torch.dtype) -> torch.Tensor:
    """Random ``pixel_values`` ``(batch_size * num_images, C, S, S)``."""
    vision = config.vision_config
    pixels = torch.randn(batch_size * num_images, vision.num_channels, *default_image_size(config),
                         generator=generator)
    return pixels.to(dtype)
