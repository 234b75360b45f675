"""Flattened patches with a patch grid (Qwen2-VL and the many towers built like it: Qwen3-VL,
GLM-4V, PaddleOCR-VL, HunYuan-VL, Qwen4-Exp, Dots3-Note, Cohere Compass, ...): ``pixel_values
(sum t*h*w, C * temporal_patch * patch * patch)`` and ``image_grid_thw (N, 3)``, one frame per patch where the
vision config states no temporal patch (Dots3-Note's 2-D patch embedding); any size in multiples
of ``patch_size * spatial_merge_size``. Each image's run sits between ``<vision_start>`` /
``<vision_end>`` markers where the config names them (the rope index finds images by them)."""

from __future__ import annotations

import torch

from .layout import ImageLayout, num_channels, register_layout, side, vision_config
from .tokens import first_field


def _patch(config) -> int:
    return side(first_field(vision_config(config), ("patch_size",)))


def _merge(config) -> int:
    """Patches merged per side (``spatial_merge_size``; ``merge_size``; Kimi's ``merge_kernel_size``)."""
    return side(first_field(vision_config(config), ("spatial_merge_size", "merge_size", "merge_kernel_size"),
                            first_field(config, ("spatial_merge_size",), 1)))


def merged_patch(config) -> int:
    """Pixels a side of one merged patch: the square of patches that becomes one image token."""
    return _patch(config) * _merge(config)


def default_size(config) -> tuple[int, int]:
    return 2 * merged_patch(config), 3 * merged_patch(config)  # two by three merged patches: a h/w mix-up shows


def other_size(config) -> tuple[int, int]:
    return 3 * merged_patch(config), 2 * merged_patch(config)


def grid(config, size) -> tuple[int, int, int]:
    height, width = size
    step, patch = merged_patch(config), _patch(config)
    if height <= 0 or width <= 0 or height % step or width % step:
        raise ValueError(f"{config.model_type} image size {size} must be positive multiples of patch_size * "
                         f"spatial_merge_size = {step} (the processor resizes images to such sizes)")
    return 1, height // patch, width // patch


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    vision = vision_config(config)
    temporal = int(first_field(vision, ("temporal_patch_size", "patch_temporal"), 1))
    patch_dim = num_channels(vision) * temporal * _patch(config) ** 2
    grids = torch.tensor([grid(config, size) for size in sizes], dtype=torch.long)
    patches = int(grids.prod(-1).sum())
    sample = {"pixel_values": torch.randn(patches, patch_dim, generator=generator).to(dtype), "image_grid_thw": grids}
    if "image_merge_sizes" in accepted:  # VideoLLaMA3: the merge size per image
        sample["image_merge_sizes"] = torch.full((len(sizes),), _merge(config), dtype=torch.long)
    return sample


def variants(config, pixels: dict) -> list[dict]:
    """Other patch arrangements towers of this family take: one temporal frame or two (towers whose
    config does not state ``temporal_patch_size``), patches as ``(C, p, p)`` images, or as one
    batch ``(1, N, C, p, p)``."""
    values = pixels["pixel_values"]
    count, channels, patch = values.shape[0], num_channels(vision_config(config)), _patch(config)
    image = values[:, : channels * patch * patch]
    found = [{**pixels, "pixel_values": image}, {**pixels, "pixel_values": torch.cat([image, image], -1)},
             {**pixels, "pixel_values": image.reshape(count, channels, patch, patch)},
             {**pixels, "pixel_values": image.reshape(1, count, channels, patch, patch)}]
    return [candidate for candidate in found if candidate["pixel_values"].shape != values.shape]


def config_count(config, size) -> int:
    t, h, w = grid(config, size)
    return t * h * w // _merge(config) ** 2


def markers(config) -> tuple[list[int], list[int]]:
    start = first_field(config, ("vision_start_token_id", "image_start_token_id"))
    end = first_field(config, ("vision_end_token_id", "image_end_token_id"))
    return ([int(start)] if start is not None else []), ([int(end)] if end is not None else [])


LAYOUT = register_layout(ImageLayout(
    name="qwen_vl",
    model_types=("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "glm4v",
                 "glm46v", "glmga", "glm4v_moe", "glm5_next", "glm_ocr", "cosmos3_edge", "cosmos3_omni",
                 "ernie4_5_vl_moe", "exaone4_5", "hunyuan_vl", "hyperclovax_vision_v2", "kimi_k25",
                 "lfm3_vl", "minimax_m3_vl", "muse_glimmer", "muse_spark", "paddleocr_vl",
                 "qwen2_5_omni_thinker", "qwen3_omni_moe_thinker", "video_llama_3", "qwen4_exp", "dots3_note",
                 "cohere_compass"),
    pixels=pixels, default_size=default_size, other_size=other_size, config_count=config_count, markers=markers,
    variants=variants,
))
