"""Mllama (Llama 3.2 Vision) recipe: tiny test models, processor-free multimodal samples and
tracing defaults.

What the zoo needs to trace ``MllamaForConditionalGeneration`` into one subgraph per decoder
layer, and to test that:

- :func:`tiny_config` / :func:`tiny_model`: a tiny random model of the real classes (tiled vision
  encoder with local and gated global layers, self-attention decoder layers with one
  cross-attention layer between them) whose forward takes milliseconds. Every all-zero parameter is
  woken: the cross-attention layer's ``cross_attn_attn_gate`` / ``cross_attn_mlp_gate`` and the
  vision tile-embedding gates are zero-initialised, so without waking the image would not change
  the output at all.
- :func:`build_sample`: valid model inputs built from a config alone (no processor download):
  ``input_ids`` with one ``<|image|>`` token (``image_token_index``) per image, ``attention_mask``,
  ``pixel_values`` ``(B, num_images, max_num_tiles, C, H, W)`` (unused tiles zero, as the processor
  pads them), ``aspect_ratio_ids`` ``(B, num_images)``, ``aspect_ratio_mask``
  ``(B, num_images, max_num_tiles)`` and ``cross_attention_mask`` ``(B, L, num_images,
  max_num_tiles)`` built with the processor's own functions (from an image token on, text attends
  to that image's valid tiles, up to the next image token; consecutive image tokens share the rest
  of the text). Registered for ``model_type == "mllama"``.
- :data:`RECIPE`: the declaration the zoo reads (``zoo._recipe.Recipe``): what to generate
  from, what to cut at and what to keep opaque, how a sample lays out an image, and the real
  config it is traced on. The cross-attention layers are an opt-in target
  (:data:`CROSS_ATTENTION_TARGETS`, in ``RECIPE.multimodal_targets``): they are skipped on
  text-only inputs, so a text-only calibration never reaches them.

The sample conventions every zoo recipe follows are in ``zoo._recipe_helpers``. Here: an image's
span is its single ``<|image|>`` token, so ``input_ids.shape[1] == seq_len + num_images``, and
``image_size`` ``(height, width)`` must be a whole number of tiles (``vision_config.image_size``)
each way, ``(rows * tile, cols * tile)`` with ``[rows, cols]`` one of the config's
``supported_aspect_ratios``; its aspect ratio id is that index + 1 and it has ``rows * cols``
valid tiles.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import MllamaConfig
from transformers.models.mllama.processing_mllama import (
    convert_sparse_cross_attention_mask_to_dense,
    get_cross_attention_token_mask,
)

from patcher.samples import register_multimodal_sample

from .._recipe import RealConfig, SampleLayout, entry_recipe
from .._recipe_helpers import make_tiny_model as _make_tiny_model
from .._recipe_helpers import multimodal_sample_builder as _multimodal_sample_builder
from .._recipe_helpers import pair as _pair
from .._recipe_helpers import tiny_config_parts as _tiny_config_parts
from .._recipe_helpers import token_rows as _token_rows

MODEL_TYPE = "mllama"
MODEL_CLASS = "MllamaForConditionalGeneration"

#: One subgraph per self-attention decoder layer; the cross-attention layers stay inside them.
DEFAULT_TARGETS: list[str] = ["MllamaSelfAttentionDecoderLayer"]
#: Opt-in: add these to cut at the cross-attention layers too (they only run when an image, or a
#: cache holding one, is given).
CROSS_ATTENTION_TARGETS: list[str] = ["MllamaCrossAttentionDecoderLayer"]

#: Opt-in: the vision tower's blocks as sequential targets too (the local layers, then the gated
#: global ones: one class): one subgraph per block, then one per text layer, in one chain
#: (``patcher trace --vision-blocks``; ``patcher.find_tower_blocks`` finds the same class). The
#: tower is then traced through, so :data:`VISION_IGNORE` replaces ``RECIPE.default_ignore``, whose
#: entries keep the tower opaque.
VISION_TARGETS: list[str] = ["MllamaVisionEncoderLayer"]
#: Additions to ``patcher.DEFAULT_IGNORE`` when tracing with :data:`VISION_TARGETS`:
#: ``RECIPE.default_ignore`` less its vision-model entry (``_prepare_cross_attention_mask`` stays one
#: opaque call, for the reason given there).
VISION_IGNORE: list[str] = ["_prepare_cross_attention_mask"]

# Tiny sizes: text hidden 32 (4 heads of 8, 2 kv heads), three layers with the cross-attention
# layer in the middle (the real model has it at 3, 8, ..., 38 of 40). Vision: 8-px tiles of 4-px
# patches (4 patches + CLS = 5, padded to 8 inside the encoder), the real default tiling (4 tiles,
# 8 aspect ratios); vision_output_dim = hidden * (1 + len(intermediate_layers_indices)).
_TINY_TEXT = dict(
    vocab_size=200, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, cross_attention_layers=[1],
    bos_token_id=1, eos_token_id=2, pad_token_id=0,
)
_TINY_VISION = dict(
    hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_global_layers=1, attention_heads=2,
    image_size=8, patch_size=4, max_num_tiles=4, intermediate_layers_indices=[0, 1], vision_output_dim=48,
)


def tiny_config(**overrides) -> MllamaConfig:
    """A tiny ``MllamaConfig``. Overrides: top-level fields, or ``text_config`` / ``vision_config``
    dicts merged into the tiny defaults. As in the real model, ``image_token_index`` is
    ``text vocab_size`` (the embedding table has ``vocab_size + 8`` rows; the LM head has
    ``vocab_size``)."""
    text, vision, top = _tiny_config_parts(overrides, _TINY_TEXT, _TINY_VISION)
    if "vision_output_dim" not in vision or vision["vision_output_dim"] is None:
        vision["vision_output_dim"] = vision["hidden_size"] * (1 + len(vision["intermediate_layers_indices"]))
    top.setdefault("image_token_index", text["vocab_size"])
    return MllamaConfig(text_config=text, vision_config=vision, **top)


tiny_model = _make_tiny_model(MODEL_CLASS, tiny_config)


def aspect_ratio(config: MllamaConfig, image_size: int | Sequence[int]) -> tuple[int, int]:
    """``(rows, cols)`` of tiles of an image of pixel size ``image_size``; checked against the
    config's supported aspect ratios."""
    vision = config.vision_config
    height, width = _pair(image_size)
    tile = vision.image_size
    if height <= 0 or width <= 0 or height % tile or width % tile:
        raise ValueError(f"Mllama image size {(height, width)} must be whole tiles of {tile} px each way")
    ratio = [height // tile, width // tile]
    if ratio not in [list(r) for r in vision.supported_aspect_ratios]:
        raise ValueError(
            f"Mllama image size {(height, width)} is {ratio[0]}x{ratio[1]} tiles, not one of the supported "
            f"aspect ratios {vision.supported_aspect_ratios}"
        )
    return ratio[0], ratio[1]


def aspect_ratio_id(config: MllamaConfig, image_size: int | Sequence[int]) -> int:
    """1 + the index of the image's aspect ratio in ``supported_aspect_ratios`` (0 means no image)."""
    ratios = [list(r) for r in config.vision_config.supported_aspect_ratios]
    return ratios.index(list(aspect_ratio(config, image_size))) + 1


def supported_image_sizes(config: MllamaConfig) -> list[tuple[int, int]]:
    """Every valid ``image_size``: one per supported aspect ratio."""
    tile = config.vision_config.image_size
    return [(rows * tile, cols * tile) for rows, cols in config.vision_config.supported_aspect_ratios]


def example_image_sizes(config: MllamaConfig) -> list[tuple[int, int]]:
    """Image sizes for tests and sweeps to draw from: every supported one."""
    return supported_image_sizes(config)


def image_token_count(config: MllamaConfig, image_size: int | Sequence[int] | None = None) -> int:
    """One ``<|image|>`` token per image, whatever its size (the vision states reach the text by
    cross-attention: ``tiles * ((tile / patch)**2 + 1)`` states per image)."""
    if image_size is not None:
        aspect_ratio(config, image_size)
    return 1


def default_image_size(config: MllamaConfig) -> tuple[int, int]:
    """One row of two tiles: some of the ``max_num_tiles`` tiles are padding."""
    tile = config.vision_config.image_size
    return tile, 2 * tile


#: One ``<|image|>`` token per image, tiles, and text that cross-attends to the image.
SAMPLE_LAYOUT = SampleLayout(image_token="image_token_index", image_token_count=image_token_count, pixels="tiles",
                             image_reaches_earlier_text=True)


@register_multimodal_sample(MODEL_TYPE)
@_multimodal_sample_builder(default_image_size)
def build_sample(config: MllamaConfig, sizes, *, batch_size, seq_len, left_padding, generator, dtype):
    """Inputs for ``MllamaForConditionalGeneration`` (see the module docstring); ``L = seq_len +
    num_images``. ``multimodal=False``: a text-only sample of length ``seq_len``."""
    ratios = [aspect_ratio(config, size) for size in sizes]
    ratio_ids = [aspect_ratio_id(config, size) for size in sizes]
    tiles = [rows * cols for rows, cols in ratios]

    image_token = config.image_token_index
    spans = [[image_token]] * len(sizes)
    input_ids, attention_mask = _token_rows(config, batch_size, seq_len, spans, left_padding, [image_token],
                                            generator)

    vision = config.vision_config
    max_tiles, tile = vision.max_num_tiles, vision.image_size
    pixel_values = torch.zeros(batch_size, len(sizes), max_tiles, vision.num_channels, tile, tile)
    aspect_ratio_mask = torch.zeros(batch_size, len(sizes), max_tiles, dtype=torch.long)
    aspect_ratio_mask[:, :, 0] = 1  # as the processor does (its padding images count one tile)
    for index, count in enumerate(tiles):
        pixel_values[:, index, :count] = torch.randn(batch_size, count, vision.num_channels, tile, tile,
                                                     generator=generator)
        aspect_ratio_mask[:, index, :count] = 1
    aspect_ratio_ids = torch.tensor([ratio_ids] * batch_size, dtype=torch.long)

    # Exactly as MllamaProcessor: sparse [start, end) ranges from the image tokens, then dense.
    token_masks = [get_cross_attention_token_mask(row, image_token) for row in input_ids.tolist()]
    cross_attention_mask = torch.from_numpy(
        convert_sparse_cross_attention_mask_to_dense(
            token_masks, num_tiles=[tiles] * batch_size, max_num_tiles=max_tiles, length=input_ids.shape[1]
        )
    )
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "pixel_values": pixel_values.to(dtype),
        "aspect_ratio_ids": aspect_ratio_ids,
        "aspect_ratio_mask": aspect_ratio_mask,
        "cross_attention_mask": cross_attention_mask,
    }


