"""A modality plugs in as ``patcher/samples/<modality>/modality.py``: the sweep and its report find
every declaration there, in the report's order, and refuse a declaration module without one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import patcher.samples
from patcher.samples.declaration import Modality
from patcher.samples.modalities import MODALITIES, declared

SAMPLES = Path(patcher.samples.__file__).parent


def test_every_declaration_under_samples_is_a_modality_in_the_report_order():
    folders = sorted(path.parent.name for path in SAMPLES.glob("*/modality.py"))
    assert all(isinstance(modality, Modality) for modality in MODALITIES)
    assert len(MODALITIES) == len(folders) == len({modality.label for modality in MODALITIES})
    assert [modality.order for modality in MODALITIES] == sorted(modality.order for modality in MODALITIES)
    # the report's order before the declarations were found (columns, summary, blocker): unchanged
    # (a new modality takes its own place among them)
    assert [modality.label for modality in MODALITIES if modality.label in ("images", "video", "audio")] \
        == ["images", "video", "audio"]


def _package(tmp_path, name: str, declarations: dict[str, str]) -> Path:
    folder = tmp_path / name
    for modality, text in declarations.items():
        (folder / modality).mkdir(parents=True)
        (folder / modality / "__init__.py").write_text("")
        (folder / modality / "modality.py").write_text(text)
    (folder / "__init__.py").write_text("")
    return folder


DECLARATION = """import dataclasses
from patcher.samples.images.modality import IMAGES
MODALITY = dataclasses.replace(IMAGES, label={label!r}, attempt={label!r}, order={order})
"""


@pytest.fixture
def on_path(tmp_path):
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in [name for name in sys.modules if name.startswith("tz_modalities_")]:
        del sys.modules[name]


def test_a_new_package_with_a_declaration_is_found_in_its_place(on_path):
    folder = _package(on_path, "tz_modalities_new", {
        "aaa": DECLARATION.format(label="late", order=5), "zzz": DECLARATION.format(label="early", order=1),
        "no_declaration": ""})
    (folder / "no_declaration" / "modality.py").unlink()  # a package without modality.py is no modality
    found = declared(folder, "tz_modalities_new")
    assert [modality.label for modality in found] == ["early", "late"]
    assert all(isinstance(modality, Modality) for modality in found)


def test_a_declaration_module_without_a_modality_is_refused_by_name(on_path):
    folder = _package(on_path, "tz_modalities_bad", {"thing": "MODALITY = 'images'\n"})
    with pytest.raises(TypeError, match=r"thing/modality\.py: .*MODALITY = Modality\(\.\.\.\), found str"):
        declared(folder, "tz_modalities_bad")


def test_two_declarations_in_one_place_are_refused(on_path):
    folder = _package(on_path, "tz_modalities_tie", {
        "one": DECLARATION.format(label="one", order=3), "two": DECLARATION.format(label="two", order=3)})
    with pytest.raises(ValueError, match="share a place in the report's order"):
        declared(folder, "tz_modalities_tie")


def _modality_packages() -> set[str]:
    return {path.parent.name for path in SAMPLES.glob("*/modality.py")}


@pytest.mark.parametrize("module", ["patcher/coverage/check.py", "patcher/coverage/report.py"])
def test_the_sweep_and_its_report_reach_modalities_through_their_declarations_only(module):
    # check.py once prepared configs and models with audio's and images' own functions and named
    # has_image_path; report.py counted images' "needs images" stage: a new modality edited both.
    import ast

    tree = ast.parse((Path(patcher.samples.__file__).parents[2] / module).read_text(encoding="utf-8"))
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            parts = node.module.lstrip(".").split(".")
            if "samples" in parts and parts.index("samples") + 1 < len(parts) \
                    and parts[parts.index("samples") + 1] in _modality_packages():
                named.append(f"line {node.lineno}: from {'.' * node.level}{node.module}")
    assert not named, named


def test_model_preparations_run_in_their_declared_order():
    # audio's redraw of every convolution first, then images' redraw inside timm towers, which wins
    # there: the order _build had before the declarations held it
    preparing = [modality.label for modality in sorted(MODALITIES, key=lambda modality: modality.prepare_order)
                 if modality.prepare_model is not None]
    assert preparing == ["audio", "images"]


def test_a_row_field_without_what_fills_it_is_refused():
    import dataclasses

    from patcher.samples.images.modality import IMAGES

    with pytest.raises(TypeError, match="path_field and has_path are declared together"):
        dataclasses.replace(IMAGES, has_path=None)


def test_a_text_alone_stage_a_modality_names_is_counted_and_shown(monkeypatch):
    from patcher.coverage import report
    from patcher.coverage.check import Attempt, CoverageRow

    monkeypatch.setattr(report, "TEXT_ALONE_NAMED", {**report.TEXT_ALONE_NAMED, "needs state": "need a state"})
    rows = [CoverageRow(name, built=True, text=Attempt("text", stage=stage, error="TypeError: x"))
            for name, stage in (("A", "needs images"), ("B", "needs state"), ("C", "needs state"))]
    assert "text: ran 0 (1 need images, 2 need a state), traced 0" in report.summary(rows)
    line = next(line for line in report.markdown(rows).splitlines() if line.startswith("| B |"))
    assert [cell.strip() for cell in line.split(" | ")][1:3] == ["yes", "needs state"], line
