"""Gemma3 (vision) recipe: tiny test models, processor-free multimodal samples and tracing defaults.

What the zoo needs to trace ``Gemma3ForConditionalGeneration`` (gemma-3-4b-it and larger: SigLIP
vision tower, pooled projector, Gemma3 text model with sliding and full attention layers) into one
subgraph per decoder layer, and to test that:

- :func:`tiny_config` / :func:`tiny_model`: a tiny random model of the real classes whose forward
  takes milliseconds, with both layer types (one sliding, one full attention layer), a sliding
  window shorter than the samples, and no dead path (the all-zero projector weight is woken).
- :func:`build_sample`: valid model inputs built from a config alone (no processor download):
  ``input_ids`` with ``boi`` + ``mm_tokens_per_image`` image tokens + ``eoi`` per image,
  ``attention_mask``, ``token_type_ids`` (1 on image tokens: the processor returns it, and the
  model then lets the tokens of one image attend to each other bidirectionally) and
  ``pixel_values`` ``(batch_size * num_images, C, S, S)`` (SigLIP has a fixed input size ``S``).
  Registered for ``model_type == "gemma3"``.
- :data:`RECIPE`: the declaration the zoo reads (``zoo._recipe.Recipe``): what to generate
  from, what to cut at and what to keep opaque, how a sample lays out an image, and the real
  config it is traced on.

The sample conventions every zoo recipe follows are in ``zoo._recipe_helpers``. Here an image's
span is ``mm_tokens_per_image + 2`` tokens, so ``input_ids.shape[1] == seq_len + num_images *
span``; ``image_size`` may only repeat the config's size. The sample is built by the fixed-size
family's ``zoo._fixed_size_samples.image_inputs`` from :data:`SAMPLE_LAYOUT`, as Llava's is.
"""

from __future__ import annotations

from typing import Sequence

from transformers import Gemma3Config

from patcher.samples import register_multimodal_sample

from .. import _fixed_size_samples as _fixed_size
from .._fixed_size_samples import default_image_size, example_image_sizes
from .._recipe import RealConfig, SampleLayout, entry_recipe
from .._recipe_helpers import make_tiny_model as _make_tiny_model
from .._recipe_helpers import multimodal_sample_builder as _multimodal_sample_builder
from .._recipe_helpers import tiny_config_parts as _tiny_config_parts

MODEL_TYPE = "gemma3"
MODEL_CLASS = "Gemma3ForConditionalGeneration"

#: Opt-in: the vision tower's blocks as sequential targets too (SigLIP's encoder layers): one
#: subgraph per block, then one per text layer, in one chain (``patcher trace --vision-blocks``;
#: ``patcher.find_tower_blocks`` finds the same class). The tower is then traced through, so
#: :data:`VISION_IGNORE` replaces ``RECIPE.default_ignore``, whose entries keep the tower opaque.
VISION_TARGETS: list[str] = ["SiglipEncoderLayer"]
#: Additions to ``patcher.DEFAULT_IGNORE`` when tracing with :data:`VISION_TARGETS`: none beyond the defaults.
VISION_IGNORE: list[str] = []

# Tiny sizes: text hidden 32 with 4 heads of 8 (2 kv heads, GQA like the real 8/4), one sliding and
# one full attention layer (the real model has 5 sliding per full), a window of 4 tokens so it cuts
# into every sample; SigLIP 16-px images of 4-px patches (4x4 patches pooled to 2x2 = 4 tokens).
_TINY_TEXT = dict(
    vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8, max_position_embeddings=256,
    sliding_window=4, layer_types=["sliding_attention", "full_attention"],
    bos_token_id=2, eos_token_id=1, pad_token_id=0,
)
_TINY_VISION = dict(
    model_type="siglip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=2,
    num_attention_heads=2, image_size=16, patch_size=4, vision_use_head=False,
)
# Special ids inside the tiny vocabulary, in the real order (boi 255999 < eoi 256000 < image 262144
# < vocab 262208).
_TINY_TOP = dict(mm_tokens_per_image=4, boi_token_index=290, eoi_token_index=291, image_token_index=292)


