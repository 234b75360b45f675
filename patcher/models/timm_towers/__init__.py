"""Vision towers that timm builds: transformers' ``TimmWrapperConfig`` (and Gemma 3n's copy of it).

Such a config names a timm ``architecture`` and the ``model_args`` passed to ``timm.create_model``
(FastVLM's ``fastvit_mci3``, Gemma 3n's ``mobilenetv5_300m_enc``, PerceptionLM's
``vit_pe_core_large_patch14_336``). The tower's sizes are not fields of the config: they are the
keyword arguments the architecture's entry point hands its model class, defaults of the entry point
that ``model_args`` override. :func:`constructor_arguments` reads them (the knobs the coverage sweep
shrinks by name), :func:`tower_on_meta` builds the tower on the meta device (its output width, the
stride of its stages, the image size its position embeddings are made for).

Nothing is downloaded: every tower is built with ``pretrained=False``, as ``TimmWrapperModel`` does.
Without timm installed every function here answers None.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
from typing import Any

#: config keys of a level that wraps a timm model (``TimmWrapperConfig.to_dict()`` has both; an
#: ``architecture`` string alone is a list of class names in other configs)
ARCHITECTURE, MODEL_ARGS = "architecture", "model_args"


def timm_level(level: Any) -> tuple[str, dict] | None:
    """``(architecture, model_args)`` of a config level (a config or its ``to_dict()``) that wraps a
    timm model; None for any other level."""
    get = level.get if isinstance(level, dict) else lambda key, default=None: getattr(level, key, default)
    architecture, model_args = get(ARCHITECTURE), get(MODEL_ARGS, ...)
    if not isinstance(architecture, str) or not (model_args is None or isinstance(model_args, dict)):
        return None
    return architecture, dict(model_args or {})


def timm_levels(config) -> list:
    """The levels of ``config`` (itself and its sub-configs, nested) that wrap a timm model."""
    found, queue, seen = [], [config], set()
    while queue:
        level = queue.pop(0)
        if id(level) in seen:
            continue
        seen.add(id(level))
        if timm_level(level) is not None:
            found.append(level)
        for name in getattr(level, "sub_configs", None) or {}:
            child = getattr(level, name, None)
            if child is not None and hasattr(child, "to_dict"):
                queue.append(child)
    return found


def for_one_build(config):
    """``config``, or a deep copy of it where a timm level's ``model_args`` holds block definitions
    (dicts in lists: an EfficientNet/MobileNet ``block_args``). timm's builder consumes those as it
    builds (it pops each block's ``block_type``), so a second model built from the same config would
    fail ("KeyError: 'block_type'"): each build gets its own copy."""
    def holds_blocks(value) -> bool:
        if isinstance(value, dict):
            return any(holds_blocks(item) for item in value.values())
        if isinstance(value, (list, tuple)):
            return any(isinstance(item, dict) or holds_blocks(item) for item in value)
        return False

    if any(holds_blocks(level.model_args) for level in timm_levels(config)):
        return copy.deepcopy(config)
    return config


def timm_available() -> bool:
    try:
        import timm  # noqa: F401
    except Exception:  # noqa: BLE001  (timm imports torchvision, which may not match the installed torch)
        return False
    return True


class _Captured(Exception):
    """Raised in place of building the model, once its class and arguments are known."""


def constructor_arguments(architecture: str, model_args: dict | None = None) -> dict | None:
    """The keyword arguments ``timm.create_model(architecture, pretrained=False, num_classes=0,
    **model_args)`` hands the architecture's model class (the entry point's defaults merged with
    ``model_args``), read without building it; None without timm, for an unknown architecture, or
    for an entry point that does not build through timm's ``build_model_with_cfg``."""
    if not timm_available():
        return None
    return copy.deepcopy(_constructor_arguments(architecture, _frozen(model_args or {})))


