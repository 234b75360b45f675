"""Properties of the rewriter on generated programs.

Two sources of programs: model-like modules assembled from snippets of the constructs the rules
handle (nested at random under static branches and loops), which exercise every rule together;
and arbitrary valid Python from hypothesmith (when installed), which must never crash the patcher.

Header policy under test: the header is always added, also when nothing changed; "unchanged"
means the body after the header equals the input byte for byte.
"""

from __future__ import annotations

import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewrite._helpers import unexplained_changes
from patcher.rewrite import PatchError, patch_source
from patcher.rewrite.file_header import split_header

UNTRACEABLE = [
    "assert x.sum() > 0, f'bad {x.shape}'",
    "if x.mean() > 0:\n    x = x * 2\nelse:\n    y = x + 1  # one branch only",
    "if mask is None:\n    x = x + 1\nelif mask.sum() > 1:\n    x = x * mask",
    "b, t, *_ = x.shape",
    "shape = x.shape[:-1]\nx = x.view(*shape, -1)",
    "sizes = x.sum(-1).long().tolist()",
    "for row in x:\n    x = x + row.sum()",
    "if x.ndim == 3:\n    x = x[0]",
    "if x.shape[1] != n:\n    x = x[:, :n]",
    "lo = torch.finfo(x.dtype).min",
    "y = x if x.max() > 1 else -x",
    "x = torch.zeros(x.shape[0], x.shape[1])",
    "chunks = list(x)",
    "m = create_causal_mask(x, n)",
    "x[:, 0] = 1",
    "torch_compilable_check(x.numel() > 0, f'empty: {x.shape}')",
    "for kind in set(['full', 'sliding', 'full']):\n    x = x + len(kind)",
]
TRACEABLE = [
    "x = x * 2",
    "y = x.sum(-1)",
    "if self.flag:\n    x = x + 1",
    "if mask is not None:\n    x = x + mask",
    "z = [1, 2, 3]\nz[0] = 4",
    "for i in range(3):\n    x = x + i",
    "x = x.view(x.shape[0], -1)",
    "# just a comment\nx = torch.relu(x)",
    "assert self.flag is not None",
]


def _indent(code: str, level: int) -> str:
    return textwrap.indent(code, "    " * level)


@st.composite
def statements(draw, pool, depth=0):
    snippet = draw(st.sampled_from(pool))
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        header = draw(st.sampled_from(["if self.flag:", "for _ in range(2):", "with torch.no_grad():"]))
        inner = draw(st.lists(statements(pool, depth + 1), min_size=1, max_size=2))
        return header + "\n" + _indent("\n".join(inner), 1)
    return snippet


@st.composite
def model_sources(draw, pool=UNTRACEABLE + TRACEABLE):
    body = draw(st.lists(statements(pool), min_size=1, max_size=6))
    forward = "\n".join(body) + "\nreturn x"
    return (
        "import torch\n\n\n"
        "def create_causal_mask(x, n):\n    return x\n\n\n"
        "class Model(torch.nn.Module):\n"
        "    flag = True\n\n"
        "    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, n: int = 2):\n"
        + _indent(forward, 2)
        + "\n"
    )


@given(model_sources())
def test_patch_is_deterministic_idempotent_and_compiles(source):
    first = patch_source(source)
    assert patch_source(source).code == first.code
    compile(first.code, "patched.py", "exec")
    assert patch_source(first.code).code == first.code


@given(model_sources())
def test_lines_outside_rewrites_are_unchanged(source):
    result = patch_source(source)
    assert unexplained_changes(source, result) == set()
    # every rewrite says why, on the line above it
    assert result.code.count("# TRACING(TZ") >= len({r.lines for r in result.rewrites})


@given(model_sources(pool=TRACEABLE))
def test_traceable_code_comes_back_unchanged(source):
    result = patch_source(source)
    assert result.rewrites == []
    assert split_header(result.code)[1] == source


try:
    import hypothesmith
except ImportError:  # optional test dependency
    hypothesmith = None


@pytest.mark.skipif(hypothesmith is None, reason="hypothesmith not installed")
@settings(suppress_health_check=list(HealthCheck), deadline=None)
@given(st.data())
def test_random_valid_python_never_crashes_the_patcher(data):
    source = data.draw(hypothesmith.from_node() if data.draw(st.booleans()) else hypothesmith.from_grammar())
    try:
        compile(source, "random.py", "exec")
    except (SyntaxError, ValueError):
        return  # hypothesmith occasionally emits code only the grammar accepts
    try:
        result = patch_source(source)
    except PatchError:
        return  # a clean refusal (e.g. code libcst cannot parse) is not a crash
    compile(result.code, "patched.py", "exec")
    assert patch_source(result.code).code == result.code
