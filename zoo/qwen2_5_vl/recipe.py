"""Qwen2.5-VL recipe: tiny test models, processor-free multimodal samples and tracing defaults.

What the zoo needs to trace ``Qwen2_5_VLForConditionalGeneration`` into one subgraph per decoder
layer, and to test that:

- :func:`tiny_config` / :func:`tiny_model`: a tiny random model of the real classes (vision tower
  with windowed and full-attention blocks, patch merger, M-RoPE) whose forward takes milliseconds,
  with no dead path (every all-zero parameter is woken).
- :func:`build_sample`: valid model inputs built from a config alone (no processor download), in
  the Qwen VL family's layout (``zoo._qwen_vl_samples``). Registered for ``model_type ==
  "qwen2_5_vl"`` so ``patcher.samples.multimodal_sample`` finds it. Images only: no video, so no
  ``second_per_grid_ts``.
- :data:`RECIPE`: the declaration the zoo reads (``zoo._recipe.Recipe``): what to generate
  from, what to cut at and what to keep opaque, how a sample lays out an image, and the real
  config it is traced on.

The sample conventions every zoo recipe follows are in ``zoo._recipe_helpers``.

Unlike Qwen2-VL, the vision tower attends within windows of ``window_size`` pixels
(``window_size // (patch_size * spatial_merge_size)`` merged patches a side) except in the blocks
listed in ``fullatt_block_indexes``, and the merger projects to ``out_hidden_size`` (the text
hidden size; ``vision_config.hidden_size`` is the tower's own width). The tiny config keeps both
kinds of block (block 0 windowed, block 1 full) and windows of 2 x 2 merged patches, so images of 3
merged patches a side (drawn by the tests; the default image is 2 x 3) are split into several
windows, one of them partial, and the window permutation is not the identity.
"""

from __future__ import annotations

from transformers import Qwen2_5_VLConfig

from patcher.samples import register_multimodal_sample

from .. import _qwen_vl_samples as _qwen_vl
from .._qwen_vl_samples import default_image_size, example_image_sizes, image_grid, image_token_count  # noqa: F401
from .._recipe import RealConfig, entry_recipe
from .._recipe_helpers import make_tiny_model as _make_tiny_model

MODEL_TYPE = "qwen2_5_vl"
MODEL_CLASS = "Qwen2_5_VLForConditionalGeneration"

#: Opt-in: the vision tower's blocks as sequential targets too (windowed and full-attention blocks
#: alike: the window index and both ``cu_seqlens`` are graph values handed on from block to block):
#: one subgraph per block, then one per text layer, in one chain (``patcher trace --vision-blocks``;
#: ``patcher.find_tower_blocks`` finds the same class). The tower is then traced through, so
#: :data:`VISION_IGNORE` replaces ``RECIPE.default_ignore``, whose entries keep the tower opaque.
VISION_TARGETS: list[str] = ["Qwen2_5_VLVisionBlock"]
VISION_IGNORE = _qwen_vl.VISION_IGNORE  # none beyond the defaults

# Tiny sizes: hidden 32 with 4 heads of 8 (2 kv heads, GQA like the real 28/4), M-RoPE sections
# summing to head_dim / 2 like the real [16, 24, 24] over 128; vision patches of 4 px, a tower of
# width 16 (2 heads of 8) merged into the text width 32 (out_hidden_size), windows of 16 px = 2 x 2
# merged patches, block 0 windowed and block 1 full (the real tower: windows of 112 px = 4 x 4
# merged patches, full attention in blocks 7, 15, 23, 31).
_TINY_TEXT = dict(
    vocab_size=200, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1], "rope_theta": 1000000.0},
    bos_token_id=1, eos_token_id=2, pad_token_id=0,
)
_TINY_VISION = dict(
    depth=2, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, in_channels=3, patch_size=4,
    temporal_patch_size=2, spatial_merge_size=2, window_size=16, fullatt_block_indexes=[1], tokens_per_second=2,
)
# Special ids inside the tiny vocabulary, in the real order (151652..151656).
_TINY_TOP = dict(vision_start_token_id=190, vision_end_token_id=191, image_token_id=193, video_token_id=194)


def tiny_config(**overrides) -> Qwen2_5_VLConfig:
    """A tiny ``Qwen2_5_VLConfig``. Overrides: top-level fields, or ``text_config`` /
    ``vision_config`` dicts merged into the tiny defaults."""
    return _qwen_vl.tiny_config(Qwen2_5_VLConfig, "out_hidden_size", overrides, _TINY_TEXT, _TINY_VISION, _TINY_TOP)


tiny_model = _make_tiny_model(MODEL_CLASS, tiny_config)


# The sample layout and its image functions (imported above, read by tests and callers from the
# recipe) are the Qwen VL family's (zoo/_qwen_vl_samples.py); the builder is registered for this model type.
build_sample = register_multimodal_sample(MODEL_TYPE)(_qwen_vl.build_sample)
SAMPLE_LAYOUT = _qwen_vl.SAMPLE_LAYOUT


RECIPE = entry_recipe(
    globals(),
    exports=["Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLModel"],
    # One subgraph per text decoder layer.
    default_targets=["Qwen2_5_VLDecoderLayer"],
    default_ignore=_qwen_vl.TEXT_IGNORE,  # the family's (zoo/_qwen_vl_samples.py says why)
    real_configs=[
        RealConfig(
            "Qwen2.5-VL-7B-Instruct", text_subgraphs=29, multimodal_subgraphs=29,
            layers={"Qwen2_5_VLDecoderLayer": 28, "Qwen2_5_VLVisionBlock": 32},
            image_span=3 * 2 + 2,  # as Qwen2-VL: the same patch size and merge
            sample_shapes={"pixel_values": (4 * 24, 3 * 2 * 14 * 14)},
        ),
    ],
)
