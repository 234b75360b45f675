"""The three reference models of transformers 5.23 patch, compile, import and stay fixed points."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from rewrite._helpers import unexplained_changes
from patcher.rewrite import patch_file, patch_source

MODELS = {
    "qwen2_vl": ["Qwen2VLDecoderLayer", "Qwen2VLVisionBlock"],
    "mllama": ["MllamaSelfAttentionDecoderLayer", "MllamaCrossAttentionDecoderLayer", "MllamaVisionEncoderLayer"],
    "llava": [],
}
# What the rules must find in each (a floor, so that new detections do not break the test).
EXPECTED = {
    "qwen2_vl": {"TZ102", "TZ103", "TZ105", "TZ106"},
    "mllama": {"TZ103", "TZ104", "TZ105", "TZ106"},
    "llava": {"TZ102", "TZ103"},
}


def _module(name: str) -> str:
    return f"transformers.models.{name}.modeling_{name}"


@pytest.fixture(scope="module", params=sorted(MODELS))
def patched(request, tmp_path_factory):
    name = request.param
    out = tmp_path_factory.mktemp(name)
    result = patch_file(_module(name), out, targets=MODELS[name])
    return name, result, out / f"modeling_{name}.py"


def test_patches_compiles_and_finds_the_known_blockers(patched):
    name, result, path = patched
    compile(result.code, str(path), "exec")
    assert EXPECTED[name] <= {r.code for r in result.rewrites}


def test_repatching_changes_nothing(patched):
    name, result, _ = patched
    assert patch_source(result.code, targets=MODELS[name]).code == result.code


def test_only_rewritten_lines_change(patched):
    name, result, _ = patched
    assert unexplained_changes(result.source, result) == set()


def test_imports_outside_the_package_with_the_same_classes(patched):
    name, result, path = patched
    original = importlib.import_module(_module(name))
    alias = f"tz_patched_{name}"
    spec = importlib.util.spec_from_file_location(alias, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules.pop(alias, None)
    classes = {n for n, v in vars(original).items() if isinstance(v, type) and v.__module__ == original.__name__}
    assert classes <= set(vars(mod))
    assert issubclass(getattr(mod, [c for c in classes if c.endswith("ForConditionalGeneration")][0]), torch.nn.Module)


def test_qwen2_vl_rope_index_is_one_opaque_call():
    result = patch_source(importlib.util.find_spec(_module("qwen2_vl")).loader.get_source(_module("qwen2_vl")),
                          module_name=_module("qwen2_vl"))
    assert "def get_rope_index(" in result.code  # the method itself is kept as written
    functions = {r.function for r in result.rewrites}
    assert "_wrapped_forward_position_ids_ndim" in functions
    # the image/video token checks run when the graph runs; named after what they test, which is
    # `n_image_tokens` in transformers 5.23, `inputs_embeds[...]` in 5.10
    checks = [r for r in result.rewrites if (r.function or "").startswith("_check_")]
    assert len(checks) == 2 and all(r.qualname == "Qwen2VLModel.get_placeholder_mask" for r in checks), checks
