"""The supported torch and transformers releases: one floor, declared and enforced."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from patcher.registry.versions import CEILINGS, FLOORS, UnsupportedVersionError, check_supported_versions, unsupported

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_pyproject_declares_the_floors_the_tracer_enforces(package):
    declared = re.search(rf'"{package}([^"]*)"', PYPROJECT.read_text(encoding="utf-8")).group(1)
    assert declared == f">={FLOORS[package]}" + (f",<{CEILINGS[package]}" if package in CEILINGS else "")


def test_the_installed_releases_are_supported():
    assert unsupported() == []
    check_supported_versions()


@pytest.mark.parametrize("versions, named", [
    ({"torch": "2.8.0", "transformers": "5.23.0"}, ["torch 2.8.0 (tracezoo needs >=2.10)"]),
    ({"torch": "2.13.0+cpu", "transformers": "5.5.4"}, ["transformers 5.5.4 (tracezoo needs >=5.10.4,<6)"]),
    ({"torch": "2.9.1", "transformers": "6.0.0.dev0"},
     ["torch 2.9.1 (tracezoo needs >=2.10)", "transformers 6.0.0.dev0 (tracezoo needs >=5.10.4,<6)"]),
])
def test_an_older_release_is_refused_by_name_with_the_upgrade(versions, named):
    assert unsupported(versions) == named
    with pytest.raises(UnsupportedVersionError, match=r"silently wrong.*pip install 'torch>=2.10' "
                                                      r"'transformers>=5.10.4,<6'"):
        check_supported_versions(versions)


@pytest.mark.parametrize("versions", [{"torch": "2.10.0+cu128", "transformers": "5.10.4"},
                                      {"torch": "2.15.0", "transformers": "5.24.0"}])
def test_the_releases_ci_proves_pass(versions):
    assert unsupported(versions) == []


def test_the_private_torch_internals_tracezoo_reads_exist_in_this_torch():
    # Each is read by name; a torch that renames one must fail here, naming it, not deep in a trace.
    # CI runs this file on the oldest and newest torch it claims (pyproject.toml).
    import torch
    from torch import fx, nn
    from torch.nn.modules import module as module_globals
    from torch.utils import _pytree

    tracer = fx.Tracer()
    assert isinstance(tracer.num_calls, dict) and isinstance(tracer.module_stack, dict)  # trace/tracer.py
    code = fx.symbolic_trace(nn.Linear(2, 2)).graph.python_code(root_module="self")
    assert isinstance(code._prologue_start, int) and isinstance(code._lineno_map, dict)  # trace/graph_runtime.py
    one = torch.zeros(1, 2, 1, 4)
    assert isinstance(torch._fused_sdp_choice(one, one, one, None, 0.0, False, scale=None, enable_gqa=False),
                      int)  # meta_mode.py asks it which attention kernel a real run takes
    assert all(callable(getattr(_pytree, name)) for name in ("tree_flatten", "tree_map", "tree_map_"))
    layer = nn.Linear(2, 2)
    from patcher.trace.hooks import _GLOBAL_HOOKS, HOOK_DICTS
    from patcher.trace.state import _HOOK_DICTS
    assert all(isinstance(getattr(layer, name), dict) for name in (*HOOK_DICTS, *_HOOK_DICTS))
    assert all(isinstance(getattr(module_globals, name), dict) for name in _GLOBAL_HOOKS)
    graph = fx.symbolic_trace(nn.Linear(2, 2)).graph
    assert next(iter(reversed(graph.nodes))).op == "output"  # trace/tracer.py's _trace_through
