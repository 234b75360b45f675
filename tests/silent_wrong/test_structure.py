"""The public API: every exported name imports; subgraphs refuse a model of another structure."""

import importlib

import pytest

import patcher


@pytest.mark.parametrize("name", patcher.__all__)
def test_every_exported_name_imports_through_the_public_import(name):
    namespace: dict = {}
    exec(f"from patcher import {name}", namespace)
    assert namespace[name] is getattr(patcher, name)


@pytest.mark.parametrize("name", patcher.LAZY_EXPORTS)
def test_lazy_exports_are_listed_and_resolve_to_their_defining_module(name):
    assert name in patcher.__all__
    value = getattr(importlib.import_module("patcher"), name)
    assert callable(value) and value.__name__ == name


@pytest.mark.parametrize("name", ["load_traceable", "attempt_trace", "patch_source", "patch_file"])
def test_lazily_exported_functions_import_from_patcher(name):
    namespace: dict = {}
    exec(f"from patcher import {name}", namespace)
    assert callable(namespace[name])
