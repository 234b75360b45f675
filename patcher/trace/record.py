"""What a graph was traced with, checked every time it runs.

A traced graph silently computes something else when it runs on inputs, a mode or a model other
than the ones it was traced with: an input it does not take is ignored, a constant of the trace
(``logits_to_keep=1``, ``attention_mask=None``) keeps its traced value, ``self.training`` and
layerdrop's dice were read while tracing, and the layers of a ``ModuleList`` were unrolled.
:class:`TraceRecord` holds all of that, recorded once per trace and shared by the whole graph
and its subgraphs, and raises a named error when a run does not fit:

- inputs: :class:`InputMismatchError` (:class:`MissingInputError` for a missing one; an input of
  another rank where the traced code read its rank);
- mode: :class:`TrainingModeError`;
- structure: :class:`ModelMismatchError`, checked once per model (cached) and again only when
  the child count of a traced-through module changes, so a run stays cheap on huge models.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from .errors import InputMismatchError, MissingInputError, ModelMismatchError, TrainingModeError
from .nested_inputs import NestedInput

#: Sample values that are constants of the trace, never graph inputs: the model decides Python
#: control flow on them (``isinstance(logits_to_keep, int)``, ``if attention_mask is None``).
CONSTANT_TYPES = (type(None), bool, int, float, complex, str)

_OMITTED = object()


def is_trace_constant(value: Any) -> bool:
    return type(value) in CONSTANT_TYPES


def same_constant(traced: Any, given: Any) -> bool:
    """``given`` equals the traced constant, with the same type (``True`` is not ``1``)."""
    if traced is given:
        return True
    if type(traced) is not type(given):
        return False
    try:
        return bool(traced == given)
    except Exception:  # noqa: BLE001 - an odd __eq__ is a mismatch, not a crash
        return False


def given_inputs(inputs: Mapping[str, Any]) -> list[str]:
    """The names of ``inputs`` given as values, not as constants of a trace (see :func:`is_trace_constant`)."""
    return [name for name, value in inputs.items() if not is_trace_constant(value)]


def input_kind(names: Iterable[str]) -> str:
    """A kind of batch as messages name it: its inputs, quoted, in their order."""
    return ", ".join(map(repr, names)) or "no tensor input"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return repr(value)


@dataclass(eq=False)
class TraceRecord:
    """Inputs, constants, mode and structure a graph was traced with (see the module docstring).

    ``tensor_inputs``: the graph's inputs (the sample's tensors and other non-constants);
    ``constants``: values baked into the graph (the sample's None and Python scalars, plus the
    flags tracezoo fixes, ``use_cache=False``, ``return_dict=True``); ``omittable``: constants
    that may be left out at run time because leaving them out means the same value;
    ``training`` / ``training_exceptions``: the root's mode and the modules in the other mode;
    ``children``: the child names of every traced-through module (unrolled loops run over them);
    ``tensor_shapes``: shapes of tensors the graph reads directly and of the direct parameters of
    the modules it calls; ``tensor_ranks``: ranks of the inputs whose rank the traced code read
    (``input_ids.ndim == 2``), so decided while tracing.
    """

    model_class: str
    tensor_inputs: tuple[str, ...]
    constants: dict[str, Any]
    omittable: frozenset[str]
    training: bool
    training_exceptions: frozenset[str]
    children: dict[str, tuple[str, ...]]
    tensor_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    tensor_ranks: dict[str, int] = field(default_factory=dict)
    #: inputs that are containers of tensors (see patcher.trace.nested_inputs): their structure, by name
    nested_inputs: dict[str, NestedInput] = field(default_factory=dict)
    _verified: Any = field(default_factory=weakref.WeakKeyDictionary, repr=False)

    # -- inputs ------------------------------------------------------------------------------
    def same_kind(self, inputs: Mapping[str, Any]) -> bool:
        """Whether a whole-model run with ``inputs`` is of the kind the graph was traced on: the names
        given as values (tensors, anything not a constant of the trace) are its inputs, no more and no
        fewer, and every name given a constant (None, a Python scalar) is one of its constants.

        A batch of another kind (text-only on a graph traced with images, a padded mask on one traced
        without) needs its own trace (:class:`~patcher.partition.SubgraphPaths`); one of this kind is
        checked value by value by :meth:`check_model_inputs` (a constant with another value, an input
        of another rank)."""
        given = {name for name, value in inputs.items() if not is_trace_constant(value)}
        return given == set(self.tensor_inputs) and all(
            name in self.constants for name, value in inputs.items() if is_trace_constant(value))

    def kind(self) -> str:
        """The inputs the graph reads, as messages name a kind of batch."""
        return input_kind(self.tensor_inputs)

    def check_model_inputs(self, inputs: Mapping[str, Any], where: str, fix: str | None = None) -> None:
        """Inputs of a whole-model run (``run_subgraphs``, ``TracedGraph.forward``). ``fix`` replaces
        what the error of an input too many or too few says to do, where the caller knows better
        (llm-compressor's pipeline traces on the first batch: the dataset is what to change)."""
        unknown = [name for name in inputs if name not in self.constants and name not in self.tensor_inputs]
        if unknown:
            raise self._unknown_error(unknown, where, fix)
        missing = [name for name in self.tensor_inputs if name not in inputs]
        if missing:
            raise MissingInputError(
                f"{where}: missing input(s) {', '.join(map(repr, missing))}: the graph was traced with them "
                "and reads them; " + (fix or "give them when running (an input given when tracing must be given "
                                             "when running)")
            )
        for name in self.tensor_inputs:
            self.check_tensor_input(name, inputs[name], where)
        for name, traced in self.constants.items():
            self.check_constant(name, inputs.get(name, _OMITTED), where)

    def check_tensor_input(self, name: str, value: Any, where: str) -> None:
        if value is None and name in self.tensor_inputs:
            raise InputMismatchError(
                f"{where}: input {name!r} is None, but the graph was traced with a value for it: code that "
                f"tests `{name} is None` was decided while tracing, so the graph would run the branch for a "
                f"given {name}. Give it when running, or trace with a sample where {name!r} is None."
            )
        nested = self.nested_inputs.get(name)
        if nested is not None:
            nested.check(value, where)
        rank = self.tensor_ranks.get(name)
        if rank is not None and isinstance(value, torch.Tensor) and value.ndim != rank:
            raise InputMismatchError(
                f"{where}: input {name!r} has {value.ndim} dimensions, but the graph was traced with {rank}: "
                f"code that tests the rank of {name!r} was decided while tracing, so the graph would run the "
                f"branch for {rank} dimensions. Trace with a sample of the rank you will run."
            )

    def check_constant(self, name: str, value: Any, where: str) -> None:
        traced = self.constants[name]
        if value is _OMITTED:
            if name in self.omittable:
                return
            raise MissingInputError(
                f"{where}: {name}={traced!r} was a constant of the trace (baked into the graph) and is not "
                f"given when running, where the model's default differs; give {name}={traced!r} when running, "
                f"or trace without it"
            )
        if same_constant(traced, value):
            return
        if traced is None:
            fix = f"trace with a sample that has {name!r} (a tensor), as you will run it"
        elif isinstance(value, torch.Tensor):
            fix = f"pass {name} as a Python value ({traced!r}), as when tracing"
        else:
            fix = f"trace with {name}={_describe(value)} in the sample, or run with {name}={traced!r}"
        raise InputMismatchError(
            f"{where}: {name} is {_describe(value)}, but the graph was traced with {name}={traced!r}, a "
            f"constant of the trace (None and Python scalars are baked into the graph, not read when it "
            f"runs), so the graph would compute as if {name}={traced!r}; {fix}"
        )

    def _unknown_error(self, unknown: list[str], where: str, fix: str | None = None) -> InputMismatchError:
        taken = ", ".join(sorted(self.tensor_inputs)) or "(none)"
        one = len(unknown) == 1
        it = "it" if one else "them"
        return InputMismatchError(
            f"{where}: input{'' if one else 's'} {', '.join(map(repr, unknown))} given, but the graph was traced "
            f"without {it} and would ignore {it} (a silent wrong result); {fix or f'trace with a sample that has {it}'}. "
            f"The graph takes: {taken}"
        )

    def check_subgraph_inputs(self, index: int, input_names: list[str], handed: frozenset[str],
                              inputs: Mapping[str, Any]) -> None:
        """Inputs of one subgraph: its own, plus any value the chain hands on (ignored here)."""
        where = f"subgraph {index}"
        missing = [name for name in input_names if name not in inputs]
        if missing:
            raise MissingInputError(
                f"{where} needs {', '.join(map(repr, missing))}, which the inputs do not have "
                "(an input given when tracing must be given when running)"
            )
        unknown = [name for name in inputs if name not in handed and name not in self.constants
                   and name not in self.tensor_inputs]
        if unknown:
            raise self._unknown_error(unknown, where)
        for name, value in inputs.items():
            if name in self.constants:
                self.check_constant(name, value, where)
            elif name in input_names:
                self.check_tensor_input(name, value, where)

    # -- model -------------------------------------------------------------------------------
    def check_model(self, model: nn.Module, mode_names: Iterable[str] | None, where: str) -> None:
        """Structure (cached per model) and the mode of ``mode_names`` (None: every module)."""
        self.check_structure(model, where)
        self.check_mode(model, mode_names, where)

    def check_mode(self, model: nn.Module, mode_names: Iterable[str] | None, where: str) -> None:
        modules = model.named_modules() if mode_names is None else (
            (name, _submodule(model, name)) for name in mode_names)
        for name, module in modules:
            if module is None:
                continue  # a missing module is the structure check's to report
            expected = self.training != (name in self.training_exceptions)
            if module.training != expected:
                what = type(model).__name__ if not name else f"module {name!r}"
                raise TrainingModeError(
                    f"{where}: the graph was traced with {what} in {_mode(expected)} mode, and it is in "
                    f"{_mode(module.training)} mode now. Dropout, layerdrop and every `self.training` branch "
                    f"were decided while tracing, so the graph would run as in {_mode(expected)} mode. Trace "
                    f"in the mode you will run in (calibration runs in eval mode: model.eval() before tracing)."
                )

    def check_structure(self, model: nn.Module, where: str) -> None:
        key = self._cheap_key(model)
        if self._verified.get(model) == key:
            return
        problems = []
        if type(model).__name__ != self.model_class:
            problems.append(f"the model is a {type(model).__name__}, the graph was traced from a {self.model_class}")
        for name, children in self.children.items():
            module = _submodule(model, name)
            if module is None:
                problems.append(f"module {name!r} is missing")
                continue
            now = tuple(module._modules)
            if now != children:
                lost = [child for child in children if child not in now]
                new = [child for child in now if child not in children]
                label = name or "the model"
                detail = (f"; it lacks {_names(lost)}" if lost else "") + (
                    f"; it has {_names(new)}, which the graph never calls" if new else "")
                problems.append(f"{label} has {len(now)} children, the graph was traced with {len(children)}"
                                f"{detail}")
        for path, shape in self.tensor_shapes.items():
            tensor = _tensor(model, path)
            if tensor is None:
                problems.append(f"{path!r} is missing")
            elif tuple(tensor.shape) != shape:
                problems.append(f"{path!r} has shape {tuple(tensor.shape)}, the graph was traced with {shape}")
        if problems:
            raise ModelMismatchError(
                f"{where}: the model is not the one the graph was traced from: {'; '.join(problems[:5])}"
                f"{' ...' if len(problems) > 5 else ''}. The graph unrolled the traced model's layers and "
                "would silently skip or misuse the others; trace the model you will run (a model built "
                "from the same config, on any device, fits)."
            )
        self._verified[model] = key

    def _cheap_key(self, model: nn.Module) -> tuple:
        # Identity and child count of each traced-through module: a swapped or grown container
        # invalidates the cached verdict; the full check runs once per model otherwise.
        key = []
        for name in self.children:
            module = _submodule(model, name)
            key.append((id(module), len(module._modules) if module is not None else -1))
        return tuple(key)


def _mode(training: bool) -> str:
    return "train" if training else "eval"


def _names(names: list[str]) -> str:
    shown = ", ".join(map(repr, names[:5]))
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _submodule(model: nn.Module, name: str) -> nn.Module | None:
    module = model
    if name:
        for part in name.split("."):
            module = module._modules.get(part) if isinstance(module, nn.Module) else None
            if module is None:
                return None
    return module


def _tensor(model: nn.Module, path: str) -> torch.Tensor | None:
    owner, _, attribute = path.rpartition(".")
    module = _submodule(model, owner)
    value = getattr(module, attribute, None) if module is not None else None
    return value if isinstance(value, torch.Tensor) else None


def mode_exceptions(model: nn.Module, named: Iterable[tuple[str, nn.Module]] | None = None) -> frozenset[str]:
    """Names of the modules whose mode differs from the root's (``named``:
    ``model.named_modules(remove_duplicate=False)`` when the caller has it)."""
    named = named if named is not None else model.named_modules(remove_duplicate=False)
    return frozenset(name for name, module in named if module.training != model.training)
