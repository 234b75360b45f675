"""A module picked from a container by a traced index: the sample's module, checked at every run.

``self.lm_head[generation_steps](hidden_states)`` (Qwen3-Omni's code predictor, where
``generation_steps = inputs_embeds.shape[1] - 2``) indexes an ``nn.ModuleList`` with a value computed
from the inputs: fx hands the index over as a traced value, and a graph can call only a module it
names, not one picked when it runs. Which module the sample picks is worked out as branch decisions
are (:mod:`patcher.trace.decisions`: the part of the graph that computes the index runs on the sample,
between two traces), the trace calls that module, and the graph checks the index at every run: an
input that would pick another module raises :class:`~patcher.trace.errors.BranchDecisionError` instead
of running the sample's module. A slice's traced bounds (``self.layers[:count]``) are decided alike.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable, Iterator

from torch import fx, nn

from .errors import BranchDecisionError

#: Containers whose ``__getitem__`` picks a module: by position (ModuleList, Sequential) or by key (ModuleDict).
MODULE_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


def container_key(value: Any) -> int | str:
    """The index (or ModuleDict key) ``value`` stands for, as the container's own ``__getitem__`` reads it."""
    return value if isinstance(value, str) else operator.index(value)


def check_decided_index(value: Any, traced: int | str, where: str) -> None:
    """The graph's check that a container is indexed as it was for the sample the graph was traced with."""
    try:
        key = container_key(value)
    except TypeError:
        key = value
    if type(key) is not type(traced) or key != traced:
        raise BranchDecisionError(
            f"this input picks another module than the sample the graph was traced with: {where} is {key!r} "
            f"here and was {traced!r} while tracing. The graph calls only the module the sample picked (fx "
            f"cannot call a module chosen when the graph runs, so the tracer picked it from the sample); trace "
            f"with a sample that gives {key!r} there to run such inputs.")


def _container_path(tracer: fx.Tracer, container: nn.Module) -> str:
    try:
        return f"'{tracer.path_of_module(container)}'" if container is not tracer.root else "the model"
    except NameError:  # a container the model does not hold as a submodule
        return f"a {type(container).__name__}"


@contextlib.contextmanager
def decided_container_indices(tracer: fx.Tracer, may_decide: Callable[[], bool]) -> Iterator[None]:
    """While tracing, a traced value of ``tracer`` indexing a module container picks the module the
    sample picks (``tracer.decisions``), with the graph's check that a run picks the same one.
    ``may_decide()`` false (an attempt that may be taken back) leaves the index to the container,
    which refuses it."""
    originals = {container: container.__dict__["__getitem__"] for container in MODULE_CONTAINERS}

    def decided(container: nn.Module, value: Any, what: str) -> Any:
        if not (isinstance(value, fx.Proxy) and value.tracer is tracer and may_decide()):
            return value
        what = f"{what} {_container_path(tracer, container)}"
        return tracer.decisions.answer_measured(tracer, value, container_key, check_decided_index, what)

    def patched(original):
        def __getitem__(container, index):
            if isinstance(index, slice):  # self.layers[:count]: each traced bound decided
                index = slice(decided(container, index.start, "the start of the slice of"),
                              decided(container, index.stop, "the end of the slice of"),
                              decided(container, index.step, "the step of the slice of"))
            else:
                index = decided(container, index, "the index of")
            return original(container, index)

        __getitem__.__wrapped__ = original
        return __getitem__

    for container, original in originals.items():
        container.__getitem__ = patched(original)
    try:
        yield
    finally:
        for container, original in originals.items():
            container.__getitem__ = original
