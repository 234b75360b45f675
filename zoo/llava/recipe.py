"""Llava (1.5) recipe: tiny test models, processor-free multimodal samples and tracing defaults.

What the zoo needs to trace ``LlavaForConditionalGeneration`` into one subgraph per decoder layer,
and to test that:

- :func:`tiny_config` / :func:`tiny_model`: a tiny random model of the real classes (CLIP vision
  tower, two-layer GELU projector, Llama text model) whose forward takes milliseconds, with no dead
  path (every all-zero parameter, e.g. the projector and CLIP biases, is woken).
- :func:`build_sample`: valid model inputs built from a config alone (no processor download):
  ``input_ids`` with :func:`image_token_count` ``image_token_index`` tokens per image,
  ``attention_mask`` and ``pixel_values`` ``(batch_size * num_images, C, S, S)`` (``S =
  vision_config.image_size``: CLIP has a fixed input size). Registered for ``model_type ==
  "llava"``.
- :data:`RECIPE`: the declaration the zoo reads (``zoo._recipe.Recipe``): what to generate
  from, what to cut at and what to keep opaque, how a sample lays out an image, and the real
  config it is traced on.

The sample conventions every zoo recipe follows are in ``zoo._recipe_helpers``. Here an image's
span is its run of image tokens, so ``input_ids.shape[1] == seq_len + num_images *
image_token_count(config)``; ``image_size`` may only repeat the config's size. The sample is
built by the fixed-size family's ``zoo._fixed_size_samples.image_inputs`` from
:data:`SAMPLE_LAYOUT`, as Gemma3's is.
"""

from __future__ import annotations

from typing import Sequence

from transformers import LlavaConfig

from patcher.samples import register_multimodal_sample

from .. import _fixed_size_samples as _fixed_size
from .._fixed_size_samples import default_image_size, example_image_sizes
from .._recipe import RealConfig, SampleLayout, entry_recipe
from .._recipe_helpers import make_tiny_model as _make_tiny_model
from .._recipe_helpers import multimodal_sample_builder as _multimodal_sample_builder
from .._recipe_helpers import tiny_config_parts as _tiny_config_parts

MODEL_TYPE = "llava"
MODEL_CLASS = "LlavaForConditionalGeneration"

#: Opt-in: the vision tower's blocks as sequential targets too (CLIP's hidden-state capture on them
#: is replayed on their graph values, so ``vision_feature_layer`` picks the same layer as in eager):
#: one subgraph per block, then one per text layer, in one chain (``patcher trace --vision-blocks``;
#: ``patcher.find_tower_blocks`` finds the same class). The tower is then traced through, so
#: :data:`VISION_IGNORE` replaces ``RECIPE.default_ignore``, whose entries keep the tower opaque.
VISION_TARGETS: list[str] = ["CLIPEncoderLayer"]
#: Additions to ``patcher.DEFAULT_IGNORE`` when tracing with :data:`VISION_TARGETS`: none beyond the defaults.
VISION_IGNORE: list[str] = []

# Tiny sizes: Llama text hidden 32 (4 heads of 8, 2 kv heads); CLIP 8-px images of 4-px patches
# (4 patches + CLS), two layers so vision_feature_layer=-2 (the real value) picks the first one.
_TINY_TEXT = dict(
    model_type="llama", vocab_size=200, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
    bos_token_id=1, eos_token_id=2, pad_token_id=0,
)
_TINY_VISION = dict(
    model_type="clip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    num_attention_heads=2, image_size=8, patch_size=4, projection_dim=16,
)
# image_token_index inside the tiny vocabulary (the real 32000 is inside 32064 too).
_TINY_TOP = dict(image_token_index=196, image_seq_length=4, vision_feature_layer=-2,
                 vision_feature_select_strategy="default", projector_hidden_act="gelu")


def tiny_config(**overrides) -> LlavaConfig:
    """A tiny ``LlavaConfig``. Overrides: top-level fields, or ``text_config`` / ``vision_config``
    dicts merged into the tiny defaults."""
    text, vision, top = _tiny_config_parts(overrides, _TINY_TEXT, _TINY_VISION, _TINY_TOP)
    if "image_seq_length" not in overrides:  # keep the processor's field consistent with the sizes
        patches = (vision["image_size"] // vision["patch_size"]) ** 2
        top["image_seq_length"] = patches + (top["vision_feature_select_strategy"] == "full")
    return LlavaConfig(text_config=text, vision_config=vision, **top)


tiny_model = _make_tiny_model(MODEL_CLASS, tiny_config)


_TOWER = "Llava's CLIP tower"


def image_token_count(config: LlavaConfig, image_size: int | Sequence[int] | None = None) -> int:
    """Image tokens per image: CLIP yields ``(image_size / patch_size)**2`` patch states plus CLS;
    ``LlavaModel.get_image_features`` drops CLS (``[:, 1:]``) for ``vision_feature_select_strategy
    == "default"`` and keeps it for ``"full"`` (576 for llava-1.5 at 336/14). ``image_size``, if
    given, must be the tower's."""
    _fixed_size.check_size(config, image_size, _TOWER)
    vision = config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2
    return patches + (1 if config.vision_feature_select_strategy == "full" else 0)


#: One image: :func:`image_token_count` ``image_token_index`` tokens, no markers.
SAMPLE_LAYOUT = SampleLayout(image_token="image_token_index", image_token_count=image_token_count, pixels="fixed_size")


@register_multimodal_sample(MODEL_TYPE)
@_multimodal_sample_builder(default_image_size)
def build_sample(config: LlavaConfig, sizes, *, batch_size, seq_len, left_padding, generator, dtype):
    """Inputs for ``LlavaForConditionalGeneration``: ``input_ids`` / ``attention_mask`` ``(B, L)``
    with ``L = seq_len + num_images * image_token_count(config)``, and ``pixel_values``
    ``(batch_size * num_images, C, S, S)`` in row-major image order. ``image_size`` must be ``S``
    (CLIP checks it). ``multimodal=False``: a text-only sample of length ``seq_len``."""
    return _fixed_size.image_inputs(config, sizes, SAMPLE_LAYOUT, _TOWER, batch_size=batch_size, seq_len=seq_len,
                                    left_padding=left_padding, generator=generator, dtype=dtype)


RECIPE = entry_recipe(
    globals(),
    exports=["LlavaForConditionalGeneration", "LlavaModel"],
    # One subgraph per text decoder layer (the text model is a plain Llama).
    default_targets=["LlamaDecoderLayer"],
    # Additions to ``patcher.DEFAULT_IGNORE`` with the recipe's targets (``vision_ignore`` replaces
    # them when the tower's blocks are targets). The CLIP tower ``model.vision_tower`` and the
    # projector are no ancestors of these targets, so each is a single call anyway; their entries
    # change nothing with them. ``get_image_features`` ends with ``list(image_features)`` (iterating a
    # proxy; the image count would be baked): one opaque call.
    default_ignore=[
        "re:model\\.vision_tower",
        "re:model\\.multi_modal_projector",
        "get_image_features",
    ],
    real_configs=[
        RealConfig(
            "llava-1.5-7b-hf", text_subgraphs=33, multimodal_subgraphs=33,
            layers={"LlamaDecoderLayer": 32},
            image_span=576,  # (336 / 14)**2, CLS dropped ("default" strategy)
            sample_shapes={"pixel_values": (4, 3, 336, 336)},
        ),
    ],
)
