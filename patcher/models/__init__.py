"""Find model classes and build models for tracing from a directory, a config file or a name.

Weights are never needed to trace, so models are built from their config on the ``meta``
device: a real-size config needs no memory for its weights.

This folder holds everything about one model: its class and config (here, and the bundled real
configs in ``configs/``), its towers (:mod:`.towers`, :mod:`.timm_towers`), its code run on meta
(:mod:`.meta_mode`), :func:`~.traceable.load_traceable` and the repair loop, one traced attempt
(:mod:`.attempt`), the re-trace of a repaired file (:mod:`.written_check`) and the options every
model command shares (:mod:`.arguments`).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.util
import json
import logging
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # torch and transformers are imported on first use: `patcher --help` stays fast
    import torch
    from transformers import PretrainedConfig

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


class UserInputError(ValueError):
    """A mistake in what the user asked for (a model class, a MODEL_ID, a config): the CLI prints
    ``patcher CMD: error: <message>`` and exits 2, never a traceback."""


def import_module_file(module_name: str, path: Path, execute: Callable[[ModuleType], None] | None = None) -> ModuleType:
    """Import the Python file ``path`` as ``module_name``, once (``sys.modules`` caches it).

    The module is registered before its code runs (so the code, dataclasses and pickling find it)
    and removed again if running it fails, so a fixed file imports cleanly next time.
    ``execute(module)`` runs instead of the whole file (``load_traceable`` of a user's script runs
    only its definitions)."""
    module = sys.modules.get(module_name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        (execute or spec.loader.exec_module)(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _load_file_class(path: Path, class_name: str) -> type:
    """``class_name`` from the Python file ``path`` (e.g. a ``patcher patch`` output)."""
    if not path.is_file():
        raise UserInputError(f"{path}: no such file; give FILE.py:ClassName or FOLDER:ClassName")
    safe_stem = re.sub(r"\W", "_", path.stem)
    module_name = f"_tracezoo_user_{safe_stem}_{abs(hash(str(path.resolve())))}"
    try:
        module = import_module_file(module_name, path)
    except SyntaxError as exc:
        raise UserInputError(f"{path}:{exc.lineno}: syntax error: {exc.msg}; fix the file or regenerate it "
                             "with patcher patch") from None
    except ImportError as exc:
        raise UserInputError(f"{path}: importing it failed: {exc}; install what it imports") from None
    value = getattr(module, class_name, None)
    if not isinstance(value, type):
        classes = [n for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == module_name]
        close = difflib.get_close_matches(class_name, classes, n=1)
        raise UserInputError(f"{path}: no class {class_name!r} in this file"
                             + (f"; did you mean {close[0]!r}?" if close else ""))
    return value


def _resolve_path_class(spec: str) -> type | None:
    """``FILE.py:Class``, ``FOLDER:Class`` (a ``patcher patch -o FOLDER``), or None if not that form."""
    location, sep, class_name = spec.rpartition(":")
    if not sep or not location or not class_name.isidentifier():
        return None
    path = Path(location).expanduser()
    if location.endswith(".py"):
        return _load_file_class(path, class_name)
    if path.is_dir():
        candidates = sorted(p for p in path.glob("*.py")
                            if re.search(rf"^class\s+{re.escape(class_name)}\b", p.read_text("utf-8", "replace"), re.M))
        if not candidates:
            raise UserInputError(f"{path}: no .py file in this folder defines class {class_name!r}")
        return _load_file_class(candidates[0], class_name)
    raise UserInputError(f"{location}: no such file or folder (MODEL_CLASS FILE.py:Class or FOLDER:Class)")


def resolve_model_class(model_class: str | type, *, pretrained: bool = True) -> type:
    """``"LlamaForCausalLM"``, ``"zoo.TraceableLlavaForConditionalGeneration"``, ``"out/modeling_x.py:Cls"``,
    ``"out:Cls"`` (a ``patcher patch`` output folder), or a class. Raises :class:`UserInputError`.
    ``pretrained=False`` accepts any ``nn.Module`` class (the patcher rewrites any model source;
    building from a config needs a ``PreTrainedModel``)."""
    _check_model_class = functools.partial(_check_class, pretrained=pretrained)
    if not isinstance(model_class, str):
        return _check_model_class(model_class, repr(model_class))
    if ":" in model_class:
        found = _resolve_path_class(model_class)
        if found is not None:
            return _check_model_class(found, model_class)
    if model_class.endswith(".py") or os.sep in model_class:
        raise UserInputError(f"{model_class!r} is a path: name the class too, as FILE.py:ClassName "
                             "(e.g. patched/modeling_llama.py:LlamaForCausalLM)")
    if "." in model_class:
        if not all(part.isidentifier() for part in model_class.split(".")):
            raise UserInputError(f"{model_class!r} is not a class name: give a transformers class name "
                                 "(LlamaForCausalLM), a dotted path (package.module.ClassName) or FILE.py:ClassName")
        module_name, _, attribute = model_class.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UserInputError(f"cannot import {module_name!r} for model class {model_class!r} ({exc}); give an "
                                 "importable package.module.ClassName, a transformers class name, or "
                                 "FILE.py:ClassName") from None
        value = getattr(module, attribute, None)
        if not isinstance(value, type):
            close = difflib.get_close_matches(attribute, [n for n in dir(module) if not n.startswith("_")], n=1)
            raise UserInputError(f"module {module_name!r} has no class {attribute!r}"
                                 + (f"; did you mean {module_name}.{close[0]}?" if close else ""))
        return _check_model_class(value, model_class)
    for module_name in ("transformers", "zoo"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        try:
            value = getattr(module, model_class, None)
        except Exception:  # transformers' lazy module raises for broken optional imports
            value = None
        if isinstance(value, type):
            return _check_model_class(value, model_class)
    import transformers

    names = [n for n in dir(transformers) if n.endswith(("Model", "LM", "Generation"))]
    close = difflib.get_close_matches(model_class, names, n=1)
    raise UserInputError(
        f"unknown model class {model_class!r}: "
        + (f"did you mean {close[0]!r}? " if close else "")
        + "give a transformers class name (LlamaForCausalLM), a zoo class name, a dotted path "
        "(package.module.ClassName) or FILE.py:ClassName"
    )


def _check_class(cls, shown: str, *, pretrained: bool = True) -> type:
    from torch import nn
    from transformers import PreTrainedModel

    if not pretrained and isinstance(cls, type) and issubclass(cls, nn.Module):
        return cls
    if not isinstance(cls, type) or not issubclass(cls, PreTrainedModel):
        raise UserInputError(f"{shown} is not a transformers model class (a PreTrainedModel subclass built from a "
                             "config); give one such as LlamaForCausalLM")
    return cls


def _looks_local(model_id: str) -> bool:
    """A MODEL_ID that is clearly a local path, not a hub id (org/name)."""
    text = str(model_id)
    if text.startswith((".", "/", "~")) or text.endswith(".json") or text.count("/") > 1 or os.sep != "/" and os.sep in text:
        return True
    head = text.split("/", 1)[0]
    return "/" in text and Path(head).is_dir()


def load_config(model_id: str | os.PathLike) -> PretrainedConfig:
    """A config from a ``from_pretrained`` directory, a config JSON, a bundled name or a hub id.

    Raises :class:`UserInputError` naming the file (and line, for invalid JSON) and the fix."""
    path = Path(model_id).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserInputError(f"{path}: this folder has no config.json; give a folder saved with save_pretrained "
                                 "or the config file itself")
        _config_from_json(path / "config.json")  # the same checks, with the file's name and line
        from transformers import AutoConfig

        try:
            return AutoConfig.from_pretrained(path)
        except Exception as exc:
            raise UserInputError(f"{path}: cannot load the config: {exc}; check the folder") from None
    if path.is_file():
        return _config_from_json(path)
    bundled = CONFIG_DIR / f"{model_id}.json"
    if bundled.is_file():
        return _config_from_json(bundled)
    check_model_id(model_id)
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(model_id))
    except Exception as exc:  # no network here, or an unknown id
        raise UserInputError(
            f"cannot load a config for {str(model_id)!r}: it is not a directory, not a config file, not a bundled "
            f"config ({', '.join(bundled_config_names())}), and the hub lookup failed ({exc.__class__.__name__})"
        ) from exc


def check_model_id(model_id: str | os.PathLike) -> None:
    """Raise :class:`UserInputError` for a MODEL_ID that names nothing: not a directory, not a
    file, not a bundled config, and no hub id (``org/name``) either. Imports nothing heavy, so
    the CLI reports a misspelt MODEL_ID before it imports torch and the model's module."""
    path = Path(model_id).expanduser()
    if path.exists() or (CONFIG_DIR / f"{model_id}.json").is_file():
        return
    if _looks_local(str(model_id)):
        raise UserInputError(f"{model_id}: no such file or directory (a MODEL_ID that is a local path must exist; "
                             "hub ids are written org/name)")
    if "/" not in str(model_id):
        # not a hub id (those are ``org/name``): asking the hub anyway costs ~30 s of retries offline
        close = difflib.get_close_matches(str(model_id), bundled_config_names(), n=1, cutoff=0.6)
        raise UserInputError(
            f"cannot load a config for {str(model_id)!r}: it is not a directory, not a config file and not a "
            f"bundled config ({', '.join(bundled_config_names())}); "
            + (f"did you mean {close[0]!r}? " if close else "")
            + f"To bundle one, save the model's config.json as {CONFIG_DIR / (str(model_id) + '.json')}; "
            "hub ids are written org/name"
        )


