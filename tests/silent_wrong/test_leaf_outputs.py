"""A module the graph calls as a whole returns what it returned in eager: None items stay None.

While tracing, a sequential target is one graph value, so every item read from its output was a
value too: `output_g if output_g is not None else output_h` after XLNet's layers (which return
`(output_h, None)`) took `output_g`, and the chain failed in `dropout(None)`. A branch that does
not fail would have computed something else. The trace now follows eager's structure, and the
graph refuses a run whose leaf outputs another structure than the one it was traced with.
"""

import pytest
import torch
import transformers
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

from patcher import LeafOutputError, load_traceable, run_subgraphs, trace_subgraphs
from patcher.verify import run_eagerly


class _PairLayer(nn.Module):
    """Returns ``(hidden, None)``, as XLNet's layers do without a target mapping."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, hidden):
        return self.linear(hidden), None


class _SometimesNoneLayer(_PairLayer):
    """The second item is None for a negative input only: the structure depends on the values."""

    def forward(self, hidden):
        hidden = self.linear(hidden)
        return hidden, (None if bool(hidden.sum() < 0) else 2 * hidden)


class _PoolingLayer(_PairLayer):
    def forward(self, hidden):
        return BaseModelOutputWithPooling(last_hidden_state=self.linear(hidden), pooler_output=None)


class _TestsTheSecondItem(nn.Module):
    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer
        self.dropout = nn.Dropout(0.0)

    def forward(self, inputs_embeds):
        first, second = self.layer(inputs_embeds)[:2]
        return {"logits": self.dropout(second if second is not None else first)}


class _TestsAField(_TestsTheSecondItem):
    def forward(self, inputs_embeds):
        output = self.layer(inputs_embeds)
        pooled = output.pooler_output
        return {"logits": self.dropout(pooled if pooled is not None else output.last_hidden_state)}


def _equal_to_eager(model: nn.Module, sample: dict, targets: list[str]) -> None:
    subgraphs = trace_subgraphs(model, sample, targets)
    with torch.no_grad():
        expected = run_eagerly(model, sample)["logits"]
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], expected)


def test_an_item_none_in_eager_is_none_in_the_graph():
    torch.manual_seed(0)
    _equal_to_eager(_TestsTheSecondItem(_PairLayer()).eval(), {"inputs_embeds": torch.randn(2, 4)}, ["_PairLayer"])


def test_a_model_output_field_none_in_eager_is_none_in_the_graph():
    torch.manual_seed(0)
    _equal_to_eager(_TestsAField(_PoolingLayer()).eval(), {"inputs_embeds": torch.randn(2, 4)}, ["_PoolingLayer"])


def _sometimes_none_model() -> nn.Module:
    model = _TestsTheSecondItem(_SometimesNoneLayer()).eval()
    with torch.no_grad():
        model.layer.linear.weight.copy_(torch.eye(4))
        model.layer.linear.bias.zero_()
    return model


def test_a_run_whose_item_is_none_where_the_trace_had_a_value_is_refused():
    model = _sometimes_none_model()
    subgraphs = trace_subgraphs(model, {"inputs_embeds": torch.ones(2, 4)}, ["_SometimesNoneLayer"])
    with pytest.raises(LeafOutputError, match=r"module 'layer' returned \(value, None\) when the graph ran, but "
                                              r"\(value, value\) when it was traced"):
        run_subgraphs(model, subgraphs, {"inputs_embeds": -torch.ones(2, 4)})


def test_a_run_whose_item_is_a_value_where_the_trace_had_none_is_refused():
    # traced on the branch that returns the first item: run with the second one present, the graph
    # would return the first where eager returns the second, without a word
    model = _sometimes_none_model()
    subgraphs = trace_subgraphs(model, {"inputs_embeds": -torch.ones(2, 4)}, ["_SometimesNoneLayer"])
    positive = {"inputs_embeds": torch.ones(2, 4)}
    assert torch.equal(run_subgraphs(model, subgraphs, {"inputs_embeds": -2 * torch.ones(2, 4)})["logits"],
                       model(inputs_embeds=-2 * torch.ones(2, 4))["logits"])
    with pytest.raises(LeafOutputError, match=r"returned \(value, value\) when the graph ran, but \(value, None\)"):
        run_subgraphs(model, subgraphs, positive)


def test_a_tiny_xlnet_chain_equals_eager():
    config = transformers.XLNetConfig(vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=37,
                                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = load_traceable(transformers.XLNetLMHeadModel)(config).eval()
    sample = {"input_ids": torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(0)),
              "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    subgraphs = trace_subgraphs(model, sample, ["XLNetLayer"])
    assert [subgraph.targets for subgraph in subgraphs] == [["transformer.layer.0"], ["transformer.layer.1"], []]
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits)


def test_the_tracers_own_eager_run_is_no_batch_for_the_models_hooks():
    # A calibration hook (GPTQ's Hessian, an activation recorder) registered before tracing must see
    # the batches the user runs, not the eager run the tracer makes to learn the layer's structure:
    # that run would be one more sample in the statistics, without a word.
    torch.manual_seed(0)
    model = _TestsTheSecondItem(_PairLayer()).eval()
    seen = []
    model.layer.register_forward_hook(lambda module, args, output: seen.append(args[0].clone()))
    sample = {"inputs_embeds": torch.randn(2, 4)}
    subgraphs = trace_subgraphs(model, sample, ["_PairLayer"])
    assert seen == []
    with torch.no_grad():
        run_subgraphs(model, subgraphs, sample)
    assert len(seen) == 1 and len(model.layer._forward_hooks) == 1
