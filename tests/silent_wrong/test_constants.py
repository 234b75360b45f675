"""Python scalars, bools, strings and None in the sample are constants of the trace.

The model decides Python control flow on them (``isinstance(logits_to_keep, int)``): as a graph
input, ``logits_to_keep=1`` failed that test while tracing and the graph returned the logits of
position 1, shape ``(B, V)``, instead of the last position's ``(B, 1, V)``.
"""

import pytest
import torch

from patcher import InputMismatchError, MissingInputError, OutputCaptureError, SampleInputError, run_subgraphs, trace_subgraphs
from patcher.samples import text_sample
from tiny_models import tiny_model

TARGETS = ["LlamaDecoderLayer"]


@pytest.fixture(scope="module")
def llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    return model, text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)


@pytest.fixture(scope="module")
def keep_one(llama):
    model, sample = llama
    sample = {**sample, "logits_to_keep": 1}
    return model, sample, trace_subgraphs(model, sample, TARGETS)


def test_an_int_in_the_sample_is_a_constant_not_a_graph_input(keep_one):
    model, sample, subgraphs = keep_one
    assert "logits_to_keep" not in list(subgraphs[0].input_names)  # `in` alone is true for any model-level name
    with torch.no_grad():
        expected = model(**sample).logits
    assert expected.shape == (2, 1, model.config.vocab_size)
    torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], expected)


def test_a_constant_with_another_value_at_run_time_is_refused(keep_one):
    model, sample, subgraphs = keep_one
    with pytest.raises(InputMismatchError, match=r"traced with logits_to_keep=1, a constant of the trace.*"
                                                 r"trace with logits_to_keep=2 in the sample"):
        run_subgraphs(model, subgraphs, {**sample, "logits_to_keep": 2})
    with pytest.raises(InputMismatchError, match=r"pass logits_to_keep as a Python value"):
        subgraphs[0].forward(model, **{**sample, "logits_to_keep": torch.tensor(1)})


def test_a_constant_left_out_where_the_default_differs_is_refused(keep_one):
    model, sample, subgraphs = keep_one
    without = {key: value for key, value in sample.items() if key != "logits_to_keep"}
    with pytest.raises(MissingInputError, match=r"logits_to_keep=1 was a constant of the trace"):
        run_subgraphs(model, subgraphs, without)


def test_flags_tracezoo_fixes_may_be_repeated_but_not_changed(llama):
    model, sample = llama
    subgraphs = trace_subgraphs(model, sample, TARGETS)
    run_subgraphs(model, subgraphs, {**sample, "use_cache": False})
    with pytest.raises(InputMismatchError, match=r"traced with use_cache=False"):
        run_subgraphs(model, subgraphs, {**sample, "use_cache": True})


@pytest.mark.parametrize("flag", ["use_cache", "output_attentions"])
def test_a_flag_given_as_a_tensor_says_so(llama, flag):
    model, sample = llama
    # used to fail as "control flow on a tensor value" deep inside the model
    with pytest.raises(SampleInputError, match=rf"'{flag}' is a tensor.*must be a Python bool"):
        trace_subgraphs(model, {**sample, flag: torch.tensor(False)}, TARGETS)


def test_use_cache_true_is_refused_because_the_traced_cache_would_be_shared_by_every_run(llama):
    model, sample = llama
    # the DynamicCache built while tracing was a constant of the graph: the second run attended
    # to the first run's keys and values
    with pytest.raises(SampleInputError, match=r"use_cache=True is not supported.*shared and grown by every run.*"
                                               r"use_cache=False"):
        trace_subgraphs(model, {**sample, "use_cache": True}, TARGETS)


def test_output_attentions_true_is_refused_while_the_graph_returns_no_attentions(llama):
    model, sample = llama
    # the graph used to return an empty tuple of attentions without a word
    with pytest.raises(OutputCaptureError, match=r"output_attentions is requested.*empty `attentions` tuple"):
        trace_subgraphs(model, {**sample, "output_attentions": True}, TARGETS)
