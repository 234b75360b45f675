"""patch_source / patch_file: header, manifest, errors, imports, locations, blockers, notes."""

from __future__ import annotations

import doctest
import json
import os
import textwrap

import pytest
import torch

import patcher.rewrite
import patcher.rewrite.api
from patcher.rewrite import PatchError, patch_file, patch_source
from patcher.rewrite.file_header import MARKER, split_header

MODEL = textwrap.dedent(
    """\
    import torch
    from .configuration_toy import ToyConfig  # relative: made absolute


    class ToyModel(torch.nn.Module):
        def forward(self, x: torch.Tensor):
            # count must match
            assert x.sum() > 0, f"empty input: {x.shape}"
            b, t, *_ = x.shape
            return x.view(b, t, -1)
    """
)


def test_docstring_examples():
    for mod in (patcher.rewrite, patcher.rewrite.api):
        result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0


def test_header_and_manifest():
    r = patch_source(MODEL, module_name="toys.toy.modeling_toy")
    assert r.code.startswith(MARKER)
    fields, body = split_header(r.code)
    assert fields["source module"] == "toys.toy.modeling_toy"
    assert fields["rules applied"] == "TZ102, TZ104"
    assert fields["patcher version"] and fields["transformers version"]
    assert "from toys.toy.configuration_toy import ToyConfig  # relative: made absolute" in body
    assert [(w["rule"], w["lines"]) for w in r.manifest["rewrites"]] == [("TZ102", [8, 8]), ("TZ104", [9, 9])]
    assert r.manifest["rewrites"][0]["function"] == "_check_x_sum"
    assert r.manifest["imports_made_absolute"] == 1
    assert "# TRACING(TZ102):" in body and "# TRACING(TZ104):" in body
    json.dumps(r.manifest)  # JSON-able


def test_relative_imports_inside_classes_and_functions_are_made_absolute():
    # MusicGen's __init__ imports AutoModelForTextEncoding relatively: left as is, the patched file
    # (outside the package) failed with "attempted relative import with no known parent package"
    src = textwrap.dedent(
        """\
        import torch


        class M(torch.nn.Module):
            def __init__(self, encoder=None):
                super().__init__()
                if encoder is None:
                    from ..auto.modeling_auto import AutoModel
        """
    )
    r = patch_source(src, module_name="toys.toy.modeling_toy")
    assert "from toys.auto.modeling_auto import AutoModel" in split_header(r.code)[1]
    assert r.manifest["imports_made_absolute"] == 1


def test_header_is_added_even_without_rewrites():
    src = "import torch\n\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
    r = patch_source(src)
    assert r.rewrites == [] and r.code.startswith(MARKER)
    assert split_header(r.code)[1] == src
    assert split_header(r.code)[0]["rules applied"] == "none"


def test_error_inside_wrapped_code_names_the_original_line(tmp_path):
    r = patch_source(MODEL, module_name="toys.toy.modeling_toy")
    code = r.code.replace("from toys.toy.configuration_toy import ToyConfig", "ToyConfig = None")
    ns: dict = {}
    exec(compile(code, str(tmp_path / "modeling_toy.py"), "exec"), ns)
    with pytest.raises(AssertionError) as info:
        ns["ToyModel"]()(torch.zeros(2, 3))
    assert "empty input: torch.Size([2, 3])" in str(info.value)  # formatted at run time
    assert any("modeling_toy.py:8" in note for note in getattr(info.value, "__notes__", []))


def test_syntax_error_is_a_patch_error_with_line():
    with pytest.raises(PatchError, match=r"bad\.py:2: syntax error"):
        patch_source("x = 1\ndef (:\n", source_path="bad.py")


def test_locations_force_a_rewrite_and_report_misses():
    src = "import torch\n\n\ndef f(scores):\n    if scores > 1:\n        scores = scores / 2\n    return scores\n"
    # `scores` is not known to be a tensor: its name does not say so, and a comparison and a
    # division are what numbers do too (`scores.max()` would say so)
    assert patch_source(src).rewrites == []
    r = patch_source(src, locations=[(5, "control_flow"), (1, "iteration")])
    assert [(w.code, w.lines) for w in r.rewrites] == [("TZ101", (5, 6))]
    assert [(b.line, b.kind) for b in r.blockers] == [(1, "iteration")]
    # a whole function by name
    r = patch_source(src + "\n\ndef g(x):\n    return f(x)\n", locations=[("f", "TZ106")])
    assert "return _wrapped_f(x)" in r.code


