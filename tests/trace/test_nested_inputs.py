"""An input that is a dict/tuple/list of tensors (Gemma 4 assistants' ``shared_kv_states``).

Traced as one placeholder, the dict was a single proxy and the forward's loop over it failed
("iteration over a traced value"). Now each tensor is an input of the trace, the containers are
rebuilt around them, and a run hands the container whole: checked against the traced structure.
"""

from __future__ import annotations

from collections import UserDict

import pytest
import torch
from torch import nn

from patcher import InputMismatchError, run_subgraphs, trace_graph, trace_subgraphs


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, states):
        keys, values = states["full"]
        near_keys, near_values = states["near"]
        scores = (self.proj(x) @ keys.transpose(-1, -2)).softmax(-1)
        return x + scores @ values + (near_keys * near_values).sum(-2, keepdim=True)


class ReadsSharedStates(nn.Module):
    """The Gemma 4 assistant pattern: a loop over a dict of (key, value) tuples, then every layer
    gets the rebuilt dict."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.layers = nn.ModuleList([Layer(), Layer(), Layer()])

    def forward(self, inputs_embeds, shared_kv_states):
        states = {kind: (pair[0] * 2, pair[1] - 1) for kind, pair in shared_kv_states.items()}
        x = self.embed(inputs_embeds)
        for layer in self.layers:
            x = layer(x, states)
        return {"logits": x}


def _states(batch: int, length: int, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {kind: (torch.randn(batch, length, 4, generator=generator), torch.randn(batch, length, 4, generator=generator))
            for kind in ("full", "near")}


def _sample(batch: int = 2, length: int = 5, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed + 1)
    return {"inputs_embeds": torch.randn(batch, 1, 4, generator=generator), "shared_kv_states": _states(batch, length, seed)}


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ReadsSharedStates().eval()


def test_dict_of_tuples_input_traces_and_equals_eager(model):
    sample = _sample()
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    traced = trace_graph(model, sample, ["Layer"])
    assert len(subgraphs) == 4
    with torch.no_grad():
        for batch in (sample, _sample(batch=3, length=9, seed=5)):  # other sizes, other values: the same graph
            expected = model(**batch)["logits"]
            assert torch.equal(run_subgraphs(model, subgraphs, batch)["logits"], expected)
            assert torch.equal(traced.forward(model, **batch)["logits"], expected)
    assert subgraphs.kinds() == ["'inputs_embeds', 'shared_kv_states'"]


def test_the_graph_takes_the_container_and_reads_each_tensor_by_name(model):
    traced = trace_graph(model, _sample(), ["Layer"])
    assert [node.target for node in traced.graph.find_nodes(op="placeholder")] == ["inputs_embeds", "shared_kv_states"]
    names = {node.name for node in traced.graph.nodes}
    assert {"shared_kv_states_full_0", "shared_kv_states_full_1", "shared_kv_states_near_0",
            "shared_kv_states_near_1"} <= names


@pytest.mark.parametrize("change, words", [
    (lambda states: {"full": states["full"]}, "{'full': (tensor(3-D), tensor(3-D))}"),
    (lambda states: {"near": states["near"], "full": states["full"]}, "the same keys in another order"),
    (lambda states: {**states, "far": states["near"]}, "'far'"),
    (lambda states: {"full": states["full"][:1], "near": states["near"]}, "{'full': (tensor(3-D),)"),
    (lambda states: {"full": list(states["full"]), "near": states["near"]}, "{'full': [tensor(3-D), tensor(3-D)]"),
    (lambda states: {"full": (states["full"][0], None), "near": states["near"]}, "shared_kv_states['full'][1] is NoneType"),
    (lambda states: states["full"][0], "it is tensor(3-D); traced"),
])
def test_a_batch_of_another_structure_is_refused_naming_the_input(model, change, words):
    sample = _sample()
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    traced = trace_graph(model, sample, ["Layer"])
    batch = {**sample, "shared_kv_states": change(sample["shared_kv_states"])}
    runs = {"run_subgraphs": lambda: run_subgraphs(model, subgraphs, batch),
            "subgraph 0": lambda: subgraphs[0].forward(model, **batch),
            "TracedGraph.forward": lambda: traced.forward(model, **batch),
            "the graph": lambda: subgraphs[0]._run(model, batch)}  # unchecked by the record: the graph's own check
    for where, run in runs.items():
        with pytest.raises(InputMismatchError) as error:
            run()
        message = str(error.value)
        assert message.startswith(f"{where}: input 'shared_kv_states' does not have the structure"), message
        assert words in message, message
        assert "traced: {'full': (tensor(3-D), tensor(3-D)), 'near': (tensor(3-D), tensor(3-D))}" in message


class ReadsRank(nn.Module):
    """Code deciding on the rank of a tensor inside the container: decided for the sample, checked at every run."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)

    def forward(self, x, extras):
        bias = extras[0] if extras[0].ndim == 1 else extras[0].sum(0)
        return {"logits": self.layer(x + bias + extras[1])}


def test_a_tensor_of_another_rank_in_a_container_is_refused_where_the_code_read_its_rank():
    model = ReadsRank().eval()
    sample = {"x": torch.randn(2, 4), "extras": [torch.randn(4), torch.randn(2, 4)]}
    subgraphs = trace_subgraphs(model, sample, ["Linear"])
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample)["logits"])
        other = {"x": sample["x"], "extras": [torch.randn(3, 4), torch.randn(4)]}  # extras[1]: no rank read
        with pytest.raises(InputMismatchError, match=r"extras\[0\] has 2 dimensions, and the traced code decided on "
                                                     r"its rank \(1\)"):
            run_subgraphs(model, subgraphs, other)
        other = {"x": sample["x"], "extras": [torch.randn(4), torch.randn(4)]}
        assert torch.equal(run_subgraphs(model, subgraphs, other)["logits"], model(**other)["logits"])


class Shared(UserDict):
    """As transformers' ``KVSharingDict``: a ``UserDict`` the text model wraps the given states in."""


class ReadsWrappedStates(nn.Module):
    """Gemma 4's text model under its assistant: the states handed in are wrapped in a ``UserDict`` that
    every layer gets. Kept as a constant of the graph, it held the trace's proxies: the states never
    reached the output (DroppedInputError), and a graph that ran would have read the sample's."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, inputs_embeds, shared_kv_states):
        states = Shared(shared_kv_states)
        x = inputs_embeds
        for layer in self.layers:
            x = layer(x, states)
        return {"logits": x}


def test_a_user_dict_around_graph_values_is_filled_at_every_run():
    torch.manual_seed(0)
    model = ReadsWrappedStates().eval()
    sample = _sample()
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    with torch.no_grad():
        for batch in (sample, _sample(batch=3, length=9, seed=5)):
            assert torch.equal(run_subgraphs(model, subgraphs, batch)["logits"], model(**batch)["logits"])
