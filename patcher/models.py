"""Find model classes and build models for tracing from a directory, a config file or a name.

Weights are never needed to trace, so models are built from their config on the ``meta``
device: a real-size config needs no memory for its weights.
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
from pathlib import Path

import torch
from transformers import AutoConfig, PretrainedConfig

CONFIG_DIR = Path(__file__).parent / "configs"


def bundled_config_names() -> list[str]:
    return sorted(path.stem for path in CONFIG_DIR.glob("*.json"))


def model_id_help() -> str:
    """The ``MODEL_ID is one of`` paragraph shared by the CLI commands' help."""
    return (
        "MODEL_ID is one of:\n"
        f"  - a bundled real config, built on the meta device (no download): {', '.join(bundled_config_names())}\n"
        "  - a directory saved with save_pretrained (only its config.json is read)\n"
        "  - a config.json file\n"
        "  - a hub id (org/name), where the network allows\n"
    )


def resolve_model_class(model_class: str | type) -> type:
    """``"LlamaForCausalLM"``, ``"zoo.TraceableLlavaForConditionalGeneration"``, or a class."""
    if not isinstance(model_class, str):
        return model_class
    if "." in model_class:
        module_name, _, attribute = model_class.rpartition(".")
        return getattr(importlib.import_module(module_name), attribute)
    for module_name in ("transformers", "zoo"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        value = getattr(module, model_class, None)
        if isinstance(value, type):
            return value
    raise ValueError(
        f"unknown model class {model_class!r}: give a transformers class name (LlamaForCausalLM), "
        "a zoo class name, or a dotted path (package.module.ClassName)"
    )


def load_config(model_id: str | os.PathLike) -> PretrainedConfig:
    """A config from a ``from_pretrained`` directory, a config JSON, a bundled name or a hub id."""
    path = Path(model_id)
    if path.is_dir():
        return AutoConfig.from_pretrained(path)
    if path.is_file():
        return _config_from_json(path)
    bundled = CONFIG_DIR / f"{model_id}.json"
    if bundled.is_file():
        return _config_from_json(bundled)
    if "/" not in str(model_id):
        # not a hub id (those are ``org/name``): asking the hub anyway costs ~30 s of retries offline
        close = difflib.get_close_matches(str(model_id), bundled_config_names(), n=1, cutoff=0.6)
        raise ValueError(
            f"cannot load a config for {str(model_id)!r}: it is not a directory, not a config file and not a "
            f"bundled config ({', '.join(bundled_config_names())}); "
            + (f"did you mean {close[0]!r}? " if close else "")
            + f"To bundle one, save the model's config.json as {CONFIG_DIR / (str(model_id) + '.json')}; "
            "hub ids are written org/name"
        )
    try:
        return AutoConfig.from_pretrained(str(model_id))
    except Exception as exc:  # no network here, or an unknown id
        raise ValueError(
            f"cannot load a config for {str(model_id)!r}: it is not a directory, not a config file, not a bundled "
            f"config ({', '.join(bundled_config_names())}), and the hub lookup failed ({exc.__class__.__name__})"
        ) from exc


def _config_from_json(path: Path) -> PretrainedConfig:
    data = json.loads(path.read_text())
    model_type = data.get("model_type")
    if model_type is None:
        raise ValueError(f"{path}: config has no 'model_type', so its config class is unknown")
    return AutoConfig.for_model(**data)


def build_model(model_class: type, config: PretrainedConfig, device: str | torch.device = "meta"):
    """Instantiate ``model_class`` from ``config`` on ``device`` (``meta``: no weight memory)."""
    with torch.device(device):
        model = model_class._from_config(config) if hasattr(model_class, "_from_config") else model_class(config)
    return model.eval()


__all__ = ["build_model", "bundled_config_names", "load_config", "model_id_help", "resolve_model_class"]