def tiny_config(**overrides) -> Gemma3Config:
    """A tiny ``Gemma3Config``. Overrides: top-level fields, or ``text_config`` / ``vision_config``
    dicts merged into the tiny defaults."""
    text, vision, top = _tiny_config_parts(overrides, _TINY_TEXT, _TINY_VISION, _TINY_TOP)
    return Gemma3Config(text_config=text, vision_config=vision, **top)


tiny_model = _make_tiny_model(MODEL_CLASS, tiny_config)


_TOWER = "Gemma3's SigLIP tower"


def image_token_count(config: Gemma3Config, image_size: int | Sequence[int] | None = None) -> int:
    """Image tokens per image: the projector pools SigLIP's patch grid to ``mm_tokens_per_image``
    (256 for gemma-3 at 896/14). ``image_size``, if given, must be the tower's."""
    _fixed_size.check_size(config, image_size, _TOWER)
    return config.mm_tokens_per_image


#: One image: ``boi`` + :func:`image_token_count` image tokens + ``eoi``; ``token_type_ids`` is 1 on
#: the image tokens (the processor returns it, and the model lets the tokens of one image attend to
#: each other bidirectionally).
SAMPLE_LAYOUT = SampleLayout(image_token="image_token_id", image_token_count=image_token_count, pixels="fixed_size",
                             markers=("boi_token_index", "eoi_token_index"), token_type_key="token_type_ids")


@register_multimodal_sample(MODEL_TYPE)
@_multimodal_sample_builder(default_image_size)
def build_sample(config: Gemma3Config, sizes, *, batch_size, seq_len, left_padding, generator, dtype):
    """Inputs for ``Gemma3ForConditionalGeneration``: ``input_ids`` / ``attention_mask`` /
    ``token_type_ids`` ``(B, L)`` with ``L = seq_len + num_images * (image_token_count(config) + 2)``,
    and ``pixel_values`` ``(batch_size * num_images, C, S, S)`` in row-major image order.
    ``image_size`` must be ``S``. ``multimodal=False``: a text-only sample of length ``seq_len``."""
    return _fixed_size.image_inputs(config, sizes, SAMPLE_LAYOUT, _TOWER, batch_size=batch_size, seq_len=seq_len,
                                    left_padding=left_padding, generator=generator, dtype=dtype)


RECIPE = entry_recipe(
    globals(),
    exports=["Gemma3ForConditionalGeneration", "Gemma3Model"],
    # One subgraph per text decoder layer.
    default_targets=["Gemma3DecoderLayer"],
    # Additions to ``patcher.DEFAULT_IGNORE`` (which already keeps the mask builders, including
    # ``create_masks_for_vision_model``, opaque) with the recipe's targets (``vision_ignore`` replaces
    # them when the tower's blocks are targets). The SigLIP tower and the projector are no ancestors
    # of these targets, so each is a single call anyway; their entries change nothing with them.
    # ``get_image_features`` sets an attribute on the tower's output (``pooler_output``), which a traced
    # value cannot hold: one opaque call.
    default_ignore=[
        "re:model\\.vision_tower",
        "re:model\\.multi_modal_projector",
        "get_image_features",
    ],
    real_configs=[
        RealConfig(
            "gemma-3-4b-it", text_subgraphs=35, multimodal_subgraphs=35,
            layers={"Gemma3DecoderLayer": 34, "SiglipEncoderLayer": 27},
            image_span=256 + 2,  # 64 x 64 SigLIP patches of 14 px at 896 pooled to 16 x 16, + boi, eoi
            sample_shapes={"pixel_values": (4, 3, 896, 896)},
        ),
    ],
    original_traces="its only blocker was create_masks_for_vision_model, which the tracer keeps opaque by default",
)
