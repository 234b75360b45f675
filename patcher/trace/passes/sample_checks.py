"""The sample checked against the model's forward before tracing: every key taken, flags as Python values."""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Mapping

import torch
from torch import nn

from ..errors import SampleInputError
from ..root import forward_parameters


#: Flags the forward decides Python control flow on: they must be Python values in the sample.
FLAGS = ("use_cache", "return_dict", "output_attentions", "output_hidden_states", "output_router_logits")


def _kwargs_names(model: nn.Module) -> set[str]:
    """Keys a forward's ``**kwargs`` legitimately takes: transformers' typed kwargs
    (``TransformersKwargs``, ``FlashAttentionKwargs``, any ``Unpack[...]`` annotation of a forward
    in the model) and the named parameters of the forwards of the model's modules (a wrapper's
    ``**kwargs`` reach them)."""
    import typing

    from transformers.utils.generic import TransformersKwargs

    names: set[str] = set(_typed_dict_keys(TransformersKwargs))
    try:
        from transformers.modeling_flash_attention_utils import FlashAttentionKwargs

        names |= _typed_dict_keys(FlashAttentionKwargs)
    except ImportError:  # pragma: no cover - older transformers
        pass
    for cls in {type(module) for module in model.modules()}:
        try:
            params = inspect.signature(inspect.unwrap(cls.forward)).parameters.values()
        except (TypeError, ValueError):
            continue
        for param in params:
            if param.kind is param.VAR_KEYWORD:
                annotation = param.annotation
                if isinstance(annotation, str) and "Unpack[" in annotation:
                    try:
                        annotation = typing.get_type_hints(inspect.unwrap(cls.forward)).get(param.name)
                    except Exception:  # noqa: BLE001 - unresolvable annotations: nothing to add
                        annotation = None
                for argument in typing.get_args(annotation) or ():
                    names |= _typed_dict_keys(argument)
            elif param.kind is not param.VAR_POSITIONAL:
                names.add(param.name)
    names.discard("self")
    return names


def _typed_dict_keys(cls: Any) -> set[str]:
    keys: set[str] = set()
    for base in getattr(cls, "__mro__", ()):
        keys |= set(getattr(base, "__annotations__", {}) or {})
    return keys if hasattr(cls, "__total__") else set()


def sample_keys_not_taken(model: nn.Module, sample: Mapping[str, Any]) -> list[str]:
    """The keys of ``sample`` that ``model``'s forward cannot receive, which tracing refuses: not a
    parameter of its forward and, where the forward has ``**kwargs``, not a name that any module of
    the model takes through them (a typo, or an input nothing reads).

    A default sample built from a config (``patcher.samples.sample_input``, the coverage sweep's)
    drops these, e.g. ``attention_mask`` for xLSTM, whose forward has none; a user's own sample is
    refused with a message instead.

    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16,
    ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    >>> sample_keys_not_taken(model, {"input_ids": None, "attention_mask": None, "attenton_mask": None})
    ['attenton_mask']
    """
    return _keys_not_taken(model, forward_parameters(model)[1], sample)


