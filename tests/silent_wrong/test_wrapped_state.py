"""Moved code that changes a module's settings while the graph runs (BigBird).

BigBird's forward switches itself from block-sparse to full attention on short inputs
(``self.set_attention_type("original_full")`` under ``if seq_length <= max_tokens_to_attend``).
The rewriter moves that shape branch into a wrapped function, which does not run while tracing:
the graph was traced for block-sparse attention (padding, block masks, no causal mask) and the
switch happened only when the graph ran, so the layers ran full attention without a causal mask.
The subgraph chain differed from eager by 7e-3 with no error. Now ``StateChangeError`` names the
source line and the attribute.

A sample that switches the model (any input shorter than the sparse blocks need) was then refused
itself. The tracer now sees the switch on one eager run and traces the rest for the setting it leaves;
the graph makes the switch when it runs and refuses a run that ends in another setting.

A refused batch then left the model switched (its attention type, and every layer's attention module
replaced): the next run of the very sample the graph was traced on went through with no error, 1e-3
off. A refused run now puts the model's settings back as they were before it.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from patcher import (StateChangeError, TrainingModeError, load_traceable, run_subgraphs, trace_graph,
                     trace_subgraphs)
from patcher.verify import run_eagerly

LAYERS = r"re:bert\.encoder\.layer\.\d+$"


def _config():
    return transformers.BigBirdConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, attention_type="block_sparse", block_size=4, num_random_blocks=1,
        is_decoder=True, pad_token_id=0)


def _models():
    torch.manual_seed(0)
    original = transformers.BigBirdForCausalLM(_config()).eval()
    traceable = load_traceable(transformers.BigBirdForCausalLM, targets=["BigBirdLayer"])(_config()).eval()
    traceable.load_state_dict(original.state_dict())
    return original, traceable


def _sample(seed: int = 0, length: int = 7):
    return {"input_ids": torch.randint(1, 96, (2, length), generator=torch.Generator().manual_seed(seed))}


def test_a_switch_on_the_sample_is_traced_for_and_equals_eager_on_other_lengths():
    # The sample (7 tokens) switches BigBird to full attention: the trace follows the switch, and the
    # graph makes it when it runs, as eager does, on a model not switched yet.
    original, traceable = _models()
    subgraphs = trace_subgraphs(traceable, _sample(), LAYERS)
    traced = trace_graph(traceable, _sample(), LAYERS)
    assert traceable.bert.attention_type == "block_sparse"  # tracing leaves the model as it was
    with torch.no_grad():
        for sample in (_sample(1), _sample(2, length=9), _sample(3, length=40)):
            want = run_eagerly(original, sample).logits
            torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["logits"], want, rtol=0, atol=0)
            torch.testing.assert_close(traced(traceable, **sample)["logits"], want, rtol=0, atol=0)


def test_an_input_that_leaves_another_setting_than_traced_for_is_refused():
    # 40 tokens do not switch a fresh model: the graph, traced for full attention, must not run on.
    _, traceable = _models()
    subgraphs = trace_subgraphs(traceable, _sample(), LAYERS)
    with pytest.raises(StateChangeError) as caught:
        run_subgraphs(traceable, subgraphs, _sample(1, length=40))
    message = str(caught.value)
    assert "modeling_big_bird.py:" in message and "BigBirdModel.forward" in message
    assert "BigBirdModel.attention_type is 'block_sparse' where the graph was traced for 'original_full'" in message


def test_settings_changed_by_moved_code_while_the_graph_runs_are_refused():
    # Traced on 32 tokens, which keep block-sparse attention: a short input switches the model while
    # the graph runs, after the rest was traced for block-sparse attention.
    _, traceable = _models()
    subgraphs = trace_subgraphs(traceable, _sample(length=32), LAYERS)
    with pytest.raises(StateChangeError) as caught:
        run_subgraphs(traceable, subgraphs, _sample(1))
    message = str(caught.value)
    assert "modeling_big_bird.py:" in message and "BigBirdModel.forward" in message
    assert "BigBirdModel.attention_type: 'block_sparse' -> 'original_full'" in message
    _, traceable = _models()
    traced = trace_graph(traceable, _sample(length=32), LAYERS)
    with pytest.raises(StateChangeError, match="attention_type"):
        traced(traceable, **_sample(1))


def _settings_of(model):
    """What BigBird's switch changes: the model's attention type, and each layer's with its attention module."""
    return model.bert.attention_type, [(layer.attention.attention_type, layer.attention.self)
                                       for layer in model.bert.encoder.layer]


