"""Which classes to cover, and which modules of a model are its decoder layers."""

from __future__ import annotations

import fnmatch
import random
import re

from torch import nn

SUFFIXES = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
_SKIP = {"AutoModelForCausalLM"}


def architectures(only: str | None = None, sample: int | None = None, seed: int = 0) -> list[str]:
    """Names of every generative model class in the installed transformers, sorted.

    ``only``: a glob (``*Llama*``), a regex (``re:...``) or a substring (case-insensitive);
    ``sample``: a fixed, seeded selection of that many names.
    """
    import transformers

    names = sorted(name for name in dir(transformers)
                   if name.endswith(SUFFIXES) and name not in _SKIP and not name.startswith(("Auto", "TF", "Flax")))
    if only:
        names = [name for name in names if _matches(name, only)]
    if sample is not None and sample < len(names):
        names = sorted(random.Random(seed).sample(names, sample))
    return names


def _matches(name: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.search(pattern[3:], name) is not None
    if any(char in pattern for char in "*?["):
        return fnmatch.fnmatchcase(name.lower(), pattern.lower())
    return any(part.strip().lower() in name.lower() for part in pattern.split(",") if part.strip())


def _layer_count(config) -> int | None:
    try:
        text = config.get_text_config(decoder=True)
    except Exception:  # noqa: BLE001
        text = config
    for key in ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "decoder_layers", "num_decoder_layers"):
        value = getattr(text, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def find_targets(model: nn.Module) -> list[str]:
    return find_layers(model)[0]


def trace_targets(model: nn.Module, classes: list[str], path: str | None) -> list[str]:
    """What to hand the tracer: the class names, or, when modules of those classes nest (a hybrid
    layer wrapping a layer of another listed class), a regex naming the list's children."""
    nested = any(type(inner).__name__ in classes
                 for module in model.modules() if type(module).__name__ in classes
                 for inner in list(module.modules())[1:])
    if nested and path:
        return [f"re:{re.escape(path)}\\.\\d+"]
    return list(classes)


def find_layers(model: nn.Module) -> tuple[list[str], str | None]:
    """Class names of the text decoder's layers.

    The layers are the children of the shallowest ``nn.ModuleList`` inside the decoder
    (``get_decoder()``, else the model) whose length is the text config's layer count (or, when
    none has that length, the longest list of modules with parameters). Hybrid models give several
    classes. Falls back to ``patcher.models.attempt.default_targets`` (``_no_split_modules``).
    """
    decoder = model
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        try:
            found = get_decoder()
            if isinstance(found, nn.Module):
                decoder = found
        except Exception:  # noqa: BLE001
            pass
    count = _layer_count(model.config)
    lists = [(name, module) for name, module in decoder.named_modules()
             if isinstance(module, nn.ModuleList) and len(module)
             and all(any(True for _ in child.parameters()) for child in module)
             and not all(isinstance(child, nn.ModuleList) for child in module)]
    root = decoder
    if decoder is not model and not lists:
        root = model
        lists = [(name, module) for name, module in model.named_modules()
                 if isinstance(module, nn.ModuleList) and len(module)]
    chosen = [item for item in lists if count is not None and len(item[1]) == count]
    if not chosen:
        chosen = sorted(lists, key=lambda item: -len(item[1]))[:1]
    if chosen:
        chosen.sort(key=lambda item: (item[0].count("."), not _in_text_model(root, item[0], model.config)))
        path, module_list = chosen[0]
        if decoder is not model:
            prefix = next((name for name, module in model.named_modules() if module is decoder), "")
            path = f"{prefix}.{path}" if prefix else path
        names = []
        for child in module_list:
            if type(child).__name__ not in names:
                names.append(type(child).__name__)
        return names, path
    from ..models.attempt import default_targets

    return default_targets(model), None


def _in_text_model(root: nn.Module, path: str, config) -> bool:
    """Is the module list at ``path`` (under ``root``) held by a module built from the text config?
    Where ``get_decoder`` finds no decoder (transformers 5.10's Qwen2.5-Omni thinker), the audio
    tower's and the vision tower's block lists are as long and as deep as the text model's layers,
    and came first."""
    try:
        text = config.get_text_config(decoder=True)
    except Exception:  # noqa: BLE001
        return False
    owner = root.get_submodule(path.rpartition(".")[0]) if "." in path else root
    return type(getattr(owner, "config", None)) is type(text) and owner is not root


def count_target_calls(model: nn.Module, targets: list[str], run) -> int:
    """How many times modules of the ``targets`` classes (or ``re:`` module names) are called
    while ``run()`` runs (calls of a target inside another target's call do not count)."""
    calls = 0
    depth = 0

    def pre(module, args):
        nonlocal calls, depth
        if depth == 0:
            calls += 1
        depth += 1

    def post(module, args, output):
        nonlocal depth
        depth -= 1

    from ..trace.matching import match_modules, parse_patterns

    handles = []
    matched, _ = match_modules(model, parse_patterns(targets))
    for module in matched.values():
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post, always_call=True))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return calls
