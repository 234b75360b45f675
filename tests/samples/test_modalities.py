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
