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


# -- load_traceable on a user's own script ---------------------------------------------------------

SCRIPT = '''
import json
import sys

import torch

from patcher import trace_graph
from patcher.models.traceable import load_traceable

print("TOP LEVEL RUN")


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 4)

    def forward(self, x):
        if x.shape[1] != 3:
            x = x[:, :3]
        return self.proj(x)


# Unguarded, as in a quick script: the generated module must not run this again.
Traceable = load_traceable(Tiny, cache_dir=sys.argv[1])

torch.manual_seed(0)
original = Tiny().eval()
model = Traceable().eval()
model.load_state_dict(original.state_dict())
try:
    trace_graph(original, {"x": torch.randn(2, 5)}, "re:proj")
    original_traces = True
except Exception:
    original_traces = False
graph = trace_graph(model, {"x": torch.randn(2, 5)}, "re:proj")
x = torch.randn(3, 3)
torch.testing.assert_close(graph(model, x=x)["output"], original(x))
print(json.dumps({"module": Traceable.__module__, "original_traces": original_traces,
                  "rules": sorted({r.code for r in Traceable.__tracezoo_patch__.rewrites})}))
'''


def test_load_traceable_on_a_script_patches_once(tmp_path):
    # Used to run the script's top level again on import of the generated module, which called
    # load_traceable on the generated class, ... 17 nested cache files, then OSError: File name too long.
    import json
    import subprocess
    import sys

    from child_env import child_env

    script = tmp_path / "my_script_with_a_rather_long_name_for_a_model_definition_file.py"
    script.write_text(SCRIPT)
    cache = tmp_path / "cache"
    env = child_env()
    run = subprocess.run([sys.executable, str(script), str(cache)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("TOP LEVEL RUN") == 1
    files = list(cache.iterdir())
    assert len(files) == 1 and len(files[0].name) <= 60, files
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["module"].startswith("_tracezoo_generated_") and not report["original_traces"]
    assert "TZ105" in report["rules"]


def test_load_traceable_refuses_a_class_it_cannot_regenerate():
    import pytest

    from patcher.models.traceable import TraceableLoadError, load_traceable

    def make():
        class Local(torch.nn.Module):
            def forward(self, x):
                return x

        return Local

    with pytest.raises(TraceableLoadError, match="top level"):
        load_traceable(make())
    exec_namespace: dict = {"torch": torch, "__name__": "tz_no_file_module"}
    exec("class NoFile(torch.nn.Module):\n    def forward(self, x):\n        return x\n", exec_namespace)
    with pytest.raises(TraceableLoadError, match="source file"):
        load_traceable(exec_namespace["NoFile"])
