"""Rewrites that used to change what the code computes (issue 12, "silent wrong numbers").

Each case patches a small source, then runs the original and the patched code eagerly, and the
patched code under fx, on inputs where the old rewrite gave another result.
"""

from __future__ import annotations

import textwrap

import torch

from patcher.rewrite import patch_source
from rewrite._fixture_runtime import load, trace


def _patched_and_original(source: str, tmp_path, name: str):
    source = textwrap.dedent(source)
    result = patch_source(source, module_name=f"silent_{name}", source_path=str(tmp_path / f"{name}.py"))
    original = load(source, tmp_path / "original.py", f"tz_silent_orig_{name}")
    patched = load(result.code, tmp_path / "patched.py", f"tz_silent_patched_{name}")
    return original.Model().eval(), patched.Model().eval(), result.code


SLICE_OTHER_DIM = """
import torch


class Model(torch.nn.Module):
    def forward(self, hidden_states, mask):
        n = mask.shape[1]
        if hidden_states.shape[1] != n:
            hidden_states = hidden_states[:n]
        return hidden_states * 2
"""


def test_size_check_on_one_dim_slice_on_another_keeps_the_check(tmp_path):
    # TZ105 used to drop the check: `hidden_states[:n]` always, which truncates the batch dim
    # even when dim 1 already has n entries.
    original, patched, code = _patched_and_original(SLICE_OTHER_DIM, tmp_path, "slice_other_dim")
    assert "TZ105" in code
    traced = trace(patched, (torch.zeros(1), torch.zeros(1)))
    for args in [(torch.randn(3, 2, 4), torch.randn(3, 2)),  # sizes agree: no slice at all
                 (torch.randn(4, 3, 4), torch.randn(4, 2))]:  # sizes differ: the batch is cut to 2
        want = original(*args)
        torch.testing.assert_close(patched(*args), want)
        torch.testing.assert_close(traced(*args), want)


STARRED_LIST = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        a, *rest = x.shape
        square = rest == [4, 4]
        rest.append(1)
        return x.reshape([a] + rest) * 2, square
"""


def test_starred_shape_target_stays_a_list(tmp_path):
    # TZ104 used to write `rest = x.shape[1:]`: a torch.Size, so `rest == [4, 4]` was False and
    # `rest.append` raised AttributeError.
    original, patched, _ = _patched_and_original(STARRED_LIST, tmp_path, "starred_list")
    traced = trace(patched, (torch.zeros(2, 4, 4),))
    for x in [torch.randn(2, 4, 4), torch.randn(3, 4, 2)]:
        want_tensor, want_square = original(x)
        for got_tensor, got_square in (patched(x), traced(x)):
            torch.testing.assert_close(got_tensor, want_tensor)
            assert got_square == want_square
