"""The runnable examples in public docstrings run as written."""

import doctest
import importlib

import pytest

MODULES = ["patcher.normalize",
           "patcher.partition.paths", "patcher.trace.matching", "patcher.verify.equivalence", "patcher.verify.eager",
           "patcher.verify.kernels", "patcher.attempt",
           "patcher.plan.memory", "patcher.plan.report", "patcher.towers", "patcher.trace.tracer"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
