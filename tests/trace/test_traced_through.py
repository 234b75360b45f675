"""Moved code that may return None is traced through where the trace can decide it.

The rewriter moves a branch it cannot decide statically (``if input_ids.ndim == 2:``) into a
``_wrapped_*`` function, one opaque call while tracing. A name that branch sets to None
(``input_ids = None`` once the ids are embedded) was then a traced value, never None, and code
after it decided ``is None`` for a value: Csm's backbone got ids and embeddings and refused both.
The rank of a sample tensor is a constant of the trace (checked at every run), so such a branch
on it is decided and the call traced through; a branch on data still cannot be decided, and the
call stays one opaque node with nothing of the attempt left in the graph.
"""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn

from patcher import run_subgraphs, trace_subgraphs
from patcher.trace import BranchDecisionError, InputMismatchError
from tiny_layers import Layer


class Backbone(nn.Module):
    """Takes ids or embeddings, exactly one (as transformers' decoders do)."""

    def __init__(self):
        super().__init__()
        self.embed_codes = nn.Embedding(8, 4)
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, input_ids=None, inputs_embeds=None):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        hidden = self.embed_codes(input_ids).sum(-2) if inputs_embeds is None else inputs_embeds
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


def _wrapped_forward_input_ids_ndim(self, input_ids, inputs_embeds):
    # as the rewriter moves Csm's `if input_ids is not None and input_ids.ndim == 2:`
    if input_ids.ndim == 2:
        inputs_embeds = self.embed_text(input_ids)
        input_ids = None
    return (inputs_embeds, input_ids)


def _wrapped_forward_gate(self, hidden, gate):
    # a branch on data: cannot be decided while tracing
    hidden = self.proj(hidden)
    if gate.sum() > 0:
        gate = None
    return (hidden, gate)


def _wrapped_forward_mask_ndim(hidden, mask):
    if hidden.ndim == 3:
        mask = None
    return (hidden, mask)


fx.wrap("_wrapped_forward_input_ids_ndim")
fx.wrap("_wrapped_forward_gate")
fx.wrap("_wrapped_forward_mask_ndim")


class TextOrCodes(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_text = nn.Embedding(8, 4)
        self.backbone = Backbone()

    def forward(self, input_ids, inputs_embeds=None):
        input_ids, inputs_embeds = _wrapped_forward_input_ids_ndim(self, input_ids, inputs_embeds)[::-1]
        return {"logits": self.backbone(input_ids=input_ids, inputs_embeds=inputs_embeds)}


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, hidden, gate):
        hidden, gate = _wrapped_forward_gate(self, hidden, gate)
        for layer in self.layers:
            hidden = layer(hidden)
        return {"logits": hidden if gate is None else hidden * gate}


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, hidden, mask):
        hidden, mask = _wrapped_forward_mask_ndim(hidden, mask)
        for layer in self.layers:
            hidden = layer(hidden)
        return {"logits": hidden if mask is None else hidden * mask}


def _ids(*shape, seed=0):
    return torch.randint(0, 8, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("shape", [(2, 5), (2, 5, 3)], ids=["text ids", "codebook ids"])
def test_a_branch_on_an_input_rank_is_decided_and_its_none_seen_by_the_code_after_it(shape):
    torch.manual_seed(0)
    model = TextOrCodes().eval()
    sample = {"input_ids": _ids(*shape)}
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    assert len(subgraphs) == 3
    other = {"input_ids": _ids(*shape, seed=1)}
    with torch.no_grad():
        for inputs in (sample, other):
            assert torch.equal(run_subgraphs(model, subgraphs, inputs)["logits"], model(**inputs)["logits"])


def test_an_input_of_another_rank_than_traced_is_refused():
    model = TextOrCodes().eval()
    subgraphs = trace_subgraphs(model, {"input_ids": _ids(2, 5)}, ["Layer"])
    with pytest.raises(InputMismatchError, match="'input_ids' has 3 dimensions, but the graph was traced with 2"):
        run_subgraphs(model, subgraphs, {"input_ids": _ids(2, 5, 3)})


def _gated(gate_sign: float, rows: int = 2, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {"hidden": torch.randn(rows, 4, generator=generator), "gate": gate_sign * torch.rand(rows, 4, generator=generator)}


def test_code_decided_by_data_stays_one_call_with_nothing_of_the_attempt_left():
    torch.manual_seed(0)
    model = Gated().eval()
    subgraphs = trace_subgraphs(model, _gated(1.0), ["Layer"])
    nodes = [node for subgraph in subgraphs for node in subgraph.graph.nodes]
    assert not any(node.op == "call_module" and node.target == "proj" for node in nodes)  # taken back
    assert sum(node.target is _wrapped_forward_gate for node in nodes) == 1


@pytest.mark.parametrize("traced_sign, other_sign, now", [(1.0, -1.0, "a value"), (-1.0, 1.0, "None")],
                         ids=["gate None for the sample", "gate kept for the sample"])
def test_a_result_of_one_opaque_call_is_none_as_for_the_sample_and_checked_at_every_run(traced_sign, other_sign, now):
    """The opaque call's `gate` is a traced value while tracing; whether it is None is worked out
    from the sample (see patcher.trace.none_decisions), so `gate is None` after the call is decided
    as eager decides it, on inputs of other shapes too, and an input for which the call hands back
    the other kind raises instead of running code traced for the sample's."""
    torch.manual_seed(0)
    model = Gated().eval()
    subgraphs = trace_subgraphs(model, _gated(traced_sign), ["Layer"])
    with torch.no_grad():
        for inputs in (_gated(traced_sign), _gated(traced_sign, rows=5, seed=1)):
            assert torch.equal(run_subgraphs(model, subgraphs, inputs)["logits"], model(**inputs)["logits"])
        with pytest.raises(BranchDecisionError, match=rf"`gate`, handed back by the call of _wrapped_forward_gate "
                                                      rf".*, is {now} here"):
            run_subgraphs(model, subgraphs, _gated(other_sign))


def test_csm_traces_its_text_ids_into_one_subgraph_per_backbone_layer_equal_to_eager():
    import transformers

    from tiny_models import assert_patched_text_chain_equals_eager

    assert_patched_text_chain_equals_eager(transformers.CsmForConditionalGeneration, "CsmDecoderLayer")


def test_moved_code_that_returns_no_none_for_the_sample_stays_one_call():
    # an opaque call's result decides every `is None` after it alike: tracing it through gains nothing
    model = Masked().eval()
    sample = {"hidden": torch.randn(2, 4), "mask": torch.ones(2, 4)}
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    nodes = [node for subgraph in subgraphs for node in subgraph.graph.nodes]
    assert sum(node.target is _wrapped_forward_mask_ndim for node in nodes) == 1
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample)["logits"])


