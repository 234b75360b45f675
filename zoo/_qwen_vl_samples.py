"""What the Qwen VL family (Qwen2-VL, Qwen2.5-VL) shares: one sample builder and its layout, the
tiny-config check (:func:`tiny_config`) and the tracing ignores; two recipes declare them.

Both models take the same processor output: ``<|vision_start|>`` + one ``image_token_id`` per
merged patch + ``<|vision_end|>`` per image, ``mm_token_type_ids`` (required by transformers 5
whenever ``image_grid_thw`` is given), flattened-patch ``pixel_values`` and ``image_grid_thw``;
images of any size that is a multiple of ``patch_size * spatial_merge_size`` (the processor's
resized sizes are). Each recipe registers :func:`build_sample` for its own model type. The
conventions every zoo builder follows are in ``zoo._recipe_helpers``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ._recipe import SampleLayout
from ._recipe_helpers import multimodal_sample_builder as _multimodal_sample_builder
from ._recipe_helpers import pair as _pair
from ._recipe_helpers import tiny_config_parts as _tiny_config_parts


def tiny_config(config_class: type, merger_width: str, overrides: dict, text: dict, vision: dict, top: dict):
    """A tiny ``config_class`` from a recipe's defaults and ``tiny_config(**overrides)``; the
    vision field ``merger_width`` (the patch merger's output size, which the image tokens carry into
    the text model) must equal the text ``hidden_size``."""
    text, vision, top = _tiny_config_parts(overrides, text, vision, top)
    if vision[merger_width] != text["hidden_size"]:
        raise ValueError(f"vision_config.{merger_width} is the merger's output size: it must equal the text hidden_size")
    return config_class(text_config=text, vision_config=vision, **top)
from ._recipe_helpers import token_rows as _token_rows


def image_grid(config, image_size: int | Sequence[int]) -> tuple[int, int, int]:
    """The ``(t, h, w)`` patch grid of one image of pixel size ``image_size``."""
    vision = config.vision_config
    height, width = _pair(image_size)
    step = vision.patch_size * vision.spatial_merge_size
    if height <= 0 or width <= 0 or height % step or width % step:
        raise ValueError(
            f"{config.model_type} image size {(height, width)} must be positive multiples of patch_size * spatial_merge_size "
            f"= {step} (the processor resizes images to such sizes)"
        )
    return 1, height // vision.patch_size, width // vision.patch_size


def image_token_count(config, image_size: int | Sequence[int]) -> int:
    """Image tokens of one image: ``t*h*w / spatial_merge_size**2`` (the markers not included)."""
    t, h, w = image_grid(config, image_size)
    return t * h * w // config.vision_config.spatial_merge_size**2


def default_image_size(config) -> tuple[int, int]:
    """Two by three merged patches: small, and not square (a height/width mix-up shows)."""
    step = config.vision_config.patch_size * config.vision_config.spatial_merge_size
    return 2 * step, 3 * step


def example_image_sizes(config) -> list[tuple[int, int]]:
    """Image sizes for tests and sweeps to draw from: 1 to 3 merged patches a side (any multiple of
    ``patch_size * spatial_merge_size`` is valid)."""
    step = config.vision_config.patch_size * config.vision_config.spatial_merge_size
    return [(rows * step, cols * step) for rows in range(1, 4) for cols in range(1, 4)]


@_multimodal_sample_builder(default_image_size)
def build_sample(config, sizes, *, batch_size, seq_len, left_padding, generator, dtype):
    """Inputs for a Qwen VL ``ForConditionalGeneration``: ``input_ids``, ``attention_mask``,
    ``mm_token_type_ids`` ``(B, L)``; ``pixel_values`` ``(sum(t*h*w), C*temporal_patch*patch*patch)``;
    ``image_grid_thw`` ``(batch_size * num_images, 3)``. ``L = seq_len + num_images * span`` (see
    the module docstring). ``multimodal=False``: a text-only sample of length ``seq_len``."""
    grids = [image_grid(config, size) for size in sizes]
    merge = config.vision_config.spatial_merge_size
    spans = [
        [config.vision_start_token_id] + [config.image_token_id] * (t * h * w // merge**2) + [config.vision_end_token_id]
        for t, h, w in grids
    ]
    special = [config.image_token_id, config.video_token_id, config.vision_start_token_id,
               config.vision_end_token_id, getattr(config, "vision_token_id", None)]
    input_ids, attention_mask = _token_rows(config, batch_size, seq_len, spans, left_padding, special, generator)
    mm_token_type_ids = (input_ids == config.image_token_id).long()

    vision = config.vision_config
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    image_grid_thw = torch.tensor(grids * batch_size, dtype=torch.long)
    num_patches = int(image_grid_thw.prod(-1).sum())
    pixel_values = torch.randn(num_patches, patch_dim, generator=generator).to(dtype)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "mm_token_type_ids": mm_token_type_ids,
        "pixel_values": pixel_values,
        "image_grid_thw": image_grid_thw,
    }


#: One image: ``vision_start`` + :func:`image_token_count` image tokens + ``vision_end``.
SAMPLE_LAYOUT = SampleLayout(image_token="image_token_id", image_token_count=image_token_count, pixels="patch_grid",
                             markers=("vision_start_token_id", "vision_end_token_id"),
                             token_type_key="mm_token_type_ids")

# The recipes' ``default_ignore``: additions to ``patcher.DEFAULT_IGNORE`` (which already keeps
# ``get_rope_index`` and the mask builders opaque) with the text targets (``VISION_IGNORE`` replaces
# them when the tower's blocks are targets). The vision tower ``model.visual`` is no ancestor of these targets, so it is a single
# call anyway; the entry changes nothing with them. ``get_image_features`` / ``get_video_features``
# split the merged patches per image with ``.tolist()`` split sizes (the number of chunks depends on
# the input): traced through, the chunk count would be baked.
TEXT_IGNORE: list[str] = [
    "re:model\\.visual",
    "get_image_features",
    "get_video_features",
]
#: Additions to ``patcher.DEFAULT_IGNORE`` when tracing with the vision blocks: none beyond the defaults.
VISION_IGNORE: list[str] = []
