"""Model collections register through patcher.registry.plugins: the patcher finds the zoo without importing it by name."""

from __future__ import annotations

import pytest
import transformers

from patcher.registry import plugins


def test_the_zoo_is_declared_in_pyproject_and_found():
    assert "zoo" in plugins.declared_collections()


def test_a_checkout_declaration_is_read(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n[project.entry-points."tracezoo.models"]\nmine = "my_models:setup"\n')
    assert plugins._declared_in_checkout(pyproject) == ["my_models"]
    assert plugins._declared_in_checkout(tmp_path / "missing.toml") == []


def test_loading_the_zoo_registers_its_recipes_and_drop_ins():
    from zoo._entries import ENTRIES, recipe

    for entry in ENTRIES:
        defaults = plugins.tracing_defaults(entry)
        assert defaults is not None and defaults.collection == "zoo"
        assert defaults.targets == tuple(recipe(entry).default_targets)
        assert defaults.ignore == tuple(recipe(entry).default_ignore)
    drop_in = plugins.drop_in_for(transformers.LlavaForConditionalGeneration)
    assert drop_in is not None and drop_in.name == "TraceableLlavaForConditionalGeneration"
    import zoo

    assert plugins.drop_in_for(zoo.TraceableLlavaForConditionalGeneration) is None  # already the drop-in
    assert plugins.drop_in_for(transformers.LlamaForCausalLM) is None
    assert plugins.tracing_defaults("llama") is None


def test_a_declared_collection_that_cannot_be_imported_is_reported(monkeypatch):
    monkeypatch.setattr(plugins, "declared_collections", lambda: ["tracezoo_no_such_collection"])
    monkeypatch.setattr(plugins, "_loaded", False)
    with pytest.warns(RuntimeWarning, match="tracezoo_no_such_collection"):
        plugins.load_collections()
