"""Targets a sample does not run are not blamed on moved code that cannot reach them.

The rewriter hands its moved code (``_wrapped_*`` functions, opaque while tracing) the module it
reads. The tracer refuses targets such a call could run, since they would get no subgraph of
their own; what the call can reach is read from its code: only the children it names, and those
that the methods of the model's own code it calls name, unless it calls a method of torch's, one
that calls ``super()``, or hands the module on.
"""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn

from patcher import MissingTargetsError, run_subgraphs, trace_subgraphs
from tiny_layers import Layer


def _wrapped_embed_sum(self, codes):
    # what the rewriter moves out of Moshi's forward: `sum()` over a traced range
    return sum(self.embed[book](codes[:, book]) for book in range(codes.shape[1]))


def _wrapped_embed_by_method(self, codes):
    return self.embed_codes(codes)


def _wrapped_embed_by_plain_method(self, codes):
    # as Csm's moved merge calls `self._merge_input_ids_with_input_values(...)`, which runs the codec
    return self.embed_only(codes)


def _wrapped_embed_by_super_method(self, codes):
    return self.embed_by_super(codes)


def _wrapped_embed_handed_on(self, codes):
    # the rewriter splits moved code further: the loop of Csm's merge is a function handed the model
    return _wrapped_embed_books(self, codes)


def _wrapped_embed_books(model, codes):
    return sum(model.embed[book](codes[:, book]) for book in range(codes.shape[1]))


fx.wrap("_wrapped_embed_handed_on")
fx.wrap("_wrapped_embed_sum")
fx.wrap("_wrapped_embed_by_method")
fx.wrap("_wrapped_embed_by_plain_method")
fx.wrap("_wrapped_embed_by_super_method")


class Base(nn.Module):
    def embed_by_super(self, codes):
        return self.depth_layers[0](self.embed_only(codes))


class TwoDecoders(Base):
    """Like Moshi: the second decoder runs only when labels are given."""

    def __init__(self, embed_by_method: bool | str):
        super().__init__()
        self.embed_by_method = embed_by_method
        self.embed = nn.ModuleList(nn.Embedding(8, 4) for _ in range(2))
        self.layers = nn.ModuleList(Layer() for _ in range(2))
        self.depth_layers = nn.ModuleList(Layer() for _ in range(2))

    def embed_codes(self, codes):
        hidden = sum(self.embed[book](codes[:, book]) for book in range(codes.shape[1]))
        return self.depth_layers[0](hidden)  # a method may reach any child

    def embed_only(self, codes):
        return self._embed_books(codes)

    def _embed_books(self, codes):
        return sum(self.embed[book](codes[:, book]) for book in range(codes.shape[1]))

    def embed_by_super(self, codes):
        return super().embed_by_super(codes)  # reaches the module without naming a child

    def forward(self, codes, labels=None):
        moved = {False: _wrapped_embed_sum, True: _wrapped_embed_by_method, "plain": _wrapped_embed_by_plain_method,
                 "super": _wrapped_embed_by_super_method, "handed": _wrapped_embed_handed_on}[self.embed_by_method]
        hidden = moved(self, codes)
        for layer in self.layers:
            hidden = layer(hidden)
        if labels is not None:
            for layer in self.depth_layers:
                hidden = layer(hidden)
        return {"logits": hidden}


def _sample():
    return {"codes": torch.randint(0, 8, (2, 2, 3), generator=torch.Generator().manual_seed(0))}


def test_layers_the_sample_does_not_run_are_not_blamed_on_code_that_reads_other_children():
    torch.manual_seed(0)
    model = TwoDecoders(embed_by_method=False).eval()
    sample = _sample()
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    assert len(subgraphs) == 3  # the two layers that run, then the rest
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample)["logits"])


def test_moved_code_that_calls_a_method_of_the_module_may_reach_every_target():
    # the method runs depth_layers[0] inside the opaque call: it would get no subgraph
    model = TwoDecoders(embed_by_method=True).eval()
    with pytest.raises(MissingTargetsError, match=r"depth_layers\.0 \(swallowed by _wrapped_embed_by_method\)"):
        trace_subgraphs(model, _sample(), ["Layer"])


@pytest.mark.parametrize("how", ["plain", "handed"], ids=["a method called", "a function handed the module"])
def test_code_the_moved_code_runs_is_read_for_the_children_it_reaches(how):
    torch.manual_seed(0)
    model = TwoDecoders(embed_by_method=how).eval()
    sample = _sample()
    subgraphs = trace_subgraphs(model, sample, ["Layer"])
    assert len(subgraphs) == 3
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample)["logits"])


def test_a_method_that_calls_super_may_reach_every_target():
    model = TwoDecoders(embed_by_method="super").eval()
    with pytest.raises(MissingTargetsError, match=r"depth_layers\.0 \(swallowed by _wrapped_embed_by_super_method\)"):
        trace_subgraphs(model, _sample(), ["Layer"])


def test_moshi_traces_without_labels_into_one_subgraph_per_decoder_layer_equal_to_eager():
    """Moshi's depth decoder runs only with labels; the embedding of its audio codes, which the
    rewriter moves into a wrapped function handed the whole model, reads `self.embed_tokens` only."""
    import transformers

    from tiny_models import assert_patched_text_chain_equals_eager

    assert_patched_text_chain_equals_eager(transformers.MoshiForConditionalGeneration, "MoshiDecoderLayer")


@pytest.mark.parametrize("use_cache", [True, False])
def test_targets_the_patch_was_not_told_name_the_load_that_keeps_them_out_of_moved_code(use_cache):
    """xLSTM's training branch (a branch on a shape around its blocks) is moved into one call when
    the model is patched without targets (`load_traceable(cls)`), which then swallows every block;
    the error names the load that keeps them out, and following it traces equal to eager (the
    coverage sweep patches with the targets it traces with)."""
    import transformers

    from patcher import load_traceable
    from patcher.coverage import shrink_config

    config = shrink_config(transformers.xLSTMConfig)
    config.use_cache = use_cache  # the trace runs with the cache off either way
    sample = {"input_ids": torch.randint(0, config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))}
    with pytest.raises(MissingTargetsError) as raised:
        trace_subgraphs(load_traceable(transformers.xLSTMForCausalLM)(config).eval(), sample, ["xLSTMBlock"])
    assert "load_traceable(xLSTMForCausalLM, targets=['xLSTMBlock'])" in str(raised.value)
    torch.manual_seed(0)
    model = load_traceable(transformers.xLSTMForCausalLM, targets=["xLSTMBlock"])(config).eval()
    subgraphs = trace_subgraphs(model, sample, ["xLSTMBlock"])
    assert len(subgraphs) == config.num_hidden_layers + 1
    other = {"input_ids": torch.randint(0, config.vocab_size, (1, 11), generator=torch.Generator().manual_seed(1))}
    with torch.no_grad():
        for inputs in (sample, other):
            expected = model(**inputs, use_cache=False).logits
            assert torch.equal(run_subgraphs(model, subgraphs, inputs)["logits"], expected)
