"""Tracing leaves the model as it was: parameters, buffers, config and attributes."""

import copy

import torch
from torch import nn

from patcher import trace_subgraphs
from patcher.samples import text_sample
from tiny_models import decoder_layer, tiny_model


def snapshot(model: nn.Module) -> dict:
    return {
        "class": type(model),
        "state": {key: value.clone() for key, value in model.state_dict().items()},
        "tensor_ids": {name: id(tensor) for name, tensor in [*model.named_parameters(), *model.named_buffers()]},
        "attrs": {
            name: {key: value for key, value in vars(module).items()
                   if key not in ("_parameters", "_buffers", "_modules")}
            for name, module in model.named_modules()
        },
        "config": copy.deepcopy(model.config.to_dict()),
        "config_vars": dict(vars(model.config)),
    }


def assert_same(before, after):
    assert before["class"] is after["class"]
    assert before["state"].keys() == after["state"].keys()
    for key in before["state"]:
        torch.testing.assert_close(after["state"][key], before["state"][key], rtol=0, atol=0)
    assert before["tensor_ids"] == after["tensor_ids"]
    assert before["attrs"].keys() == after["attrs"].keys()
    for name in before["attrs"]:
        assert before["attrs"][name].keys() == after["attrs"][name].keys(), name
        for key, value in before["attrs"][name].items():
            assert after["attrs"][name][key] is value, (name, key)
    assert before["config"] == after["config"]
    assert before["config_vars"].keys() == after["config_vars"].keys()


def test_transformers_models_unchanged():
    for name in ["LlamaForCausalLM", "Gemma3ForCausalLM", "DeepseekV3ForCausalLM"]:
        model = tiny_model(name)
        assert model.config.use_cache is True  # the tracer turns it off while tracing only
        before = snapshot(model)
        trace_subgraphs(model, text_sample(model.config, seq_len=5), [decoder_layer(name)])
        assert_same(before, snapshot(model))
        assert model.config.use_cache is True


class WritesStateWhileRunning(nn.Module):
    """Like Qwen2-VL's ``self.rope_deltas``: forward stores a value on the module."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
        self.last_seen = None
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        self.last_seen = x
        self.calls = getattr(self, "calls", 0) + 1
        for layer in self.layers:
            x = layer(x) * self.scale
        return x


def test_state_written_during_tracing_is_restored():
    model = WritesStateWhileRunning()
    before = snapshot_plain(model)
    subgraphs = trace_subgraphs(model, {"x": torch.ones(1, 2)}, ["Linear"], ignore=[])
    assert snapshot_plain(model) == before
    assert model.last_seen is None and not hasattr(model, "calls")
    assert len(subgraphs) == 3


def snapshot_plain(model):
    return {key: value for key, value in vars(model).items() if key not in ("_parameters", "_buffers", "_modules")}


class SwapsSubmodulesWhileRunning(nn.Module):
    """Like BigBird's set_attention_type: forward replaces a child of a layer that runs later."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 2))])

    def forward(self, x):
        self.layers[1][0] = nn.Identity()
        for layer in self.layers:
            x = layer(x)
        return x


def test_submodule_swapped_while_tracing_is_an_error_and_undone():
    from patcher import StateChangeError

    model = SwapsSubmodulesWhileRunning()
    child = model.layers[1][0]
    try:
        trace_subgraphs(model, {"x": torch.ones(1, 2)}, ["Sequential"], ignore=[])
    except StateChangeError as error:
        assert "layers.1.0: submodule replaced by Identity" in str(error)
    else:
        raise AssertionError("expected StateChangeError")
    assert model.layers[1][0] is child
