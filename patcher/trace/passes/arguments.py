"""trace_graph's arguments read and checked against the model and sample: targets, ignore entries, unused inputs."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping

from torch import nn

from ...registry.normalize import ModuleEntries, input_names
from ...registry.ignore import resolve_ignore
from ..errors import TargetMatchError
from ..liveness import check_unused_inputs_known
from ..matching import match_modules, parse_patterns, resolve_targets
from ..model_walk import ModelWalk
from .ignore_entries import check_ignore_matches, check_targets_not_ignored


@dataclasses.dataclass(frozen=True)
class Arguments:
    """What is traced: the targets and ignore entries resolved, and the modules walked through."""

    targets: dict[str, nn.Module]
    ignore: list[str]
    traced_modules: set[nn.Module]  # the targets' ancestors; every other module is one call of the graph
    unused_inputs: list[str]


def read_arguments(model: nn.Module, sample_input: Mapping[str, Any],
                   sequential_targets: ModuleEntries,
                   ignore: ModuleEntries | None, unused_inputs: Iterable[str] | str,
                   walk: ModelWalk | None = None) -> Arguments:
    walk = walk if walk is not None else ModelWalk(model)
    unused_inputs = input_names(unused_inputs, "unused_inputs")
    check_unused_inputs_known(sample_input, unused_inputs)
    ignore = resolve_ignore(ignore)
    targets = resolve_targets(model, sequential_targets, walk.unique)
    ignored_modules, ignore_hits = match_modules(model, parse_patterns(ignore), walk.unique)
    check_ignore_matches(model, ignore_hits, walk.classes)
    check_targets_not_ignored(targets, ignored_modules)
    traced_modules = _ancestors(model, walk, targets) - set(ignored_modules.values()) - set(targets.values())
    if model in ignored_modules.values():
        raise TargetMatchError("the root model itself matches an ignore entry; nothing would be traced")
    return Arguments(targets, ignore, traced_modules, unused_inputs)


def _ancestors(model: nn.Module, walk: ModelWalk, names: Iterable[str]) -> set[nn.Module]:
    modules = dict(walk.named)
    ancestors = {model}
    for name in names:
        parts = name.split(".")
        for cut in range(1, len(parts)):
            ancestors.add(modules[".".join(parts[:cut])])
    return ancestors
