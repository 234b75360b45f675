"""Fixed-size images: ``pixel_values (N, C, S, S)`` at the vision tower's ``image_size``.

The LLaVA-1.5 layout, shared by most towers with position embeddings of one size (CLIP, SigLIP,
InternViT, ...): the processor resizes every image to ``S x S``. DeepSeek-OCR-2 takes its global
view so (an image within the processor's tile size gets no local crops). ``image_sizes`` goes along
where ``forward`` takes it (Aya Vision, Cohere2-Vision, InternVL accept and ignore it for one tile), and
``high_res_pixel_values`` at the high-resolution tower's size where there is one, and InstructBLIP's
Q-Former instruction (``qformer_input_ids``) where ``forward`` takes one.
"""

from __future__ import annotations

import math

import torch

from .layout import ImageLayout, num_channels, register_layout, side, vision_config, vision_owner
from .tokens import first_field


#: final positions per side of a convolutional pyramid that states no image size: the image is
#: this many times the pyramid's total stride (Florence-2's DaViT, stride 32: 128 px; its processor's
#: 768 px give 24 per side, too many image tokens for the tiny text model's positions)
PYRAMID_GRID = 4


def default_size(config) -> tuple[int, int]:
    tower = pixel_tower_config(config)
    size = first_field(tower, ("image_size", "img_size"))
    if size is None:
        stride = pyramid_stride(tower)
        if stride is None:
            raise ValueError(f"{config.model_type}: vision_config has no image_size; the fixed-size layout needs one")
        return stride * PYRAMID_GRID, stride * PYRAMID_GRID
    return (side(size[0]), side(size[1])) if isinstance(size, (list, tuple)) else (int(size), int(size))


def pyramid_stride(tower) -> int | None:
    """The total stride of a tower of convolutional stages (``patch_stride``, one per stage), whose
    size the processor alone fixes: any multiple of it is an image size it takes. None for others."""
    strides = getattr(tower, "patch_stride", None)
    if isinstance(strides, (list, tuple)) and strides and all(isinstance(item, int) and item > 0 for item in strides):
        return math.prod(strides)
    return None


def pixel_tower_config(config):
    """The config of the tower the pixels enter: ``vision_config`` itself where it states an image
    size, else its first sub-config that does. Stacked towers (DeepSeek-OCR-style SAM then CLIP)
    declare the pixel tower first; the later one takes the first one's features, at a size of
    its own that is no image size of the input."""
    vision = vision_config(config)
    if first_field(vision, ("image_size", "img_size")) is not None:
        return vision
    for name in getattr(vision, "sub_configs", {}):
        sub = getattr(vision, name, None)
        if sub is not None and first_field(sub, ("image_size", "img_size")) is not None:
            return sub
    return vision


def pixels(config, sizes, generator, dtype, accepted, rows) -> dict[str, torch.Tensor]:
    channels = num_channels(pixel_tower_config(config))
    height, width = sizes[0]
    sample = {"pixel_values": torch.randn(len(sizes), channels, height, width, generator=generator).to(dtype)}
    if "image_sizes" in accepted:
        sample["image_sizes"] = torch.tensor(sizes, dtype=torch.long)
    if "qformer_input_ids" in accepted:
        sample.update(qformer_inputs(config, len(sizes), generator))
    high_res = getattr(config, "high_res_vision_config", None)
    if "high_res_pixel_values" in accepted and high_res is not None:
        # DeepSeek-VL hybrid: the same image again at the high-resolution tower's size
        side_high = side(first_field(high_res, ("image_size",)))
        sample["high_res_pixel_values"] = torch.randn(len(sizes), channels, side_high, side_high,
                                                      generator=generator).to(dtype)
    return sample


def qformer_inputs(config, images: int, generator, length: int = 5) -> dict[str, torch.Tensor]:
    """InstructBLIP's instruction for the Q-Former, one row per image (the Q-Former turns each image
    into ``num_query_tokens`` features under it): ``qformer_input_ids`` of the Q-Former's own
    vocabulary and its all-ones ``qformer_attention_mask``."""
    vocab = int(config.qformer_config.vocab_size)
    ids = torch.randint(1, vocab, (images, length), generator=generator)
    return {"qformer_input_ids": ids, "qformer_attention_mask": torch.ones_like(ids)}


def config_count(config, size) -> int:
    """``image_seq_length`` / ``mm_tokens_per_image`` where the config states it, else one token per
    patch (LLaVA's ``default`` strategy drops CLS)."""
    names = ("mm_tokens_per_image", "image_seq_length", "num_image_tokens", "num_query_tokens")
    # the config that holds the vision tower states it where the top one does not (T5Gemma2's encoder)
    stated = first_field(config, names)
    stated = stated if stated is not None else first_field(vision_owner(config), names)
    if stated is not None:
        return int(stated)
    patch = side(first_field(vision_config(config), ("patch_size",), 14))
    return (size[0] // patch) * (size[1] // patch)


LAYOUT = register_layout(ImageLayout(
    name="square",
    model_types=("aya_vision", "cohere2_vision", "deepseek_vl", "got_ocr2", "pp_chart2table", "internvl",
                 "qianfan_ocr", "janus", "llama4", "llava", "vipllava", "ovis2", "paligemma", "gemma3",
                 "shieldgemma2", "aria", "florence2", "step3p7", "blip-2", "instructblip", "t5gemma2",
                 "deepseek_vl_hybrid", "unlimited_ocr", "deepseek_ocr2",
                 "video_llava", "llava_onevision_image_only"),
    pixels=pixels,
    default_size=default_size,
    config_count=config_count,
))
