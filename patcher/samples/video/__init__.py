"""Processor-free video samples, built from the config (the video counterpart of ``patcher.samples.images``).

One :class:`VideoLayout` per way a family takes video:

- ``frames``: ``pixel_values_videos (V, F, C, S, S)``, every frame at the tower's fixed size
  (LLaVA-NeXT-Video, LLaVA-OneVision, Video-LLaVA; InstructBLIP-Video names it ``pixel_values``
  and adds its Q-Former instruction, one per video);
- ``video_grid``: the Qwen2-VL patch rows, ``pixel_values_videos (sum t*h*w, C * temporal_patch *
  patch * patch)`` and ``video_grid_thw (V, 3)``, ``t`` = frames / ``temporal_patch_size``; each
  video's run sits between the config's ``<vision_start>`` / ``<vision_end>`` markers, one run per
  video (Qwen2-VL, Qwen2.5-VL) or one per temporal patch (Qwen3-VL splits a video into frames: its
  rope index repeats the grid per frame and expects one group of tokens each). GLM-4V is not here:
  its processor puts each frame's tokens under the image placeholder, a layout of its own.

The video tokens per video are counted by the model's own ``get_video_features`` on the synthetic
pixels (:func:`patcher.samples.images.tokens.features_per_image` with ``method_name``); ``mm_token_type_ids``
(2 on video tokens, the processors' value) goes along where ``forward`` takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..images import qwen_vl, square
from ..images.layout import forward_inputs, num_channels, vision_config
from ..images.tokens import check_counts, features_per_image, first_field, token_rows

Size = tuple[int, int]


@dataclass(frozen=True)
class VideoLayout:
    """How one family takes video. ``pixels(config, videos, frames, size, generator, dtype, accepted)``
    returns the video inputs for ``videos`` videos of ``frames`` frames of ``size``;
    ``default(config)`` / ``other(config)`` the ``(frames, size)`` of the first and second sample;
    ``spans(config, count, frames)`` the tokens of one video whose features number ``count``."""

    name: str
    model_types: tuple[str, ...]
    pixels: Callable[..., dict[str, torch.Tensor]]
    default: Callable[[Any], tuple[int, Size]]
    other: Callable[[Any], tuple[int, Size]]
    spans: Callable[[Any, int, int], list[int]]


def video_token_id(config) -> int:
    token = first_field(config, ("video_token_id", "video_token_index"))
    if token is None:
        raise ValueError(f"{config.model_type}: the config has no video_token_id / video_token_index, so there is "
                         "no placeholder to put video features at")
    return int(token)


# -- frames: (V, F, C, S, S) ---------------------------------------------------------------------

def _frames_pixels(config, videos, frames, size, generator, dtype, accepted) -> dict[str, torch.Tensor]:
    channels = num_channels(square.pixel_tower_config(config))
    values = torch.randn(videos, frames, channels, *size, generator=generator).to(dtype)
    if "pixel_values_videos" in accepted:
        return {"pixel_values_videos": values}
    # InstructBLIP-Video: the video is `pixel_values`, with one Q-Former instruction per video
    return {"pixel_values": values, **square.qformer_inputs(config, videos, generator)}


FRAMES = VideoLayout(
    name="frames",
    model_types=("llava_next_video", "llava_onevision", "video_llava", "instructblipvideo"),
    pixels=_frames_pixels,
    default=lambda config: (2, square.default_size(config)),
    other=lambda config: (3, square.default_size(config)),  # another frame count: the size is fixed
    spans=lambda config, count, frames: [video_token_id(config)] * count,
)


# -- video_grid: Qwen2-VL patch rows ---------------------------------------------------------------

def _temporal(config) -> int:
    return int(first_field(vision_config(config), ("temporal_patch_size", "patch_temporal"), 1))


def _grid_pixels(config, videos, frames, size, generator, dtype, accepted) -> dict[str, torch.Tensor]:
    temporal = _temporal(config)
    if frames % temporal:
        raise ValueError(f"{config.model_type}: {frames} frames are not whole temporal patches of {temporal}")
    _, height, width = qwen_vl.grid(config, size)
    patch_dim = num_channels(vision_config(config)) * temporal * qwen_vl._patch(config) ** 2
    grids = torch.tensor([[frames // temporal, height, width]] * videos, dtype=torch.long)
    rows = int(grids.prod(-1).sum())
    return {"pixel_values_videos": torch.randn(rows, patch_dim, generator=generator).to(dtype),
            "video_grid_thw": grids}


#: families whose video is one group of tokens per temporal patch (their rope index and feature
#: split repeat the grid per frame)
PER_FRAME = ("qwen3_vl", "qwen3_vl_moe")


def _grid_spans(config, count: int, frames: int) -> list[int]:
    before, after = qwen_vl.markers(config)
    token = video_token_id(config)
    groups = frames // _temporal(config) if config.model_type in PER_FRAME else 1
    return (before + [token] * (count // groups) + after) * groups


VIDEO_GRID = VideoLayout(
    name="video_grid",
    model_types=("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"),
    pixels=_grid_pixels,
    default=lambda config: (2 * _temporal(config), qwen_vl.default_size(config)),
    other=lambda config: (3 * _temporal(config), qwen_vl.other_size(config)),
    spans=_grid_spans,
)

VIDEO_LAYOUTS = [FRAMES, VIDEO_GRID]


def video_layout_for(model_type: str) -> VideoLayout | None:
    return next((layout for layout in VIDEO_LAYOUTS if model_type in layout.model_types), None)


def second_video_layout(config) -> dict:
    """Keywords for the second video sample: the family's other frame count and size."""
    frames, size = video_layout_for(config.model_type).other(config)
    return {"num_frames": frames, "frame_size": size}


def video_sample(config, *, batch_size: int = 1, seq_len: int = 16, left_padding: int = 0,
                 num_frames: int | None = None, frame_size: Size | None = None, device="cpu",
                 generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32,
                 model: torch.nn.Module) -> dict[str, Any]:
    """``input_ids`` / ``attention_mask`` with one video per row (its tokens counted by ``model``'s
    own ``get_video_features`` on these pixels), the layout's video inputs, and ``mm_token_type_ids``
    (2 on video tokens) where ``forward`` takes it."""
    layout = video_layout_for(config.model_type)
    if layout is None:
        raise ValueError(f"no video layout for model_type {config.model_type!r}")
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    check_counts(batch_size, seq_len, 1, left_padding)
    default_frames, default_size = layout.default(config)
    frames = num_frames or default_frames
    size = frame_size or default_size
    accepted = forward_inputs(config, model)
    pixels = layout.pixels(config, batch_size, frames, size, generator, dtype, accepted)
    count = features_per_image(model, pixels, batch_size, method_name="get_video_features")
    token = video_token_id(config)
    input_ids, attention_mask = token_rows(config, batch_size, seq_len, [layout.spans(config, count, frames)],
                                           left_padding, generator)
    sample: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "mm_token_type_ids" in accepted:
        sample["mm_token_type_ids"] = (input_ids == token).long() * 2
    sample.update(pixels)
    return {name: value.to(device) if isinstance(value, torch.Tensor) else value for name, value in sample.items()}


def has_video_layout(config) -> bool:
    return video_layout_for(config.model_type) is not None


__all__ = ["FRAMES", "VIDEO_GRID", "VIDEO_LAYOUTS", "VideoLayout", "has_video_layout", "second_video_layout",
           "video_layout_for", "video_sample", "video_token_id"]