def test_two_expression_rules_rewrite_one_statement_and_both_are_recorded_at_its_line():
    # TZ104 rewrites the starred size, then TZ106 redirects the ignored call of the statement TZ104 rebuilt
    src = textwrap.dedent(
        """\
        import torch


        def create_causal_mask(x, n):
            return x


        class Model(torch.nn.Module):
            def forward(self, x: torch.Tensor):
                shape = x.shape[:-1]
                mask = create_causal_mask(x.view(*shape, -1), 2)
                return mask
        """
    )
    result = patch_source(src)
    assert [(r.code, r.lines) for r in result.rewrites] == [("TZ104", (11, 11)), ("TZ106", (11, 11))]
    assert "mask = _wrapped_create_causal_mask(x.view(shape + (-1,)), 2)" in result.code


def test_target_blocker_names_file_and_line():
    src = textwrap.dedent(
        """\
        import torch


        class Layer(torch.nn.Module):
            pass


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList([Layer()])

            def forward(self, hidden_states: torch.Tensor):
                for layer in self.layers:
                    if hidden_states.sum() > 0:
                        hidden_states = layer(hidden_states)
                return hidden_states
        """
    )
    r = patch_source(src, source_path="modeling_m.py", targets=["Layer"])
    assert r.rewrites == []
    assert [(b.line, b.code) for b in r.blockers] == [(15, "TZ101")]
    assert str(r.blockers[0]).startswith("modeling_m.py:15: TZ101 (unhoistable)")
    assert "would hide target module(s) layer" in r.blockers[0].reason
    # without targets the same branch is wrapped
    assert [w.code for w in patch_source(src).rewrites] == ["TZ101"]


def test_target_modules_bound_by_a_starred_target_are_not_hidden():
    src = textwrap.dedent(
        """\
        import torch


        class Layer(torch.nn.Module):
            pass


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList([Layer(), Layer()])

            def forward(self, hidden_states: torch.Tensor):
                first, *rest = self.layers
                if hidden_states.sum() > 0:
                    hidden_states = rest[0](hidden_states)
                return first(hidden_states)
        """
    )
    r = patch_source(src, source_path="modeling_m.py", targets=["Layer"])
    assert r.rewrites == []
    assert [(b.line, b.code) for b in r.blockers] == [(15, "TZ101")]
    assert "would hide target module(s) rest" in r.blockers[0].reason


def test_testing_whether_a_target_holder_is_there_does_not_keep_code_from_being_wrapped():
    # Granite 4 Vision's loop over images asks `if self.layerwise_projectors is not None:` (a ModuleList
    # of modules built by AutoModel.from_config, so possibly holding targets): testing for None calls
    # none of them, so the loop is wrapped; calling the module still keeps it from being wrapped
    src = textwrap.dedent(
        """\
        import torch


        class Layer(torch.nn.Module):
            pass


        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.projectors = torch.nn.ModuleList([Layer()])

            def pack(self, features, sizes):
                packed = []
                for feature, size in zip(features, sizes.tolist()):
                    if self.projectors is not None:
                        size = size * 2
                    packed.append(feature[:size])
                return packed

            def pack_called(self, features, sizes):
                packed = []
                for feature, size in zip(features, sizes.tolist()):
                    if self.projectors is not None:
                        feature = self.projectors[0](feature)
                    packed.append(feature[:size])
                return packed
        """
    )
    r = patch_source(src, source_path="modeling_m.py", targets=["Layer"])
    assert [(w.code, w.lines[0]) for w in r.rewrites] == [("TZ103", 15)]
    assert [(b.line, b.code) for b in r.blockers] == [(23, "TZ103")]
    assert "would hide target module(s) self.projectors" in r.blockers[0].reason