@pytest.mark.parametrize("name, target", [("Qwen2Audio", "Qwen2DecoderLayer"), ("Csm", "CsmDecoderLayer")])
def test_moved_merges_of_audio_hand_the_code_after_them_the_none_eager_has(name, target):
    """Qwen2-Audio's moved merge hands back `labels`, given None: a traced value while tracing, so
    `if labels is not None:` computed a loss. Csm's sets `input_ids = None` once the clips are merged
    (a loop over clips, so it is not traced through): its backbone got ids and embeddings. Both are
    decided from the sample; the chain equals eager on two clip layouts."""
    import transformers

    from patcher import DEFAULT_IGNORE, load_traceable
    from patcher.samples.audio import fill_audio_ids
    from patcher.coverage import shrink_config
    from patcher.coverage.check import _build
    from patcher.samples.audio.modality import audio_samples

    cls = getattr(transformers, f"{name}ForConditionalGeneration")
    config = shrink_config(cls.config_class)
    fill_audio_ids(config, cls)
    original = _build(cls, config, 0).eval()
    samples = audio_samples(config, original, 0)
    model = _build(load_traceable(cls), config, 0).eval()
    model.load_state_dict(original.state_dict())
    subgraphs = list(trace_subgraphs(model, samples[0], [target], DEFAULT_IGNORE))
    assert len(subgraphs) == config.get_text_config().num_hidden_layers + 1
    with torch.no_grad():
        for sample in samples:
            expected = original(**sample, use_cache=False).logits
            assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], expected)


def _wrapped_forward_fill(self, hidden, gate, store):
    # as the rewriter moves Granite 4 Vision's loop that fills the `deepstack_features` dict it is
    # handed, with a branch on data the trace cannot decide
    for index in range(2):
        store[index] = self.proj(hidden) * (index + 1)
    if gate.sum() > 0:
        gate = None
    return (gate, store)


fx.wrap("_wrapped_forward_fill")


class Filled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, hidden, gate):
        store = {}
        gate, store = _wrapped_forward_fill(self, hidden, gate, store)
        for layer in self.layers:
            hidden = layer(hidden + store[0])
        return {"logits": (hidden + store[1]) if gate is None else hidden * gate}


def test_what_an_attempt_taken_back_stored_in_a_container_it_was_handed_goes_with_it():
    """The attempt to trace the call through ran the function on the dict it was handed and filled it
    with values of nodes the take-back then erased; the opaque call recorded after it was handed
    that dict, and the partition met inputs of no node of the graph (Granite 4 Vision: KeyError
    to_4). The dict is as it was before the attempt, and the chain equals eager."""
    torch.manual_seed(0)
    model = Filled().eval()
    sample = _gated(1.0)
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    nodes = [node for subgraph in subgraphs for node in subgraph.graph.nodes]
    assert sum(node.target is _wrapped_forward_fill for node in nodes) == 1
    with torch.no_grad():
        for inputs in (sample, _gated(1.0, rows=3, seed=1)):
            assert torch.equal(run_subgraphs(model, subgraphs, inputs)["logits"], model(**inputs)["logits"])
