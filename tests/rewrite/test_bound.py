"""bound.py: names certainly bound before a statement, and names a block binds before reading."""

from __future__ import annotations

import libcst as cst

from patcher.rewrite.bound import bound_before, writes_first

SRC = """
def f(a, p):
    b = 1
    if p:
        c = 2
        d = 3
    else:
        c = 4
        for i in range(a):
            e = i
    for j in range(a):
        c = c + j
        d = j
    return c
"""


def _parts():
    fn = cst.parse_module(SRC).body[0]
    body = list(fn.body.body)
    return body, body[1], body[2]


def test_bound_before_sees_branches():
    body, branch, last_loop = _parts()
    inner_loop = branch.orelse.body.body[1]
    assert bound_before(body, inner_loop, {"a", "p"}) == {"a", "p", "b", "c"}
    assert bound_before(body, last_loop, {"a", "p"}) == {"a", "p", "b", "c"}  # not d, i, e
    assert bound_before(body, cst.parse_statement("x = 1"), set()) is None


def test_writes_first():
    _, _, last_loop = _parts()
    assert writes_first("d", [last_loop])  # bound before any read: old value not needed
    assert writes_first("j", [last_loop])  # the loop target
    assert not writes_first("c", [last_loop])  # read first