def test_patch_file_writes_atomically_and_refuses_foreign_outputs(tmp_path):
    src = tmp_path / "pkg" / "modeling_toy.py"
    src.parent.mkdir()
    (src.parent / "__init__.py").write_text("")
    src.write_text(MODEL)
    out = tmp_path / "out"
    r = patch_file(src, out)
    assert (out / "modeling_toy.py").read_text() == r.code
    manifest = json.loads((out / "modeling_toy.manifest.json").read_text())
    assert manifest["source_module"] == "pkg.modeling_toy"  # inferred from the package directory
    assert sorted(os.listdir(out)) == ["modeling_toy.manifest.json", "modeling_toy.py"]  # no temp files left
    assert patch_file(src, out, check=True).manifest["up_to_date"]
    patch_file(src, out)  # ours: overwritten without force

    (out / "modeling_toy.py").write_text("# hand-written\n")
    with pytest.raises(PatchError, match="not generated by the patcher"):
        patch_file(src, out)
    assert (out / "modeling_toy.py").read_text() == "# hand-written\n"
    assert not patch_file(src, out, check=True).manifest["up_to_date"]
    patch_file(src, out, force=True)
    assert (out / "modeling_toy.py").read_text().startswith(MARKER)


@pytest.mark.parametrize(
    "text, match",
    [
        ("import torch\n\n\ndef f(x):\n    return x\n", "no model classes"),
        ("class A(:\n", "syntax error"),
    ],
)
def test_patch_file_bad_inputs_write_nothing(tmp_path, text, match):
    src = tmp_path / "modeling_bad.py"
    src.write_text(text)
    with pytest.raises(PatchError, match=match):
        patch_file(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_patch_file_missing_inputs(tmp_path):
    with pytest.raises(PatchError, match="no such file"):
        patch_file(tmp_path / "nope.py", tmp_path / "out")
    with pytest.raises(PatchError, match="cannot find"):
        patch_file("transformers.models.no_such_model.modeling_nothing", tmp_path / "out")


BANNER = (
    "#   \U0001F6A8\U0001F6A8\U0001F6A8\n"
    "#  This file was automatically generated from src/transformers/models/toy/modular_toy.py.\n"
    "#  Do NOT edit this file manually; apply the change to modular_toy.py directly.\n"
    "#   \U0001F6A8\U0001F6A8\U0001F6A8\n"
)


def test_modular_banner_is_rewritten_in_place_and_only_once():
    result = patch_source(BANNER + MODEL, module_name="pkg.modeling_toy")
    fields, body = split_header(result.code)
    note, rest = body.split("\n", 4)[:4], body.split("\n", 4)[4]
    assert "Do NOT edit" not in body and "modular_toy.py" in "\n".join(note)
    assert rest.startswith("import torch")  # the banner's four lines became the note's four
    # lines stay the original file's: the same rewrites, four lines further down
    assert [r.lines for r in result.rewrites] == [(a + 4, b + 4) for a, b in
                                                  (r.lines for r in patch_source(MODEL).rewrites)]
    assert patch_source(result.code).code == result.code  # the note is not rewritten again
    assert patch_source(MODEL).code.count("upstream note") == 0  # no banner, no note


def test_provenance_lines_are_written_and_kept_when_regenerating(tmp_path):
    src = tmp_path / "pkg" / "modeling_toy.py"
    src.parent.mkdir()
    (src.parent / "__init__.py").write_text("")
    src.write_text(MODEL)
    provenance = [("recipe", "zoo/toy/recipe.py"), ("regenerate with", "bash scripts/check_zoo --fix toy")]
    first = patch_file(src, tmp_path / "out", provenance=provenance)
    assert split_header(first.code)[0]["regenerate with"] == "bash scripts/check_zoo --fix toy"
    assert patch_file(src, tmp_path / "out", check=True).manifest["up_to_date"]  # kept: still fresh
    assert patch_file(src, tmp_path / "out").code == first.code
    with pytest.raises(ValueError, match="unknown header fields"):
        patch_source(MODEL, provenance=[("made by", "hand")])