def _guide_loop(model, subgraphs, inputs):
    intermediates = dict(inputs)
    for subgraph in subgraphs:
        intermediates.update(subgraph.forward(model, **intermediates))
    return intermediates


#: each way to run the chain or the graph, on the subgraphs or the whole graph traced on ``sample``
RUNS = {
    "run_subgraphs": (trace_subgraphs, lambda model, subgraphs, inputs: run_subgraphs(model, subgraphs, inputs)),
    "Subgraph.forward": (trace_subgraphs, _guide_loop),
    "TracedGraph.forward": (trace_graph, lambda model, traced, inputs: traced(model, **inputs)),
}


@pytest.mark.parametrize("run", RUNS)
def test_a_refused_batch_leaves_the_model_as_it_was(run):
    # Traced on 32 tokens (block-sparse attention), a 5-token batch switches the model to full attention
    # before the guard refuses it. Left switched, the next run of the traced sample itself raised nothing
    # and was 1e-3 off.
    trace, run_it = RUNS[run]
    original, traceable = _models()
    sample = _sample(length=32)
    traced = trace(traceable, sample, LAYERS)
    before = _settings_of(traceable)
    with torch.no_grad():
        first = run_it(traceable, traced, sample)["logits"]
        with pytest.raises(StateChangeError, match="attention_type: 'block_sparse' -> 'original_full'"):
            run_it(traceable, traced, _sample(1, length=5))
        assert _settings_of(traceable) == before
        again = run_it(traceable, traced, sample)["logits"]
        torch.testing.assert_close(again, first, rtol=0, atol=0)
        torch.testing.assert_close(again, run_eagerly(original, sample).logits, rtol=0, atol=0)


def test_a_chain_refused_after_the_switch_it_was_traced_for_puts_the_switch_back():
    # Traced on 7 tokens, subgraph 0 switches a fresh model to full attention, as eager does; a check
    # before subgraph 1 then refuses the run (layer 1 in train mode). The model must not stay switched.
    original, traceable = _models()
    subgraphs = trace_subgraphs(traceable, _sample(), LAYERS)
    traceable.bert.encoder.layer[1].train()
    before = _settings_of(traceable)
    with torch.no_grad(), pytest.raises(TrainingModeError, match=r"subgraph 1: .*'bert\.encoder\.layer\.1'"):
        run_subgraphs(traceable, subgraphs, _sample(1, length=5))
    assert _settings_of(traceable) == before
    traceable.bert.encoder.layer[1].eval()
    sample = _sample(2, length=9)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["logits"],
                                   run_eagerly(original, sample).logits, rtol=0, atol=0)
    # a run that goes through keeps the switch, as eager keeps it
    assert traceable.bert.attention_type == original.bert.attention_type == "original_full"


def test_model_put_in_that_state_before_tracing_matches_eager():
    # The fix the error names: with the setting made before tracing, the switch is not in the graph.
    original, traceable = _models()
    traceable.bert.set_attention_type("original_full")
    subgraphs = trace_subgraphs(traceable, _sample(), LAYERS)
    traced = trace_graph(traceable, _sample(), LAYERS)
    sample = _sample(2, length=9)
    with torch.no_grad():
        want = run_eagerly(original, sample).logits
        torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["logits"], want, rtol=0, atol=0)
        torch.testing.assert_close(traced(traceable, **sample)["logits"], want, rtol=0, atol=0)


class _Switchable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mode = "sparse"
        self.proj = torch.nn.Linear(2, 2)

    def set_mode(self, mode):
        self.mode = mode

    def switch(self):
        self.set_mode("full")

    def patch_size(self):
        return 4


def _reads_a_size(module, x):
    return x.size(-1) // module.patch_size() + module.proj.weight.shape[0]


def _switches(module, x):
    if x.size(-1) < 8:
        module.switch()  # writes module.mode two calls deep
    return x


def _stores(module, x):
    module.mode = "full"


def test_only_moved_code_that_can_write_a_module_setting_asks_for_an_eager_run():
    # the eager run (an extra forward of the model) is for code that may switch the model, not for
    # the many moved functions that read a size off `self`
    from patcher.trace.wrapped_state import may_change_settings

    module = _Switchable()
    assert not may_change_settings(_reads_a_size, (module, torch.ones(2)), {})
    assert may_change_settings(_switches, (module, torch.ones(2)), {})
    assert may_change_settings(_stores, (module,), {"x": None})
    assert not may_change_settings(_stores, (None,), {"x": None})  # no module handed: nothing to change