@functools.lru_cache(maxsize=64)
def _constructor_arguments(architecture: str, frozen_args) -> dict | None:
    import timm
    import torch
    from timm.models import _registry

    try:
        entry = _registry.model_entrypoint(architecture)
    except RuntimeError:  # "Unknown model"
        return None
    namespace = entry.__globals__
    build = namespace.get("build_model_with_cfg")
    if build is None:
        return None
    signature = inspect.signature(build)
    captured: dict = {}

    def capture(*args, **kwargs):
        # Every timm entry point ends in build_model_with_cfg(model_cls, variant, pretrained, ...,
        # **kwargs), where kwargs are the model class's; the builder's own options are left out.
        bound = signature.bind(*args, **kwargs)
        captured.update(bound.arguments.get(_var_keyword(signature), {}))
        raise _Captured

    # The entry point looks the builder up in its module's namespace at call time: replaced there
    # for this one call, and put back whatever happens. On meta: an entry point that builds through
    # another module's builder is not caught, and builds its real-size model without memory.
    namespace["build_model_with_cfg"] = capture
    try:
        with torch.device("meta"):
            timm.create_model(architecture, pretrained=False, num_classes=0, **_thawed(frozen_args))
    except _Captured:
        pass
    finally:
        namespace["build_model_with_cfg"] = build
    return captured or None


def _var_keyword(signature: inspect.Signature) -> str | None:
    return next((name for name, parameter in signature.parameters.items()
                 if parameter.kind is inspect.Parameter.VAR_KEYWORD), None)


def tower_on_meta(architecture: str, model_args: dict | None = None):
    """The timm model ``TimmWrapperModel`` would build (``pretrained=False``, ``num_classes=0``), on
    the meta device; None without timm."""
    if not timm_available():
        return None
    import timm
    import torch

    # a copy: timm's EfficientNet builder consumes block definitions it is given (see for_one_build)
    with torch.device("meta"):
        return timm.create_model(architecture, pretrained=False, num_classes=0, **copy.deepcopy(model_args or {}))


def output_width(architecture: str, model_args: dict | None = None) -> int | None:
    """Channels of the tower's ``forward_features`` (timm's ``num_features``): the width a wrapper
    config states as its ``hidden_size`` (FastVLM: 3072, Gemma 3n: 2048)."""
    return _output_width(architecture, _frozen(model_args or {})) if timm_available() else None


@functools.lru_cache(maxsize=64)
def _output_width(architecture: str, frozen_args) -> int | None:
    width = getattr(tower_on_meta(architecture, _thawed(frozen_args)), "num_features", None)
    return width if isinstance(width, int) else None


def fixed_image_size(architecture: str, model_args: dict | None = None) -> tuple[int, int] | None:
    """The one image size the tower takes where it has one: the size its patch embedding was made
    for (a ViT's absolute position embeddings), unless it resizes them per image; else None."""
    tower = tower_on_meta(architecture, model_args)
    fixed = getattr(getattr(tower, "patch_embed", None), "img_size", None)
    if fixed is None or getattr(tower, "dynamic_img_size", False):
        return None
    return int(fixed[0]), int(fixed[1])


def total_stride(architecture: str, model_args: dict | None = None) -> int | None:
    """The stride of the tower's output over the image (the least common multiple of its stages'
    ``feature_info`` reductions): a pyramid of strided stages takes any multiple of it. None without
    timm or where the tower does not state its stages."""
    tower = tower_on_meta(architecture, model_args)
    strides = [entry.get("reduction") for entry in getattr(tower, "feature_info", None) or ()
               if isinstance(entry, dict)]
    if strides and all(isinstance(stride, int) and stride > 0 for stride in strides):
        return math.lcm(*strides)
    return None


def _frozen(value: Any):
    """A hashable copy of ``model_args`` (dicts and lists nested), for the caches."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((key, _frozen(item)) for key, item in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(item) for item in value))
    return value


def _thawed(value: Any):
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("dict", "list", "tuple"):
        kind, items = value
        if kind == "dict":
            return {key: _thawed(item) for key, item in items}
        return (list if kind == "list" else tuple)(_thawed(item) for item in items)
    return value


__all__ = ["ARCHITECTURE", "MODEL_ARGS", "constructor_arguments", "fixed_image_size", "for_one_build", "output_width",
           "timm_available", "timm_level", "timm_levels", "total_stride", "tower_on_meta"]