def _named_parameters(signature: inspect.Signature) -> tuple[set[str], bool]:
    """The forward's parameter names (self dropped), and whether it has ``**kwargs``."""
    params = list(signature.parameters.values())[1:]  # drop self
    names = {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def _keys_not_taken(model: nn.Module, signature: inspect.Signature, sample: Mapping[str, Any]) -> list[str]:
    names, accepts_kwargs = _named_parameters(signature)
    unknown = [key for key in sample if key not in names]
    if not unknown or not accepts_kwargs:
        return unknown
    # **kwargs takes anything, so a typo (`attenton_mask`) would become an input nothing reads
    known = _kwargs_names(model)
    return [key for key in unknown if key not in known]


def deprecated_keywords(function: Any) -> dict[str, str | None]:
    """Old keyword -> new name (``None``: dropped) of transformers' ``@deprecate_kwarg`` wrappers
    around ``function``. The tracer traces the unwrapped forward, so an old name in the sample
    would reach no parameter, while eager renames it (Fuyu's ``image_patches`` -> ``pixel_values``).

    >>> from transformers.utils.deprecation import deprecate_kwarg
    >>> @deprecate_kwarg("image_patches", version="v99", new_name="pixel_values")  # as Fuyu's, in 5.23
    ... def forward(self, pixel_values=None):
    ...     return pixel_values
    >>> deprecated_keywords(forward)
    {'image_patches': 'pixel_values'}
    """
    found: dict[str, str | None] = {}
    while callable(function):
        code = getattr(function, "__code__", None)
        cells = {}
        for name, cell in zip(code.co_freevars if code else (), getattr(function, "__closure__", None) or ()):
            try:
                cells[name] = cell.cell_contents
            except ValueError:  # an empty cell
                pass
        if isinstance(cells.get("old_name"), str) and "new_name" in cells:
            found[cells["old_name"]] = cells["new_name"]
        function = getattr(function, "__wrapped__", None)
    return found


def check_sample(model: nn.Module, sample: Mapping[str, Any]) -> None:
    """The sample fits the forward: keys it takes under their current names, identifiers, flags as
    Python values, no cache, every required input."""
    signature = forward_parameters(model)[1]
    names, accepts_kwargs = _named_parameters(signature)
    # Eager renames a deprecated keyword before the forward's body sees it; the tracer binds the
    # sample to the body itself, where the old name may still be a parameter that nothing reads.
    renamed = deprecated_keywords(type(model).forward)
    for key in sample:
        if renamed.get(key) is not None:
            raise SampleInputError(
                f"sample input {key!r} is a deprecated name: {type(model).__name__}.forward renames it to "
                f"{renamed[key]!r} (transformers' @deprecate_kwarg) and reads it under that name; use "
                f"{renamed[key]!r} in the sample and in every input you run the graph with")
    refused = _keys_not_taken(model, signature, sample)
    if refused and not accepts_kwargs:
        raise SampleInputError(
            f"sample input has {', '.join(map(repr, refused))}, which {type(model).__name__}.forward "
            f"does not accept; it takes: {', '.join(sorted(names))}"
        )
    if refused:
        known = _kwargs_names(model)
        lines = [f"sample input has {', '.join(map(repr, refused))}, which {type(model).__name__}.forward "
                 "does not name and no module of the model takes through **kwargs; it would be an input "
                 "nothing reads (a silent wrong result)."]
        for key in refused:
            close = difflib.get_close_matches(key, sorted(names | known), n=1)
            if close:
                lines.append(f"  {key!r}: did you mean {close[0]!r}?")
        lines.append(f"  {type(model).__name__}.forward takes: {', '.join(sorted(names))}")
        raise SampleInputError("\n".join(lines))
    for key in sample:
        if not key.isidentifier():
            raise SampleInputError(f"sample input key {key!r} is not a valid Python identifier")
    for key in FLAGS:
        if isinstance(sample.get(key), torch.Tensor):
            raise SampleInputError(
                f"sample input {key!r} is a tensor; {key} is a flag the forward decides Python control flow "
                f"on, so it must be a Python bool (or None) in the sample, e.g. {key}=False"
            )
    if sample.get("use_cache") is True:
        raise SampleInputError(
            "sample input use_cache=True is not supported: the cache the forward creates while tracing would be "
            "baked into the graph as a constant, shared and grown by every run (wrong logits from the second run "
            "on). Trace and run with use_cache=False (tracezoo's default when the sample leaves it out)."
        )
    missing = [
        p.name
        for p in list(signature.parameters.values())[1:]
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in sample
    ]
    if missing:
        raise SampleInputError(
            f"sample input is missing required input(s) {', '.join(map(repr, missing))} of "
            f"{type(model).__name__}.forward; give them in the sample"
        )
