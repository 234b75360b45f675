"""Encoder-decoder document models whose encoder takes the page and whose text holds no image
tokens, each with its own builder (the shared one places image tokens in ``input_ids``):

- UDOP (``udop``): ``input_ids`` with a ``bbox`` per token ``(B, L, 4)`` — ``(x0, y0, x1, y1)``
  normalised to 0..1, as the model clips them (its layout embeddings scale them by
  ``max_2d_position_embeddings``, its relative biases need them) — and one page image
  ``pixel_values (B, C, S, S)`` of the config's ``image_size`` per row (the patch grid and the
  visual boxes come from the config's size); each token's box centre picks the patch it adds.
- Pix2Struct (``pix2struct``): the encoder takes only ``flattened_patches (B, N, 2 + C * p * p)``
  (row/column ids first, zero rows pad) with its own ``attention_mask`` over the patches.
- PP-FormulaNet (``pp_formulanet``): only ``pixel_values (B, C, S, S)``.

Every one gets ``decoder_input_ids`` (ordinary text tokens). One image per row: ``num_images`` is
not a choice these models have (the coverage check's second sample asks for two where a family has
no second size; these build one per row, on another batch and length).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..builders import register_multimodal_sample
from . import pix2struct
from .layout import ImageLayout, num_channels, pair, vision_config
from .tokens import check_counts, decoder_rows, token_rows


def _config_size(config) -> tuple[int, int]:
    owner = vision_config(config) if getattr(config, "vision_config", None) is not None else config
    return pair(owner.image_size)


def _page(config, size, rows: int, generator, dtype) -> torch.Tensor:
    channels = num_channels(vision_config(config) if getattr(config, "vision_config", None) is not None else config)
    return torch.randn(rows, channels, *size, generator=generator).to(dtype)


def _boxes(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``(rows, length, 4)`` boxes ``x0 <= x1``, ``y0 <= y1`` in 0..1, none of mean 0 or 1 (UDOP
    treats those as no box)."""
    corners = torch.rand(rows, length, 2, 2, generator=generator) * 0.9 + 0.05
    low, high = corners.min(dim=-1).values, corners.max(dim=-1).values  # (rows, length, 2): x, y
    return torch.cat([low, high], dim=-1)


def _finish(sample: dict, device) -> dict:
    return {name: value.to(device) if isinstance(value, torch.Tensor) else value for name, value in sample.items()}


def build_udop_sample(config, *, batch_size: int = 1, seq_len: int = 16, left_padding: int = 0,
                      device: str | torch.device = "cpu", generator: torch.Generator | None = None,
                      num_images: int = 1, image_size: int | Sequence[int] | None = None,
                      dtype: torch.dtype = torch.float32, **_: Any) -> dict[str, Any]:
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    check_counts(batch_size, seq_len, 1, left_padding)
    input_ids, attention_mask = token_rows(config, batch_size, seq_len, [], left_padding, generator)
    bbox = _boxes(batch_size, input_ids.shape[1], generator) * attention_mask[..., None]  # pads: no box
    size = pair(image_size) if image_size is not None else _config_size(config)
    return _finish({"input_ids": input_ids, "attention_mask": attention_mask, "bbox": bbox,
                    "pixel_values": _page(config, size, batch_size, generator, dtype),
                    "decoder_input_ids": decoder_rows(config, batch_size, seq_len, generator)}, device)


def build_pix2struct_sample(config, *, batch_size: int = 1, seq_len: int = 16, left_padding: int = 0,
                            device: str | torch.device = "cpu", generator: torch.Generator | None = None,
                            num_images: int = 1, image_size: int | Sequence[int] | None = None,
                            dtype: torch.dtype = torch.float32, **_: Any) -> dict[str, Any]:
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    check_counts(batch_size, seq_len, 1, left_padding)
    size = pair(image_size) if image_size is not None else pix2struct.default_size(config)
    patches = pix2struct.pixels(config, [size] * batch_size, generator, dtype, set(), batch_size)["flattened_patches"]
    return _finish({"flattened_patches": patches,
                    "attention_mask": patches[..., :2].ne(0).all(-1).long(),  # the processor's: real patches
                    "decoder_input_ids": decoder_rows(config, batch_size, seq_len, generator)}, device)


def build_pp_formulanet_sample(config, *, batch_size: int = 1, seq_len: int = 16, left_padding: int = 0,
                               device: str | torch.device = "cpu", generator: torch.Generator | None = None,
                               num_images: int = 1, image_size: int | Sequence[int] | None = None,
                               dtype: torch.dtype = torch.float32, **_: Any) -> dict[str, Any]:
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    check_counts(batch_size, seq_len, 1, left_padding)
    size = pair(image_size) if image_size is not None else _config_size(config)
    return _finish({"pixel_values": _page(config, size, batch_size, generator, dtype),
                    "decoder_input_ids": decoder_rows(config, batch_size, seq_len, generator)}, device)


def _pixels_of(builder):
    def pixels(config, sizes, generator, dtype, accepted, rows):
        sample = builder(config, batch_size=rows, seq_len=2, generator=generator, image_size=sizes[0], dtype=dtype)
        return {name: value for name, value in sample.items() if name in ("pixel_values", "flattened_patches")}

    return pixels


def _layout(name: str, builder, default_size, other_size=lambda config: None, other_pixels=None) -> ImageLayout:
    layout = ImageLayout(name=name, model_types=(name,), pixels=_pixels_of(builder), default_size=default_size,
                         config_count=lambda config, size: 0, other_size=other_size, prefix=True,
                         other_pixels=other_pixels)
    builder.layout = layout  # the coverage check reads the layout's other_pixels and location from it
    register_multimodal_sample(name)(builder)
    layout.registered.append(name)
    return layout


UDOP = _layout("udop", build_udop_sample, _config_size)
PIX2STRUCT = _layout("pix2struct", build_pix2struct_sample, pix2struct.default_size, pix2struct.other_size,
                     pix2struct.other_pixels)
PP_FORMULANET = _layout("pp_formulanet", build_pp_formulanet_sample, _config_size)
LAYOUTS = [UDOP, PIX2STRUCT, PP_FORMULANET]
