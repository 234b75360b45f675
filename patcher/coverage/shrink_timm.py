"""Shrink a vision tower that timm builds, through its own knobs.

A ``TimmWrapperConfig`` level (FastVLM, Gemma 3n, PerceptionLM) states no sizes of its tower: they
are the keyword arguments the timm architecture's entry point hands its model class
(``patcher.models.timm_towers.constructor_arguments``). Those are lowered by name like a config's fields,
and the ones that changed go into ``model_args``, which ``timm.create_model`` lets override them:

- widths (``embed_dim``, per-stage ``embed_dims``, a block's ``out_chs``, ``stem_size``) to the tiny
  width, heads and head dims (``num_heads``, ``key_dim``, ``value_dim``) to the tiny ones;
- layer counts: a ViT's ``depth`` to two blocks, per-stage counts (``layers``, ``depths``) to one
  block a stage (the stages, and so the strides, stay); a stage list of block definitions
  (EfficientNet/MobileNet ``block_args``) keeps its first block (the one that strides), the first
  block of every other type and its last block;
- a fixed ``img_size`` to two patches a side, and a rotary reference grid (``ref_feat_shape``) that
  was the real patch grid stays the patch grid.

A width the wrapper states next to its tower (``hidden_size``: FastVLM's 3072, Gemma 3n's 2048), equal
to the real tower's output width, becomes the tiny tower's output width: the projector after it is
built from it. Without timm installed nothing is shrunk: the build then fails naming timm.
"""

from __future__ import annotations

from typing import Any, Callable

from ..models.timm_towers import MODEL_ARGS, constructor_arguments, output_width, timm_level

#: timm's names for sizes that a config names otherwise: each is lowered as the config field it
#: stands for (``shrink._Shrinker._scalar``'s tables: widths to the tiny width, heads, head dims)
_ALIASES = {"embed_dims": "hidden_size", "dims": "hidden_size", "out_chs": "hidden_size", "stem_size": "hidden_size",
            "key_dim": "head_dim", "value_dim": "head_dim"}
#: a ViT's block count
_DEPTHS = {"depth", "num_layers", "num_blocks"}
#: per-stage block counts of a pyramid (FastViT's ``layers``, ConvNeXt's and Swin's ``depths``)
_STAGE_DEPTHS = {"layers", "depths"}
#: blocks kept of a ViT's ``depth``: two, so that a second block shows one block's graph reused
TIMM_DEPTH = 2
#: a list of stages, each a list of block definitions (timm's decoded EfficientNet arch defs)
_BLOCK_ARGS = "block_args"
#: the width a wrapper config states for its tower's output (FastVLM's, Gemma 3n's ``hidden_size``)
_WRAPPER_WIDTHS = ("hidden_size",)

Lower = Callable[[str, Any], Any]


def shrink_timm_level(original: dict, data: dict, lower: Lower) -> None:
    """Shrink, in place, the timm tower of the config level ``data`` (shrunk by field names already;
    ``original`` is the level before). ``lower(field, value)`` lowers one size by its config field
    name. Other levels are left alone."""
    level = timm_level(data)
    if level is None:
        return
    architecture, model_args = level
    real = constructor_arguments(architecture, model_args)
    if real is None:  # no timm here, or an entry point that does not build through timm's builder
        return
    changed = {}
    for key, value in real.items():
        shrunk = _knob(key, value, real, lower)
        if shrunk != value:
            changed[key] = shrunk
    data[MODEL_ARGS] = {**model_args, **changed}
    real_width = output_width(architecture, model_args)
    width = output_width(architecture, data[MODEL_ARGS])
    for key in _WRAPPER_WIDTHS:
        if original.get(key) == real_width and width is not None:
            data[key] = width


def _knob(key: str, value: Any, arguments: dict, lower: Lower) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if key in _DEPTHS and _is_natural(value):
        return min(value, TIMM_DEPTH)
    if key in _STAGE_DEPTHS and isinstance(value, (list, tuple)):
        return _each(value, lambda item: min(item, 1))
    if key == _BLOCK_ARGS and _is_stage_list(value):
        return [_stage(stage, lower) for stage in value]
    if key == "img_size":
        return _image_size(value, arguments.get("patch_size"))
    if key == "ref_feat_shape":
        return _reference_grid(value, arguments)
    return _each(value, lambda item: lower(_ALIASES.get(key, key), item))


def _is_natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _each(value: Any, lower_one: Callable[[int], int]) -> Any:
    """``value`` lowered: an int, or each int of a list or tuple (kept a list or tuple)."""
    if isinstance(value, (list, tuple)) and value and all(_is_natural(item) for item in value):
        return type(value)(lower_one(item) for item in value)
    return lower_one(value) if _is_natural(value) and value > 0 else value


def _is_stage_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(stage, (list, tuple)) and all(isinstance(block, dict) for block in stage) for stage in value)


def _stage(blocks, lower: Lower) -> list[dict]:
    """A stage's first block (the one that strides into it), the first of each other block type and
    its last block (timm takes the stage's features at it: MobileNetV5's attention blocks, which
    never end a real stage, cannot), in order, each lowered by name."""
    kept, types = [], set()
    for index, block in enumerate(blocks):
        kind = block.get("block_type")
        if index in (0, len(blocks) - 1) or kind not in types:
            kept.append({key: _knob(key, item, block, lower) for key, item in block.items()})
        types.add(kind)
    return kept


def _pair(value: Any) -> tuple[int, int] | None:
    if _is_natural(value):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_is_natural(item) for item in value):
        return value[0], value[1]
    return None


def _image_size(value: Any, patch: Any) -> Any:
    """Two patches a side (or the real size where smaller), in the form it came in."""
    size = _pair(value)
    if size is None or not _is_natural(patch) or patch == 0:
        return value
    small = tuple(min(side, 2 * patch) for side in size)
    return small[0] if _is_natural(value) else type(value)(small)


def _reference_grid(value: Any, arguments: dict) -> Any:
    """A reference grid for rotary positions that equals the real patch grid (PE's ``ref_feat_shape``
    32x32 for 448-pixel images of 14-pixel patches) stays the patch grid of the shrunk image size."""
    grid, size, patch = _pair(value), _pair(arguments.get("img_size")), arguments.get("patch_size")
    if grid is None or size is None or not _is_natural(patch) or patch == 0 \
            or grid != (size[0] // patch, size[1] // patch):
        return value
    small = _pair(_image_size(arguments["img_size"], patch))
    return type(value)((small[0] // patch, small[1] // patch)) if isinstance(value, (list, tuple)) \
        else small[0] // patch
