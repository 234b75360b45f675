"""Zoo recipes are declared (``zoo._recipe.Recipe``), validated when loaded, and named by what
they generate; one freshness check serves ``patcher patch --check`` and ``scripts/check_zoo``."""

import json
import re
import shutil
import textwrap
import uuid
from pathlib import Path

import pytest

from patcher.rewrite.file_header import split_header
from zoo._entries import ENTRIES, ZOO_DIR, recipe, recipe_file
from zoo._generate import regenerate_command
from zoo._recipe import Recipe, RecipeError, load_recipe

VALID = """
from zoo._recipe import RealConfig, Recipe, SampleLayout

def _noop(*args, **kwargs):
    return None

RECIPE = Recipe(
    model_type="llava",
    model_class="LlavaForConditionalGeneration",
    source_module="transformers.models.llava.modeling_llava",
    exports={"TraceableLlavaForConditionalGeneration": "LlavaForConditionalGeneration"},
    patch_targets=["LlamaDecoderLayer"],
    default_targets=["LlamaDecoderLayer"],
    default_ignore=["get_image_features"],
    tiny_config=_noop, tiny_model=_noop, build_sample=_noop, example_image_sizes=_noop,
    sample_layout=SampleLayout(image_token="image_token_index", image_token_count=_noop, pixels="fixed_size"),
    real_configs=[RealConfig("llava-1.5-7b-hf", text_subgraphs=33, multimodal_subgraphs=33,
                             layers={"LlamaDecoderLayer": 32}, image_span=576,
                             sample_shapes={"pixel_values": [4, 3, 336, 336]})],
)
"""


def write_recipe(tmp_path, monkeypatch, text):
    """``text`` as ``<fresh package>/recipe.py`` importable from ``tmp_path``; its module name and path."""
    package = f"tz_recipe_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    path = tmp_path / package / "recipe.py"
    path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{package}.recipe", path


def test_a_valid_recipe_loads_with_its_path_and_tuples(tmp_path, monkeypatch):
    module, path = write_recipe(tmp_path, monkeypatch, VALID)
    loaded = load_recipe(module)
    assert isinstance(loaded, Recipe) and loaded.path == str(path)
    assert loaded.patch_targets == ("LlamaDecoderLayer",) and loaded.patch_ignore == ()
    assert loaded.targets(multimodal=True) == loaded.targets(multimodal=False) == ("LlamaDecoderLayer",)
    assert loaded.traceable_class == "TraceableLlavaForConditionalGeneration"
    assert loaded.original_traces == ""
    (real,) = loaded.real_configs
    assert real.sample_shapes == {"pixel_values": (4, 3, 336, 336)}  # shapes frozen to tuples


@pytest.mark.parametrize("change, field", [
    (('patch_targets=["LlamaDecoderLayer"]', 'patch_targets="LlamaDecoderLayer"'), "patch_targets"),
    (('default_ignore=["get_image_features"]', 'default_ignore=["get_image_features", 3]'), "default_ignore"),
    (('default_targets=["LlamaDecoderLayer"]', "default_targets=[]"), "default_targets"),
    (('source_module="transformers.models.llava.modeling_llava"', 'source_module="transformers/llava.py"'),
     "source_module"),
    (('"LlavaForConditionalGeneration"}', '"LlavaModel"}'), "exports"),
    (("build_sample=_noop", "build_sample=None"), "build_sample"),
    (("tiny_model=_noop, ", ""), "tiny_model"),  # missing
    (("tiny_model=_noop, ", "tiny_modle=_noop, "), "tiny_modle"),  # misspelt
    (("RECIPE = Recipe(", "OTHER = Recipe("), "RECIPE"),
    (('pixels="fixed_size"', 'pixels="fixed"'), "sample_layout.pixels"),
    (('image_token="image_token_index"', 'image_token="image token"'), "sample_layout.image_token"),
    (("    sample_layout=SampleLayout(", "    sample_layout=dict("), "sample_layout"),
    (("layers={\"LlamaDecoderLayer\": 32}", "layers={\"LlamaMLP\": 32}"), "real_configs['llava-1.5-7b-hf'].layers"),
    (("image_span=576", "image_span=0"), "real_configs['llava-1.5-7b-hf']"),
    (("real_configs=[RealConfig(", "real_configs=[] if True else [RealConfig("), "real_configs"),  # none
])
def test_a_broken_recipe_names_its_file_and_field(tmp_path, monkeypatch, change, field):
    old, new = change
    assert old in VALID
    module, path = write_recipe(tmp_path, monkeypatch, VALID.replace(old, new, 1))
    with pytest.raises(RecipeError) as info:
        load_recipe(module)
    assert str(path) in str(info.value) and field in str(info.value), str(info.value)


