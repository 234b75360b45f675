"""Vision and audio towers: where they are in a model, and the class of their repeated blocks.

The text decoder's layers are found from the text config's layer count (``find_layers``); a
tower is found the same way from its own sub-config. transformers builds a tower from the
composite config's ``vision_config`` (``audio_config``), so the tower is the outermost module whose
``config`` *is* that sub-config; its blocks are the children of the shallowest ``nn.ModuleList``
inside it whose length is the sub-config's layer count (else the longest list of modules with
parameters). Used as sequential targets with the text layers, they give one subgraph per tower
block, then one per text layer, in one chain.
"""

from __future__ import annotations

import re

from torch import nn

#: modality -> the sub-config names of its tower (``Qwen2_5OmniThinkerConfig.audio_config``, ...)
TOWER_CONFIGS: dict[str, tuple[str, ...]] = {
    "vision": ("vision_config",),
    "audio": ("audio_config", "audio_encoder_config"),
}
#: modality -> attribute names of towers whose config is not a sub-config of the model's
#: (a backbone built from its own config): the fallback when no module holds the sub-config.
TOWER_NAMES: dict[str, tuple[str, ...]] = {
    "vision": ("vision_tower", "visual", "vision_model", "vision_encoder", "image_encoder"),
    "audio": ("audio_tower", "audio_encoder", "audio_model"),
}
_LAYER_COUNTS = ("num_hidden_layers", "depth", "num_layers", "encoder_layers", "n_layers")


def find_towers(model: nn.Module, modality: str = "vision") -> list[str]:
    """Qualified names of ``model``'s ``modality`` towers (``"vision"`` or ``"audio"``), outermost
    only, in module order; ``[]`` for a model without one."""
    if modality not in TOWER_CONFIGS:
        raise ValueError(f"unknown tower modality {modality!r}: choose from {', '.join(TOWER_CONFIGS)}")
    configs = _tower_configs(model, modality)
    found = [name for name, module in model.named_modules()
             if name and id(getattr(module, "config", None)) in configs]
    if not found:
        found = [name for name, module in model.named_modules()
                 if name.rsplit(".", 1)[-1] in TOWER_NAMES[modality] and _has_parameters(module)]
    return [name for name in found if not any(name.startswith(f"{outer}.") for outer in found)]


def _tower_configs(model: nn.Module, modality: str) -> set[int]:
    """ids of the ``modality`` sub-configs of every config in the model (a composite config's, and
    the configs of nested sub-models such as an omni model's thinker)."""
    ids = set()
    for module in model.modules():
        config = getattr(module, "config", None)
        for key in TOWER_CONFIGS[modality]:
            sub = getattr(config, key, None) if config is not None else None
            if sub is not None and not isinstance(sub, dict):
                ids.add(id(sub))
    return ids


def _has_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def _layer_count(config) -> int | None:
    for key in _LAYER_COUNTS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def tower_block_list(tower: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """``(relative name, list)`` of the tower's blocks, or None when it has no list of blocks."""
    lists = [(name, module) for name, module in tower.named_modules()
             if isinstance(module, nn.ModuleList) and len(module)
             and all(_has_parameters(child) for child in module)
             and not all(isinstance(child, nn.ModuleList) for child in module)]
    if not lists:
        return None
    count = _layer_count(getattr(tower, "config", None))
    chosen = [item for item in lists if count is not None and len(item[1]) == count]
    if not chosen:
        longest = max(len(module) for _, module in lists)
        chosen = [item for item in lists if len(item[1]) == longest]
    return min(chosen, key=lambda item: item[0].count("."))


def find_tower_blocks(model: nn.Module, modality: str = "vision") -> list[str]:
    """Sequential targets for the blocks of ``model``'s ``modality`` tower(s): the class names of
    the repeated blocks (several for a tower mixing block classes), or, where a block class
    nests inside another listed one or also serves outside the towers, a ``re:`` pattern naming
    the list's children. ``[]`` when the model has no such tower.

    Pass them with the text decoder layers to get one subgraph per tower block, then one per text
    layer, in one chain (see GUIDE.md, "Vision towers one block at a time").

    >>> from patcher.models import build_model, load_config, resolve_model_class
    >>> config = load_config("Qwen2-VL-2B-Instruct")
    >>> model = build_model(resolve_model_class("Qwen2VLForConditionalGeneration"), config, device="meta")
    >>> find_towers(model)
    ['model.visual']
    >>> find_tower_blocks(model)
    ['Qwen2VLVisionBlock']
    >>> find_tower_blocks(model, "audio")
    []
    """
    targets: list[str] = []
    for tower_name in find_towers(model, modality):
        found = tower_block_list(model.get_submodule(tower_name))
        if found is None:
            continue
        list_name, blocks = found
        path = f"{tower_name}.{list_name}" if list_name else tower_name
        classes = list(dict.fromkeys(type(block).__name__ for block in blocks))
        for target in _as_targets(model, tower_name, path, classes):
            if target not in targets:
                targets.append(target)
    return targets


def _as_targets(model: nn.Module, tower_name: str, path: str, classes: list[str]) -> list[str]:
    """Class names, unless a module of those classes sits outside the tower (in the text model) or
    inside another of them (targets would nest): then the list's children by name. Modules of the
    classes elsewhere in the tower are blocks too (Mllama's gated global layers)."""
    names = [name for name, module in model.named_modules() if type(module).__name__ in classes]
    outside = any(not name.startswith(f"{tower_name}.") for name in names)
    nested = any(inner.startswith(f"{outer}.") for outer in names for inner in names)
    return [f"re:{re.escape(path)}\\.\\d+"] if outside or nested else classes


__all__ = ["TOWER_CONFIGS", "TOWER_NAMES", "find_tower_blocks", "find_towers", "tower_block_list"]