def _config_from_json(path: Path) -> PretrainedConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"{path}: cannot read the config ({exc}); check the file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserInputError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno}); fix the file "
                             "(a config.json is one JSON object)") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}:1: a config must be a JSON object ({{\"model_type\": ...}}), not a "
                             f"{type(data).__name__}")
    model_type = data.get("model_type")
    if model_type is None:
        raise UserInputError(f"{path}: config has no 'model_type', so its config class is unknown; add e.g. "
                             "\"model_type\": \"llama\"")
    from transformers import AutoConfig

    # transformers warns about what a bad value breaks (token ids outside a vocabulary of 0, an
    # unknown rope_type): the one line below says it, so its warnings are shown only for a config
    # that passes
    with _held_transformers_log() as held:
        try:
            config = AutoConfig.for_model(**data)
        except Exception as exc:  # unknown model_type, values transformers' validators reject
            cause = str(exc).strip().splitlines()
            raise UserInputError(f"{path}: invalid config: {' '.join(line.strip() for line in cause)}; fix the "
                                 "value in the file") from None
        problems = config_problems(config)
        if problems:
            raise UserInputError(f"{path}: invalid config: {'; '.join(problems)}; fix the values in the file")
        held.pass_on()
    return config


class _HeldRecords(logging.Handler):
    """Log records kept back; :meth:`pass_on` hands them to the handlers they were meant for."""

    def __init__(self, handlers: list[logging.Handler]):
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self.handlers = handlers

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def pass_on(self) -> None:
        for record in self.records:
            for handler in self.handlers or [logging.lastResort]:
                if record.levelno >= handler.level:
                    handler.handle(record)
        self.records.clear()


@contextlib.contextmanager
def _held_transformers_log():
    """Hold back what transformers' loggers print while the block runs; dropped unless passed on."""
    logger = logging.getLogger("transformers")
    handlers = list(logger.handlers)
    held = _HeldRecords(handlers)
    logger.handlers = [held]
    try:
        yield held
    finally:
        logger.handlers = handlers


_SIZE = re.compile(r"(^num_|_size$|_heads$|_layers$|_dim$|^max_position_embeddings$)")

#: Sizes no model can be built without: 0 (or a float) is a division by zero, an empty vocabulary
#: or a layer of no width. Other size fields may be 0 in real configs (``head_dim``, ``num_*``
#: counts of optional parts), so only these must be positive integers.
POSITIVE_SIZES = ("hidden_size", "vocab_size", "intermediate_size", "num_attention_heads", "num_hidden_layers")

#: No size or count field may exceed this: the largest in transformers' ~800 default configs and
#: the bundled real ones is 1,440,000 (a chunk size; ``max_position_embeddings`` reaches 1,048,576),
#: and past 2**63 elements torch cannot even compute a shape (``intermediate_size: 1e40``).
MAX_SIZE = 2**32

#: Elements of the largest single weight, estimated from the config before anything is built as
#: ``hidden_size`` x the largest of ``vocab_size`` and the ``*intermediate_size`` fields (the
#: embedding, the head, an MLP projection): 2**38 elements is 1 TiB in float32, 512 GiB in bf16,
#: 64 times a 256k vocabulary x 16k hidden, more than any real model has (Llama 3.1 405B: 128k x
#: 16k; Gemma 3: 262k x 5k).
MAX_WEIGHT_ELEMENTS = 2**38


def config_problems(config) -> list[str]:
    """Values no model can be built from, each naming its field (sub-configs as ``text_config.x``)
    and what is allowed: negative sizes; ``hidden_size``, ``vocab_size``, ``intermediate_size``,
    ``num_attention_heads``, ``num_hidden_layers`` that are not positive integers; a size above
    :data:`MAX_SIZE`; a weight above :data:`MAX_WEIGHT_ELEMENTS`; heads that do not divide; a
    ``rope_type`` transformers does not know for this config."""
    problems: list[str] = []
    seen = set()

    def visit(cfg, prefix):
        if id(cfg) in seen:
            return
        seen.add(id(cfg))
        values = {key: value for key, value in vars(cfg).items() if not key.startswith("_")}
        # the file's key for each standard name (GPT-2 writes n_embd for hidden_size)
        aliases = {target: alias for alias, target in (getattr(cfg, "attribute_map", None) or {}).items()}
        sizes: dict[str, tuple[str, int]] = {}  # standard name -> (key in the file, value)
        for key, value in sorted(values.items()):
            if isinstance(value, bool):
                continue
            name = aliases.get(key, key)
            if isinstance(value, (int, float)) and (_SIZE.search(key) or _SIZE.search(name)):
                problem = _size_problem(name, key, value)
                if problem:
                    problems.append(prefix + problem)
                elif isinstance(value, int):
                    sizes[name] = (key, value)
            elif name in POSITIVE_SIZES and value is not None and not isinstance(value, (list, tuple, dict)):
                problems.append(f"{prefix}{key} is {value!r}; it must be a positive integer")
            elif hasattr(value, "to_dict") and hasattr(value, "model_type") and key.endswith("config"):
                visit(value, f"{prefix}{key}.")
        weight = _largest_weight(sizes)
        if weight:
            problems.append(prefix + weight)
        heads, kv = values.get("num_attention_heads"), values.get("num_key_value_heads")
        if isinstance(heads, int) and isinstance(kv, int) and not isinstance(kv, bool):
            if kv <= 0 or heads <= 0 or heads % kv:
                problems.append(f"{prefix}num_key_value_heads ({kv}) must divide num_attention_heads ({heads})")
        problems.extend(prefix + problem for problem in _rope_problems(cfg, values))

    visit(config, "")
    return problems


def _size_problem(name: str, key: str, value: int | float) -> str | None:
    """What is wrong with size field ``key`` (standard name ``name``) holding ``value``, if anything."""
    if value < 0:
        return f"{key} is {value}, a size must not be negative"
    if name in POSITIVE_SIZES and (isinstance(value, float) or value == 0):
        return f"{key} is {value!r}; it must be a positive integer"
    if value > MAX_SIZE:
        return f"{key} is {value:.3g}, larger than any model's (at most 2**{MAX_SIZE.bit_length() - 1} = {MAX_SIZE})"
    return None


def _largest_weight(sizes: dict[str, tuple[str, int]]) -> str | None:
    """The problem with the largest weight ``sizes`` imply (hidden x vocabulary or intermediate), if
    it exceeds :data:`MAX_WEIGHT_ELEMENTS`."""
    if "hidden_size" not in sizes:
        return None
    hidden_key, hidden = sizes["hidden_size"]
    others = [(value, key) for name, (key, value) in sizes.items()
              if name == "vocab_size" or name.endswith("intermediate_size")]
    if not others:
        return None
    value, key = max(others)
    if hidden * value <= MAX_WEIGHT_ELEMENTS:
        return None
    limit = MAX_WEIGHT_ELEMENTS.bit_length() - 1
    return (f"{hidden_key} ({hidden}) x {key} ({value}) is a weight of {hidden * value:.3g} elements, over the limit "
            f"of 2**{limit} ({MAX_WEIGHT_ELEMENTS * 4 // 2**40} TiB in float32) that no real model comes near")


def _rope_problems(cfg, values: dict) -> list[str]:
    """A ``rope_type`` (in ``rope_parameters``, per layer type too, or ``rope_scaling``) that
    transformers does not know for this config: neither one of its RoPE functions nor a type the
    config class validates (the model would fail to build with a KeyError)."""
    key = "rope_parameters" if isinstance(values.get("rope_parameters"), dict) else "rope_scaling"
    parameters = values.get(key)
    if not isinstance(parameters, dict) or not parameters:
        return []
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:
        return []
    known = {"default", *ROPE_INIT_FUNCTIONS}
    known.update(name[len("_validate_"):-len("_rope_parameters")] for name in dir(type(cfg))
                 if name.startswith("_validate_") and name.endswith("_rope_parameters"))
    nested = all(isinstance(value, dict) or value is None for value in parameters.values())
    shown = "rope_parameters (rope_scaling in older configs)" if key == "rope_parameters" else key
    groups = {f"{key}.{layer}": value for layer, value in parameters.items() if isinstance(value, dict)} \
        if nested else {shown: parameters}
    model_type = getattr(cfg, "model_type", "") or type(cfg).__name__
    problems = []
    for where, group in groups.items():
        rope_type = group.get("rope_type", group.get("type", "default"))
        if not isinstance(rope_type, str) or rope_type not in known:
            problems.append(f"{where} has rope_type {rope_type!r}, which transformers does not know for "
                            f"{model_type} (known: {', '.join(sorted(known))})")
    return problems


def check_config_for_class(model_class: type, config) -> None:
    """Raise :class:`UserInputError` when ``config`` is of another architecture than ``model_class``."""
    expected = getattr(model_class, "config_class", None)
    if not isinstance(expected, type) or isinstance(config, expected):
        return
    expected_type = getattr(expected, "model_type", "") or expected.__name__
    raise UserInputError(
        f"{model_class.__name__} expects a {expected.__name__} (model_type {expected_type!r}), but the config is a "
        f"{type(config).__name__} (model_type {getattr(config, 'model_type', '?')!r}): use the model class of that "
        f"architecture, or a {expected_type} config"
    )


def build_model(model_class: type, config: PretrainedConfig, device: str | torch.device = "meta"):
    """Instantiate ``model_class`` from ``config`` on ``device`` (``meta``: no weight memory)."""
    import torch

    from .timm_towers import for_one_build

    config = for_one_build(config)
    with torch.device(device):
        model = model_class._from_config(config) if hasattr(model_class, "_from_config") else model_class(config)
    return model.eval()


def random_model(model_class: type, config: PretrainedConfig, seed: int = 0, dtype=None):
    """A random ``model_class`` on the CPU in eval mode, the same for the same seed: seeded, built,
    every all-zero parameter woken (:func:`wake_zero_parameters`), its floating-point tensors in
    ``dtype`` (default float32; :func:`cast_floating_point`).
    Any class with the same module structure (an original and its traceable class) gets the same
    weights. The tiny models of the coverage sweep, the zoo and the tests are made this way."""
    import torch

    torch.manual_seed(seed)
    with _uninitialized_memory_as_nan():
        model = build_model(model_class, config, device="cpu")
    draw_uninitialized_parameters(model, seed)
    wake_zero_parameters(model, seed)
    return cast_floating_point(model, dtype or torch.float32).eval()


def cast_floating_point(model, dtype):
    """``model`` with its floating-point parameters and buffers in ``dtype``, and nothing else
    touched, as ``Module.float()``, ``half()`` and ``bfloat16()`` cast. ``model.to(torch.float32)``
    would also cast a complex buffer to float32, dropping its imaginary part without an error (Llama
    4's vision rotary table ``freqs_ci`` lost its sines that way)."""
    import torch

    casts = {torch.float32: "float", torch.float64: "double", torch.float16: "half", torch.bfloat16: "bfloat16"}
    if dtype not in casts:
        raise ValueError(f"cast_floating_point takes one of {', '.join(map(str, casts))}, not {dtype}")
    return getattr(model, casts[dtype])()


@contextlib.contextmanager
def _uninitialized_memory_as_nan():
    """``torch.empty`` gives NaN inside (torch's deterministic fill of uninitialized memory), so a
    parameter the model's own init never writes is found afterwards instead of holding whatever
    the allocator had there."""
    import torch

    deterministic, warn_only = torch.are_deterministic_algorithms_enabled(), \
        torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)


def draw_uninitialized_parameters(model, seed: int) -> list[str]:
    """Give every float parameter and buffer the build left uninitialized (NaN, see
    :func:`_uninitialized_memory_as_nan`) a seeded ``0.02 * randn``, as ``initializer_range`` would;
    returns their names. transformers 5.23's Qwen3-Omni talker leaves its MoE experts so (its
    ``_init_weights`` checks the thinker's experts class, not the talker's): they held leftover
    memory, other values on every build, ~1e-43 or NaN."""
    import torch

    generator = torch.Generator().manual_seed(seed + 2)
    drawn = []
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            if tensor.numel() and tensor.is_floating_point() and torch.isnan(tensor).all():
                tensor.copy_((0.02 * torch.randn(tensor.shape, generator=generator)).to(tensor.dtype))
                drawn.append(name)
    return drawn


def wake_zero_parameters(model, seed: int) -> None:
    """Give every all-zero float parameter a random value, so no path is dead (a dead path hides
    graph mistakes). Biases and norm shifts get small values; scalar gates (e.g. Mllama's tanh
    gates) get a clear opening, tanh(0.5..1) ~ 0.46..0.76: with ``0.02 * randn`` they would pass
    ~1% of the image's contribution."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.numel() and parameter.is_floating_point() and not parameter.any():
                if parameter.numel() == 1:
                    value = 0.5 + 0.5 * torch.rand(parameter.shape, generator=generator)
                else:
                    value = 0.02 * torch.randn(parameter.shape, generator=generator)
                parameter.copy_(value.to(parameter.dtype))


__all__ = ["UserInputError", "build_model", "random_model", "cast_floating_point", "draw_uninitialized_parameters", "wake_zero_parameters", "check_config_for_class", "check_model_id", "config_problems", "bundled_config_names", "load_config", "model_id_help", "resolve_model_class"]