BY_MODULE_NAMES = """
from zoo._recipe import RealConfig, SampleLayout, entry_recipe

def _noop(*args, **kwargs):
    return None

MODEL_TYPE = "llava"
MODEL_CLASS = "LlavaForConditionalGeneration"
VISION_TARGETS = ["CLIPEncoderLayer"]
VISION_IGNORE = []
SAMPLE_LAYOUT = SampleLayout(image_token="image_token_index", image_token_count=_noop, pixels="fixed_size")
tiny_config = tiny_model = build_sample = example_image_sizes = _noop

RECIPE = entry_recipe(
    globals(),
    exports=["LlavaForConditionalGeneration", "LlavaModel"],
    default_targets=["LlamaDecoderLayer"],
    default_ignore=["get_image_features"],
    real_configs=[RealConfig("llava-1.5-7b-hf", text_subgraphs=33, multimodal_subgraphs=33,
                             layers={"LlamaDecoderLayer": 32}, image_span=576,
                             sample_shapes={"pixel_values": [4, 3, 336, 336]})],
)
"""


def test_entry_recipe_reads_the_names_every_recipe_module_defines(tmp_path, monkeypatch):
    """``entry_recipe(globals(), ...)``: the fields every recipe wires the same way come from the module's
    names, the generated module's exports are ``Traceable<class>``, the source module is transformers' of the
    model type and the patch targets are the targets; only what is the entry's own is spelt out."""
    module, path = write_recipe(tmp_path, monkeypatch, BY_MODULE_NAMES)
    loaded = load_recipe(module)
    assert loaded.path == str(path) and loaded.model_type == "llava" and loaded.vision_targets == ("CLIPEncoderLayer",)
    assert loaded.exports == {"TraceableLlavaForConditionalGeneration": "LlavaForConditionalGeneration",
                              "TraceableLlavaModel": "LlavaModel"}
    assert loaded.source_module == "transformers.models.llava.modeling_llava"
    assert loaded.patch_targets == ("LlamaDecoderLayer",) and loaded.sample_layout.pixels == "fixed_size"


@pytest.mark.parametrize("change, field", [
    (("SAMPLE_LAYOUT = SampleLayout(", "LAYOUT = SampleLayout("), "SAMPLE_LAYOUT"),
    (('exports=["LlavaForConditionalGeneration", "LlavaModel"]', 'exports="LlavaForConditionalGeneration"'),
     "exports"),
    (('exports=["LlavaForConditionalGeneration", "LlavaModel"]', 'exports=["LlavaModel"]'), "exports"),
    (('    default_ignore=["get_image_features"],\n', ""), "default_ignore"),
])
def test_an_entry_recipe_missing_a_name_names_its_file_and_the_name(tmp_path, monkeypatch, change, field):
    old, new = change
    assert old in BY_MODULE_NAMES
    module, path = write_recipe(tmp_path, monkeypatch, BY_MODULE_NAMES.replace(old, new, 1))
    with pytest.raises(RecipeError) as info:
        load_recipe(module)
    assert str(path) in str(info.value) and field in str(info.value), str(info.value)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_ignore_lists_hold_only_additions_to_the_defaults(entry):
    # The recipes' lists are additions to patcher.DEFAULT_IGNORE (their comments say why each entry
    # is needed on top of it): an entry the defaults already hold would be a reason that is no reason.
    from patcher import DEFAULT_IGNORE

    spec = recipe(entry)
    assert not set(spec.default_ignore) & set(DEFAULT_IGNORE), spec.default_ignore
    assert not set(spec.vision_ignore) & set(DEFAULT_IGNORE), spec.vision_ignore


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_generated_files_name_the_recipe_and_the_command(entry):
    spec = recipe(entry)
    code = (ZOO_DIR / entry / f"{spec.source_stem}.py").read_text(encoding="utf-8")
    fields, body = split_header(code)
    assert fields["recipe"] == recipe_file(entry) == f"zoo/{entry}/recipe.py"
    assert fields["regenerate with"] == regenerate_command(entry) == f"bash scripts/check_zoo --fix {entry}"
    assert (ZOO_DIR.parent / recipe_file(entry)).is_file() and (ZOO_DIR.parent / "scripts" / "check_zoo").is_file()
    manifest = json.loads((ZOO_DIR / entry / f"{spec.source_stem}.manifest.json").read_text(encoding="utf-8"))
    assert manifest["patch_targets"] == list(spec.patch_targets)
    assert manifest["patch_ignore"] == list(spec.patch_ignore)
    # upstream's "edit modular_x.py instead" is wrong for this copy
    assert "Do NOT edit this file manually" not in body and "One of our CI enforces this" not in body


