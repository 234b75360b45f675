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


def test_a_branch_that_leaves_a_maybe_unbound_name_alone_needs_no_old_value():
    # UDOP (transformers 5.10): `prefix` is bound only where the chain raises; the branches that run
    # leave it alone, so there is no old value to read at the call site
    chain = cst.parse_statement(
        "if x.sum() > 0:\n    y = x\nelif x.sum() < 0:\n    y = -x\nelse:\n    prefix = 'a'\n    raise ValueError(prefix)\n")
    assert writes_first("prefix", [chain], untaken_keeps=False)
    assert not writes_first("prefix", [chain])  # where an old value would stay, it is needed
    read_after = cst.parse_statement("z = prefix")
    assert not writes_first("prefix", [chain, read_after], untaken_keeps=False)  # read after: needed
    reads_it = cst.parse_statement("if x.sum() > 0:\n    y = prefix\nelse:\n    prefix = 'a'\n")
    assert not writes_first("prefix", [reads_it], untaken_keeps=False)
