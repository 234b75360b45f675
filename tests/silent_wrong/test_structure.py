"""The public API: every exported name imports; subgraphs refuse a model of another structure."""

import importlib

import pytest

import patcher


@pytest.mark.parametrize("name", patcher.__all__)
def test_every_exported_name_imports_through_the_public_import(name):
    namespace: dict = {}
    exec(f"from patcher import {name}", namespace)
    assert namespace[name] is getattr(patcher, name)


@pytest.mark.parametrize("name", patcher.LAZY_EXPORTS)
def test_lazy_exports_are_listed_and_resolve_to_their_defining_module(name):
    assert name in patcher.__all__
    value = getattr(importlib.import_module("patcher"), name)
    assert callable(value) and value.__name__ == name


@pytest.mark.parametrize("name", ["load_traceable", "attempt_trace", "patch_source", "patch_file"])
def test_lazily_exported_functions_import_from_patcher(name):
    namespace: dict = {}
    exec(f"from patcher import {name}", namespace)
    assert callable(namespace[name])


# -- structure: subgraphs run on the model (structure) they were traced from -------------------

import torch  # noqa: E402

from patcher import ModelMismatchError, run_subgraphs, trace_graph, trace_subgraphs  # noqa: E402
from patcher.models import build_model  # noqa: E402
from patcher.samples import text_sample  # noqa: E402
from tiny_models import tiny_model  # noqa: E402

TARGETS = ["LlamaDecoderLayer"]


@pytest.fixture(scope="module")
def two_layers():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    sample = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)
    return model, sample, trace_subgraphs(model, sample, TARGETS)


def test_subgraphs_of_a_two_layer_model_refuse_a_three_layer_model(two_layers):
    _, sample, subgraphs = two_layers
    bigger = tiny_model("LlamaForCausalLM", num_hidden_layers=3)
    # layer 2 used to be skipped without a word
    with pytest.raises(ModelMismatchError, match=r"model.layers has 3 children, the graph was traced with 2; "
                                                 r"it has '2', which the graph never calls.*trace the model you will run"):
        run_subgraphs(bigger, subgraphs, sample)
    with pytest.raises(ModelMismatchError, match="model.layers has 3 children"):
        subgraphs[0].forward(bigger, **sample)


def test_a_whole_graph_refuses_a_model_with_fewer_layers():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=3)
    sample = text_sample(model.config, batch_size=1, seq_len=4)
    traced = trace_graph(model, sample, TARGETS)
    with pytest.raises(ModelMismatchError, match=r"it lacks '2'"):
        traced.forward(tiny_model("LlamaForCausalLM", num_hidden_layers=2), **sample)


def test_a_model_of_other_sizes_is_named_by_shape(two_layers):
    _, sample, subgraphs = two_layers
    wider = tiny_model("LlamaForCausalLM", num_hidden_layers=2, hidden_size=64)
    with pytest.raises(ModelMismatchError, match=r"'model.embed_tokens.weight' has shape \(96, 64\), the graph was "
                                                 r"traced with \(96, 32\)"):
        run_subgraphs(wider, subgraphs, sample)


def test_a_graph_traced_on_meta_runs_on_the_real_model_of_the_same_config(two_layers):
    model, sample, _ = two_layers
    meta = build_model(type(model), model.config, device="meta")
    subgraphs = trace_subgraphs(meta, {name: value.to("meta") for name, value in sample.items()}, TARGETS)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits)


def test_the_structure_check_is_cached_per_model_and_redone_when_a_container_grows():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=3)
    sample = text_sample(model.config, batch_size=1, seq_len=4)
    subgraphs = trace_subgraphs(model, sample, TARGETS)
    record = subgraphs[0].record
    assert all(subgraph.record is record for subgraph in subgraphs)  # one record per trace
    run_subgraphs(model, subgraphs, sample)
    assert model in record._verified
    model.model.layers.append(tiny_model("LlamaForCausalLM", num_hidden_layers=1).model.layers[0])
    with pytest.raises(ModelMismatchError, match=r"model.layers has 4 children"):
        run_subgraphs(model, subgraphs, sample)
