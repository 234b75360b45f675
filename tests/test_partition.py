"""The partition: boundaries, several targets per subgraph, intermediates and meta models."""

import math

import pytest
import torch
from torch import nn

from patcher import run_subgraphs, trace_subgraphs
from patcher.models import build_model, load_config
from patcher.samples import text_sample
from tiny_models import tiny_model


@pytest.mark.parametrize("per_subgraph", [1, 2, 3, 4])
def test_targets_per_subgraph(per_subgraph):
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=4)
    sample = text_sample(model.config, batch_size=2, seq_len=6, left_padding=1)
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"], targets_per_subgraph=per_subgraph)
    assert len(subgraphs) == math.ceil(4 / per_subgraph) + 1
    layers = [f"model.layers.{index}" for index in range(4)]
    expected = [layers[start:start + per_subgraph] for start in range(0, 4, per_subgraph)] + [[]]
    assert [subgraph.targets for subgraph in subgraphs] == expected
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits,
                                   rtol=0, atol=0)


def test_targets_per_subgraph_must_be_positive():
    model = tiny_model("LlamaForCausalLM")
    with pytest.raises(ValueError, match="targets_per_subgraph must be >= 1"):
        trace_subgraphs(model, text_sample(model.config), ["LlamaDecoderLayer"], targets_per_subgraph=0)


def test_intermediates_flow_and_are_dropped_after_their_last_reader():
    model = tiny_model("MistralForCausalLM", num_hidden_layers=4)
    sample = text_sample(model.config, batch_size=1, seq_len=5)
    subgraphs = trace_subgraphs(model, sample, ["MistralDecoderLayer"])
    available = set(sample)
    for index, subgraph in enumerate(subgraphs):
        assert set(subgraph.input_names) <= available, index
        later_inputs = {name for later in subgraphs[index + 1:] for name in later.input_names}
        # a consumed name is read by no later subgraph; a kept one is
        assert not set(subgraph.consumed_names) & later_inputs
        assert set(subgraph.input_names) - set(subgraph.consumed_names) <= later_inputs
        available = (available - set(subgraph.consumed_names)) | set(subgraph.output_names)
    # only the hidden states flow between layer subgraphs, plus the shared mask and rotary values
    assert all(len(subgraph.output_names) <= 4 for subgraph in subgraphs)
    assert subgraphs[-1].output_names == ["logits"]


def test_subgraph_forward_names_a_missing_input():
    model = tiny_model("LlamaForCausalLM")
    subgraphs = trace_subgraphs(model, text_sample(model.config), ["LlamaDecoderLayer"])
    with pytest.raises(KeyError, match="subgraph 0 needs 'attention_mask'"):
        subgraphs[0].forward(model, input_ids=torch.zeros(1, 3, dtype=torch.long))


def test_subgraph_modules_are_the_real_modules_called():
    model = tiny_model("LlamaForCausalLM")
    subgraphs = trace_subgraphs(model, text_sample(model.config), ["LlamaDecoderLayer"])
    assert subgraphs[0].modules == ["model.embed_tokens", "model.rotary_emb", "model.layers.0"]
    assert subgraphs[-1].modules == ["model.norm", "lm_head"]
    # hooks on the real layer fire when the subgraph runs
    seen = []
    handle = model.model.layers[1].register_forward_hook(lambda module, args, output: seen.append(module))
    run_subgraphs(model, subgraphs, text_sample(model.config))
    handle.remove()
    assert seen == [model.model.layers[1]]


def test_real_size_llama_3_8b_on_meta_traces_into_33_subgraphs():
    config = load_config("Meta-Llama-3-8B")
    model = build_model(__import__("transformers").LlamaForCausalLM, config, device="meta")
    assert sum(parameter.numel() for parameter in model.parameters()) > 8e9
    subgraphs = trace_subgraphs(model, text_sample(config, device="meta"), ["LlamaDecoderLayer"])
    assert len(subgraphs) == 33
    assert [subgraph.targets for subgraph in subgraphs[:-1]] == [[f"model.layers.{i}"] for i in range(32)]


class Chain(nn.Module):
    def __init__(self, length):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(length)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_long_synthetic_chain():
    model = Chain(200)
    subgraphs = trace_subgraphs(model, {"x": torch.randn(1, 2)}, ["Linear"], ignore=[])
    assert len(subgraphs) == 201
    x = torch.randn(3, 2)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, {"x": x})["output"], model(x), rtol=0, atol=0)


class InPlaceAssignment(nn.Module):
    """Writes into a traced tensor by index, as mask and position code often does."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

    def forward(self, x):
        x = self.layers[0](x)
        scaled = x * 2
        scaled[:, 0] = 0.0
        return self.layers[1](scaled + x)


def test_in_place_indexed_assignment_is_recorded_in_order():
    model = InPlaceAssignment()
    subgraphs = trace_subgraphs(model, {"x": torch.randn(2, 3)}, ["Linear"], ignore=[])
    assert "setitem" in subgraphs[1].code
    x = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, {"x": x})["output"], model(x), rtol=0, atol=0)
