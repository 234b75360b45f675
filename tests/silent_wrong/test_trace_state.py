"""Trace-time state that used to make graphs compute other numbers than eager (issue 12).

- ``output_hidden_states``/``output_attentions``: transformers collects them with hooks on the
  decoder layers (or inside them); the graph calls those as single modules, so it returned empty
  tuples. Now ``OutputCaptureError`` for hooks inside a called module; hidden-state hooks on the
  called module itself are replayed on its graph value, and hooks on modules the tracer walks
  through are traced: either way the values are the eager ones.
- Hooks on modules the tracer walks through (or on the root) were baked into the graph, or never
  ran; hooks added to them after tracing never ran. Now ``HookError``, at trace or run time.
"""

from __future__ import annotations

import pytest
import torch

from patcher import HookError, OutputCaptureError, run_subgraphs, trace_graph, trace_subgraphs
from tiny_models import decoder_layer, tiny_model

MODELS = ["LlamaForCausalLM", "Qwen2ForCausalLM"]
LAYERS = r"re:model\.layers\.\d+$"
MLPS = r"re:model\.layers\.\d+\.mlp$"


def _sample(seed: int = 0, length: int = 5):
    return {"input_ids": torch.randint(0, 96, (2, length), generator=torch.Generator().manual_seed(seed))}


def _eager_attention(name: str):
    model = tiny_model(name)
    model.config._attn_implementation = "eager"  # output_attentions needs eager attention
    return model


# -- output_hidden_states / output_attentions -----------------------------------------------------

@pytest.mark.parametrize("name", MODELS)
def test_output_attentions_in_config_is_refused_when_layers_are_leaves(name):
    # The attention capture hooks sit inside the layers, which the graph calls as single modules.
    model = _eager_attention(name)
    model.config.output_attentions = True
    with pytest.raises(OutputCaptureError) as caught:
        trace_graph(model, _sample(), [decoder_layer(name)])
    message = str(caught.value)
    assert "output_attentions" in message and "empty" in message and "model.config.output_attentions = False" in message
    assert "model.layers.0" in message and caught.value.key == "attentions"


@pytest.mark.parametrize("name", MODELS)
def test_hidden_states_captured_on_leaf_layers_are_replayed_and_equal_eager(name):
    # The hidden-state hook sits on the layer the graph calls: it is replayed on the call's graph
    # value while tracing (it used to leave `hidden_states` empty), in the graph and in the chain.
    model = tiny_model(name)
    model.config.output_hidden_states = True
    traced = trace_graph(model, _sample(), [decoder_layer(name)])
    subgraphs = trace_subgraphs(model, _sample(), [decoder_layer(name)])
    sample = _sample(seed=3, length=7)
    want = model(**sample).hidden_states
    assert len(want) == model.config.num_hidden_layers + 1
    torch.testing.assert_close(traced(model, **sample)["hidden_states"], want, rtol=0, atol=0)
    torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["hidden_states"], want, rtol=0, atol=0)


@pytest.mark.parametrize("name", MODELS)
def test_output_flag_in_sample_is_refused(name):
    model = _eager_attention(name)
    with pytest.raises(OutputCaptureError, match="output_attentions"):
        trace_graph(model, {**_sample(), "output_attentions": True}, LAYERS)
    # False is a choice made while tracing, not a graph input
    traced = trace_graph(model, {**_sample(), "output_hidden_states": False}, LAYERS)
    torch.testing.assert_close(traced(model, **_sample(1))["logits"], model(**_sample(1)).logits)


@pytest.mark.parametrize("name", MODELS)
def test_hidden_states_collected_on_traced_through_layers_equal_eager(name):
    # Targets inside the decoder layers: the layers are traced through, so their capture hooks run
    # while tracing and the graph returns the real hidden states.
    model = tiny_model(name)
    model.config.output_hidden_states = True
    traced = trace_graph(model, _sample(), MLPS)
    sample = _sample(seed=3, length=7)
    got = traced(model, **sample)["hidden_states"]
    want = model(**sample).hidden_states
    assert len(got) == len(want) == model.config.num_hidden_layers + 1
    torch.testing.assert_close(got, want)


def test_tracing_leaves_no_capture_hooks_behind():
    # Hooks installed while tracing were kept while their "installed" marker was restored away, so
    # the next eager call installed them again: 7 hidden states instead of 4.
    model = tiny_model("LlamaForCausalLM")
    model.config.output_hidden_states = True
    trace_graph(model, _sample(), MLPS)
    assert len(model(**_sample()).hidden_states) == model.config.num_hidden_layers + 1


# -- hooks on modules the tracer walks through ------------------------------------------------------

def _double(module, args, output):
    return output * 2


def _shift(module, args):
    return (args[0],)


@pytest.mark.parametrize("name", MODELS)
def test_hook_on_traced_through_module_is_refused_at_trace_time(name):
    model = tiny_model(name)
    handle = model.model.norm.register_forward_hook(_double)  # norm is a leaf: fine
    handle_inner = model.model.register_forward_hook(lambda module, args, output: output)
    with pytest.raises(HookError) as caught:
        trace_graph(model, _sample(), LAYERS)
    message = str(caught.value)
    assert "module 'model'" in message and "forward hook" in message and "<lambda>" in message
    assert "baked" in message and "remove" in message.lower() and "sequential target" in message
    handle_inner.remove()
    # With the hook removed, the graph traces, and the leaf's hook runs at run time as in eager.
    traced = trace_graph(model, _sample(), LAYERS)
    torch.testing.assert_close(traced(model, **_sample(2))["logits"], model(**_sample(2)).logits)
    handle.remove()
    torch.testing.assert_close(traced(model, **_sample(2))["logits"], model(**_sample(2)).logits)


def test_hook_on_root_is_refused():
    model = tiny_model("LlamaForCausalLM")
    model.register_forward_pre_hook(_shift)
    with pytest.raises(HookError, match="root model"):
        trace_graph(model, _sample(), LAYERS)


@pytest.mark.parametrize("name", MODELS)
def test_hook_added_after_tracing_to_traced_through_module_is_refused_at_run_time(name):
    model = tiny_model(name)
    traced = trace_graph(model, _sample(), LAYERS)
    subgraphs = trace_subgraphs(model, _sample(), LAYERS)
    handle = model.model.register_forward_hook(_double)
    with pytest.raises(HookError, match="added after tracing") as caught:
        traced(model, **_sample())
    assert "module 'model'" in str(caught.value) and "sequential target" in str(caught.value)
    with pytest.raises(HookError, match="added after tracing"):
        run_subgraphs(model, subgraphs, _sample())
    handle.remove()
    # Hooks on targets (called by the graph) work whenever they are added.
    model.model.layers[1].register_forward_hook(_double)
    want = model(**_sample(4)).logits
    torch.testing.assert_close(traced(model, **_sample(4))["logits"], want)
    torch.testing.assert_close(run_subgraphs(model, subgraphs, _sample(4))["logits"], want)


def test_global_module_hooks_are_refused():
    model = tiny_model("LlamaForCausalLM")
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        with pytest.raises(HookError, match="global"):
            trace_graph(model, _sample(), LAYERS)
    finally:
        handle.remove()
    traced = trace_graph(model, _sample(), LAYERS)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: None)
    try:
        with pytest.raises(HookError, match="global"):
            traced(model, **_sample())
    finally:
        handle.remove()