def test_modular_banner_is_marked_where_upstream_has_one():
    import importlib
    import inspect

    module = importlib.import_module(recipe("gemma3").source_module)
    upstream = inspect.getsource(module)
    assert "modular_gemma3.py file directly" in upstream  # the note this test is about still exists upstream
    body = split_header((ZOO_DIR / "gemma3" / "modeling_gemma3.py").read_text(encoding="utf-8"))[1]
    assert "upstream note, rewritten by the tracezoo patcher" in body and "modular_gemma3.py" in body
    # the note takes the banner's lines exactly, so the lines below keep upstream's numbers
    assert body.index("# Copyright") and body[:body.index("# Copyright")].count("\n") == \
        upstream[:upstream.index("# Copyright")].count("\n")


def test_check_zoo_reports_another_transformers_once(monkeypatch, tmp_path, capsys):
    from zoo import _loader, check

    stale = bool(check.stale_files(["llava"]))  # generation sees the transformers really installed
    monkeypatch.setenv("TRACEZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(_loader, "installed_transformers_version", lambda: "5.99.0")
    committed = _loader.committed_manifest("llava")["transformers_version"]
    assert check.main(["llava"]) == int(stale)
    err = capsys.readouterr().err
    assert err.count("is installed") == 1, err
    assert f"transformers {committed}, but 5.99.0 is installed" in err
    assert str(tmp_path / "zoo" / "5.99.0") in err  # where the import-time regeneration goes


def test_no_version_note_when_versions_match(monkeypatch):
    from zoo import _loader, check

    committed = {_loader.committed_manifest(entry)["transformers_version"] for entry in ENTRIES}
    assert len(committed) == 1  # one pin for the whole zoo
    monkeypatch.setattr(_loader, "installed_transformers_version", lambda: committed.pop())
    assert check.version_note(list(ENTRIES)) is None


def test_zoo_regenerates_for_the_installed_transformers(monkeypatch, tmp_path, capsys):
    """``check_zoo --regenerates``, CI's zoo check on every transformers of its matrix: each entry
    generated and imported for the installed version; on the pin, every committed rewrite applies."""
    from zoo import _loader, check

    monkeypatch.setenv("TRACEZOO_CACHE", str(tmp_path))
    installed = _loader.installed_transformers_version()
    assert check.main(["--regenerates"]) == 0
    out = capsys.readouterr().out
    for entry in ENTRIES:
        assert f"{entry}: regenerated for transformers {installed} " in out, out
        assert str(_loader.regeneration_dir(entry, installed)) in out
    if all(_loader.committed_manifest(entry)["transformers_version"] == installed for entry in ENTRIES):
        assert "no longer applies" not in out, out
    assert out.rstrip().endswith(f"zoo regenerates for transformers {installed} ({len(ENTRIES)} entries)")


def test_regenerates_lists_vanished_rewrites_and_fails_only_for_an_entry_it_cannot_import(monkeypatch, tmp_path,
                                                                                          capsys):
    from zoo import _generate, check

    monkeypatch.setenv("TRACEZOO_CACHE", str(tmp_path))
    real_generate = _generate.generate
    broken = {"llava"}

    def generate(entry):
        generated = real_generate(entry)
        generated.result.manifest["rewrites"] = []  # as if upstream had changed under every rewrite
        if entry in broken:
            generated.result.code = "raise ImportError('renamed upstream')\n"
        return generated

    monkeypatch.setattr(_generate, "generate", generate)
    assert check.main(["--regenerates", "gemma3", "llava"]) == 1
    captured = capsys.readouterr()
    assert "gemma3: regenerated for transformers" in captured.out
    assert re.search(r"committed rewrite no longer applies: TZ102 _check_n_image_tokens "
                     r"\(transformers/models/gemma3/modeling_gemma3\.py:\d+", captured.out), captured.out
    assert "llava: FAILED" in captured.err and "renamed upstream" in captured.err
    assert "1 of 2 zoo entries cannot be regenerated" in captured.err
    broken.clear()  # vanished rewrites alone are no failure
    assert check.main(["--regenerates", "llava"]) == 0


def test_a_new_entry_without_generated_files_gets_no_version_note(monkeypatch):
    """``check_zoo --fix <new entry>`` must get to generating: its manifest does not exist yet."""
    from zoo import _loader, check

    def committed_manifest(entry):
        if entry == "llava":
            raise FileNotFoundError(f"zoo/{entry}/modeling_{entry}.manifest.json")
        return {"transformers_version": "5.0.0"}

    monkeypatch.setattr(_loader, "committed_manifest", committed_manifest)
    note = check.version_note(["llava", "gemma3"])
    assert note is not None and note.startswith("zoo: gemma3 committed for transformers 5.0.0")


def test_patch_check_is_the_zoo_check(tmp_path, capsys):
    """``patcher patch --check`` with the recipe's options agrees with scripts/check_zoo, both ways."""
    from patcher.cli import main
    from zoo._generate import generate
    from zoo.check import stale_files

    spec = recipe("gemma3")
    names = (f"{spec.source_stem}.py", f"{spec.source_stem}.manifest.json")
    for name in names:
        shutil.copy(ZOO_DIR / "gemma3" / name, tmp_path / name)
    command = ["patch", spec.source_module, "-o", str(tmp_path), "--targets", *spec.patch_targets, "--check"]
    # the committed files: fresh for both on the pinned transformers, stale for both on another
    committed_stale = any(file.path.name in names for file in stale_files(["gemma3"]))
    assert main(command) == int(committed_stale)
    generated = generate("gemma3").files
    for name in names:  # what this transformers generates: fresh for both
        (tmp_path / name).write_text(generated[name], encoding="utf-8")
    assert main(command) == 0
    copy = tmp_path / f"{spec.source_stem}.py"
    copy.write_text(copy.read_text(encoding="utf-8") + "# an edit\n", encoding="utf-8")
    capsys.readouterr()
    assert main(command) == 1
    captured = capsys.readouterr()
    assert "+# an edit" not in captured.out and "-# an edit" in captured.out  # the diff, on disk -> generated
    assert f"regenerate with: {regenerate_command('gemma3')}" in captured.err


def test_entries_are_the_folders_with_a_recipe(tmp_path):
    from zoo._entries import discover_entries

    for folder in ("beta", "alpha", "notes", "__pycache__"):
        (tmp_path / folder).mkdir()
    for entry in ("beta", "alpha"):
        (tmp_path / entry / "recipe.py").write_text("")
    (tmp_path / "notes" / "README.md").write_text("")
    (tmp_path / "recipe.py").write_text("")  # a file, not a folder: no entry
    assert discover_entries(tmp_path, "pkg") == {"alpha": "pkg.alpha.recipe", "beta": "pkg.beta.recipe"}
    assert set(ENTRIES) == {path.parent.name for path in ZOO_DIR.glob("*/recipe.py")}


def test_readme_zoo_list_is_generated_between_its_markers():
    from zoo._generate import ZOO_LIST_END, ZOO_LIST_START, with_zoo_list

    readme = f"intro\n- zoo:\n  {ZOO_LIST_START}\n  `TraceableGone`\n  {ZOO_LIST_END}\nrest\n"
    generated = with_zoo_list(readme)
    assert generated.startswith(f"intro\n- zoo:\n  {ZOO_LIST_START}\n  `")  # the marker's indent kept
    assert generated.endswith(f"`\n  {ZOO_LIST_END}\nrest\n") and "TraceableGone" not in generated
    assert all(f"`{recipe(entry).traceable_class}`" in generated for entry in ENTRIES)
    with pytest.raises(ValueError, match="marker"):
        with_zoo_list("a README without the markers\n")


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_real_configs_are_bundled_with_a_readme_row(entry):
    import patcher

    configs = Path(patcher.__file__).parent / "models" / "configs"
    table = (configs / "README.md").read_text(encoding="utf-8")
    for real in recipe(entry).real_configs:
        assert (configs / f"{real.name}.json").is_file(), real.name
        assert f"\n| {real.name} |" in table, f"patcher/models/configs/README.md has no row for {real.name}"
