"""In-place mutation is an output of hoisted code: every form is seen, and the hoisted function
returns the container so that the call site rebinds it (the fixtures `mutates_*` execute this)."""

from __future__ import annotations

import libcst as cst
import pytest

from patcher.rewrite.hoist import hoist
from patcher.rewrite.name_use import name_use

FORMS = {
    "item assignment": "box['image'] = x",
    "attribute assignment": "box.image = x",
    "nested item": "box['a']['b'] = x",
    "augmented item": "box['n'] += 1",
    "del item": "del box['image']",
    "update": "box.update(image=x)",
    "setdefault": "box.setdefault('image', x)",
    "clear": "box.clear()",
    "pop": "box.pop()",
    "popitem": "box.popitem()",
    "append": "box.append(x)",
    "extend": "box.extend([x])",
    "insert": "box.insert(0, x)",
    "remove": "box.remove(x)",
    "set discard": "box.discard(x)",
    "method of an item": "box['list'].append(x)",
}


@pytest.mark.parametrize("source", FORMS.values(), ids=FORMS.keys())
def test_every_form_is_a_mutation_that_hoisting_returns(source):
    statement = cst.parse_statement(f"if x.sum() > 0:\n    {source}\n")
    assert name_use(statement).mutated == ["box"]
    hoisted = hoist([statement], name="_wrapped_fill_box", local_names={"x", "box"}, defined_before={"x", "box"},
                    origin="model.py:1", comment="# TRACING(TZ101)")
    assert hoisted.returns == ["box"]
    assert cst.Module([]).code_for_node(hoisted.replacement[0]).strip().endswith(
        "box = _wrapped_fill_box(x, box)")


@pytest.mark.parametrize("source", ["y = box.get('image')", "n = len(box)", "y = box.copy()", "y = x.add(1)", "y = x.sort()"])
def test_reads_and_tensor_methods_are_no_mutation(source):
    statement = cst.parse_statement(source)
    assert name_use(statement).mutated == []