RECIPE = entry_recipe(
    globals(),
    exports=["MllamaForConditionalGeneration", "MllamaModel"],
    default_targets=DEFAULT_TARGETS,
    # With images: cut at the cross-attention layers too.
    multimodal_targets=[*DEFAULT_TARGETS, *CROSS_ATTENTION_TARGETS],
    # Additions to ``patcher.DEFAULT_IGNORE`` with the recipe's targets (``vision_ignore`` replaces
    # them when the tower's blocks are targets). The vision model ``model.vision_model`` is no
    # ancestor of these targets, so it is a single call anyway; the entry changes nothing with them.
    # ``_prepare_cross_attention_mask`` unpacks the mask's shape with a star and builds the inverted
    # mask: one opaque call. (``MllamaModel.forward``'s ``if cross_attention_mask.shape[1] != seq_len``
    # is a shape branch that needs a rewrite, not an ignore entry.)
    default_ignore=[
        "re:model\\.vision_model",
        "_prepare_cross_attention_mask",
    ],
    real_configs=[
        RealConfig(
            # --multimodal cuts at the 8 cross-attention layers too; without an image they do not run.
            "Llama-3.2-11B-Vision-Instruct", text_subgraphs=33, multimodal_subgraphs=41,
            layers={"MllamaSelfAttentionDecoderLayer": 32, "MllamaCrossAttentionDecoderLayer": 8},
            image_span=1,
            # Default image: 1 x 2 tiles of 560 px, padded to max_num_tiles = 4; the mask is (B, L, images, tiles).
            sample_shapes={"pixel_values": (2, 2, 4, 3, 560, 560), "cross_attention_mask": (2, 8 + 2, 2, 4)},
        ),
    ],
)
