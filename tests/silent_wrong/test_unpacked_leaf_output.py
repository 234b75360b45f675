"""``Output(**outputs)`` on the output of a module the graph calls whole (InstructBLIP's
``BaseModelOutputWithVisionQformerOutputs(**vision_outputs, vision_outputs=vision_outputs)``).

A leaf's output is one graph value while tracing, without the keys ``**`` needs: the trace failed
("`**` unpacking of a traced value") unless the user made the calling function opaque. The tracer now
takes the keys from one eager run and reads each through a check of the keys when the graph runs: a
run whose output has other keys (a field set that was None when traced) is refused, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn
from transformers.utils import ModelOutput

from patcher import trace_graph


@dataclass
class TowerOutput(ModelOutput):
    last_hidden_state: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    hidden_states: torch.Tensor | None = None
    tower_output: object = None


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.keep_hidden_states = False  # decides a field of the output, as output_hidden_states does

    def forward(self, x):
        hidden = self.proj(x)
        return TowerOutput(last_hidden_state=hidden, pooler_output=hidden.mean(1),
                           hidden_states=hidden * 2 if self.keep_hidden_states else None)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x).tanh()


class RewrapsTowerOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.tower = Tower()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        outputs = self.tower(x)
        outputs = TowerOutput(**outputs, tower_output=outputs)
        hidden = outputs[0]
        for layer in self.layers:
            hidden = layer(hidden)
        outputs.pooler_output = hidden[:, 0] + outputs.pooler_output
        hidden_states = outputs.hidden_states
        return {"logits": outputs.pooler_output, "kept": hidden_states}


def _model():
    torch.manual_seed(0)
    return RewrapsTowerOutput().eval()


def _sample(seed: int = 0):
    return {"x": torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(seed))}


def test_unpacking_a_leaf_output_traces_and_equals_eager():
    model = _model()
    traced = trace_graph(model, _sample(), [Layer])
    for seed in (0, 1):
        expected = model(**_sample(seed))
        got = traced(model, **_sample(seed))
        torch.testing.assert_close(got["logits"], expected["logits"], rtol=0, atol=0)
        assert got["kept"] is None and expected["kept"] is None


def test_an_output_with_other_keys_than_when_traced_is_refused():
    model = _model()
    traced = trace_graph(model, _sample(), [Layer])
    model.tower.keep_hidden_states = True  # now a key the graph never unpacked
    with pytest.raises(RuntimeError, match="hidden_states"):
        traced(model, **_sample(1))


def test_the_eager_run_for_the_keys_leaves_the_model_as_it_was():
    model = _model()
    before = {key: value.clone() for key, value in model.state_dict().items()}
    trace_graph(model, _sample(), [Layer])
    assert all(not module._forward_hooks for module in model.modules())
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())
