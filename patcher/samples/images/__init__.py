"""Processor-free image samples for every image-text-to-text architecture, built from the config.

One module per pixel layout (``square``, ``pixtral``, ``qwen_vl``, ``merged_patches``, ``idefics``,
``anyres``, ``naflex``, ``navit_packed``, ``flat_patches``, ``prefix``, ``patch_positions``, ``pix2struct``,
``position_mask``, ``timm_tower``, ``temporal_patches``, ``overlapping_crops``; ``documents``: UDOP, Pix2Struct
and PP-FormulaNet, encoder-decoders whose encoder takes the page, with builders of their own; ``vq_tokens``:
Chameleon and Emu3, whose own VQ-VAE turns the pixels into tokens of their vocabulary),
each an :class:`~patcher.samples.images.layout.ImageLayout` registered with
``patcher.samples.register_multimodal_sample`` for the model types that take it; the zoo's own
builders replace these for its model types. Importing this package registers them all.

The builders take the common sample keywords (``batch_size``, ``seq_len``, ``left_padding``,
``device``, ``generator``) plus ``num_images`` (per row), ``image_size`` and ``model``: with a
model, the image tokens per image are counted by running its own ``get_image_features`` on the
synthetic pixels (:func:`~patcher.samples.images.tokens.features_per_image`); without (or for a model that
has none), from the config.

Each layout is checked against the image processor of one of its model types, built offline from its
defaults and run on a random image (``tests/samples/test_images.py``, ``-k processor``): the same pixel input
names, per-image shapes and dtypes, and the same grids, sizes, masks and positions. transformers' PIL
backends run without torchvision; the processors with a torchvision backend only (Inkling2, LFM2-VL,
Gemma 4 Unified, Inkling, Molmo2) are checked where torchvision is installed.
"""

from __future__ import annotations

from . import (  # noqa: F401  (registers the layouts)
    anyres, documents, flat_patches, idefics, merged_patches, naflex, navit_packed, patch_positions, pix2struct,
    pixtral, position_mask, prefix, qwen_vl, square, timm_tower, temporal_patches,
    overlapping_crops, vq_tokens,
)
from .layout import ImageLayout, build_image_sample, forward_inputs
from .tokens import features_per_image, image_token_id

LAYOUTS = [square.LAYOUT, pixtral.LAYOUT, qwen_vl.LAYOUT, merged_patches.LAYOUT, idefics.LAYOUT, anyres.LAYOUT,
           naflex.LAYOUT, navit_packed.LAYOUT, flat_patches.LAYOUT, prefix.LAYOUT, patch_positions.LAYOUT,
           pix2struct.LAYOUT, position_mask.LAYOUT, timm_tower.LAYOUT, *documents.LAYOUTS, temporal_patches.LAYOUT,
           overlapping_crops.LAYOUT, vq_tokens.LAYOUT]


def layout_for(model_type: str) -> ImageLayout | None:
    """The layout registered for ``model_type`` (None if no family here takes it)."""
    return next((layout for layout in LAYOUTS if model_type in layout.model_types), None)


def second_layout(config) -> dict:
    """Sample keywords for a second image layout of the config's family: another image size where
    the family takes several, else two images per row."""
    layout = layout_for(config.model_type)
    other = layout.other_size(config) if layout is not None else None
    return {"image_size": other} if other is not None else {"num_images": 2}


__all__ = ["ImageLayout", "LAYOUTS", "build_image_sample", "features_per_image", "forward_inputs",
           "image_token_id", "layout_for", "second_layout"]
