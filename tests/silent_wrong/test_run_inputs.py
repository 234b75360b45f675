"""Inputs given when a graph runs must be the inputs it was traced with.

A graph only reads its traced inputs: before these checks an attention mask (or images) given
at run time to a graph traced without them was dropped without a word, and the logits were
those of an unmasked (text-only) run. One trace (a plain list of subgraphs, ``Subgraph.forward``,
``TracedGraph.forward``) refuses such inputs; ``run_subgraphs`` on what ``trace_subgraphs`` returned
runs them on subgraphs traced for them (``patcher.partition.paths``), equal to eager.
"""

import pytest
import torch

from patcher import InputMismatchError, MissingInputError, run_subgraphs, trace_graph, trace_subgraphs
from patcher.samples import text_sample
from patcher.verify import run_eagerly
from tiny_models import tiny_model
from zoo._entries import recipe

TARGETS = ["LlamaDecoderLayer"]


@pytest.fixture(scope="module")
def llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    padded = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)
    return model, padded


def eager(model, inputs):
    with torch.no_grad():
        return run_eagerly(model, inputs).logits


def test_one_path_refuses_an_input_the_graph_was_traced_without(llama):
    model, padded = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"]}, TARGETS)
    with pytest.raises(InputMismatchError, match=r"'attention_mask'.*trace with a sample that has it"):
        run_subgraphs(model, list(subgraphs), padded)


def test_an_input_the_graph_was_traced_without_runs_on_its_own_trace(llama):
    """Refused before (and dropped before that): the padded batch runs on subgraphs traced with its mask."""
    model, padded = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"]}, TARGETS)
    torch.testing.assert_close(run_subgraphs(model, subgraphs, padded)["logits"], eager(model, padded), rtol=0, atol=0)
    assert [path[0].record.tensor_inputs for path in subgraphs.paths] == [("input_ids",), ("input_ids", "attention_mask")]


def test_subgraph_forward_refuses_an_input_the_graph_was_traced_without(llama):
    model, padded = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"]}, TARGETS)
    with pytest.raises(InputMismatchError, match=r"subgraph 0: input 'attention_mask' given.*trace with a sample"):
        subgraphs[0].forward(model, **padded)


def test_traced_graph_forward_refuses_an_input_the_graph_was_traced_without(llama):
    model, padded = llama
    traced = trace_graph(model, {"input_ids": padded["input_ids"]}, TARGETS)
    with pytest.raises(InputMismatchError, match=r"'attention_mask'.*trace with a sample that has it"):
        traced.forward(model, **padded)


def test_a_mask_traced_as_none_refuses_a_real_mask(llama):
    model, padded = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"], "attention_mask": None}, TARGETS)
    with pytest.raises(InputMismatchError, match=r"traced with attention_mask=None.*trace with a sample that has "
                                                 r"'attention_mask'"):
        run_subgraphs(model, list(subgraphs), padded)
    # None again is the traced value: fine, and equal to eager
    unmasked = {"input_ids": padded["input_ids"], "attention_mask": None}
    torch.testing.assert_close(run_subgraphs(model, subgraphs, unmasked)["logits"], eager(model, unmasked))
    # a real mask is another kind of batch: its own trace, equal to eager
    torch.testing.assert_close(run_subgraphs(model, subgraphs, padded)["logits"], eager(model, padded), rtol=0, atol=0)
    assert len(subgraphs.paths) == 2


def test_a_traced_input_missing_at_run_time_is_named(llama):
    model, padded = llama
    subgraphs = trace_subgraphs(model, padded, TARGETS)
    with pytest.raises(MissingInputError, match=r"missing input\(s\) 'attention_mask'.*give them when running"):
        run_subgraphs(model, list(subgraphs), {"input_ids": padded["input_ids"]})
    traced = trace_graph(model, padded, TARGETS)
    # the whole graph used to run with None in its place
    with pytest.raises(KeyError, match="'attention_mask'"):
        traced.forward(model, input_ids=padded["input_ids"])


def test_none_for_an_input_traced_with_a_tensor_is_refused(llama):
    model, padded = llama
    subgraphs = trace_subgraphs(model, padded, TARGETS)
    unmasked = {"input_ids": padded["input_ids"], "attention_mask": None}
    with pytest.raises(InputMismatchError, match=r"'attention_mask' is None.*trace with a sample where"):
        run_subgraphs(model, list(subgraphs), unmasked)
    # on what trace_subgraphs returned, a batch without a mask runs on its own trace
    torch.testing.assert_close(run_subgraphs(model, subgraphs, unmasked)["logits"], eager(model, unmasked),
                               rtol=0, atol=0)


def test_values_the_chain_hands_on_may_be_passed_to_any_subgraph(llama):
    model, padded = llama
    subgraphs = trace_subgraphs(model, padded, TARGETS)
    intermediates = dict(padded)
    with torch.no_grad():
        for subgraph in subgraphs:
            intermediates.update(subgraph.forward(model, **intermediates))  # everything, not just its inputs
    torch.testing.assert_close(intermediates["logits"], eager(model, padded))


def test_images_on_a_vlm_traced_on_text_are_refused_by_one_path_and_run_on_their_own():
    from zoo import TraceableLlavaForConditionalGeneration

    spec = recipe("llava")
    # the zoo's class: transformers' own traces on text only
    model = spec.tiny_model(model_class=TraceableLlavaForConditionalGeneration)
    text = spec.build_sample(model.config, batch_size=1, seq_len=6, multimodal=False)
    images = spec.build_sample(model.config, batch_size=1, seq_len=6)
    subgraphs = trace_subgraphs(model, text, list(spec.default_targets))
    with pytest.raises(InputMismatchError, match=r"'pixel_values'.*trace with a sample that has it"):
        run_subgraphs(model, list(subgraphs), images)
    # on what trace_subgraphs returned, the images run on subgraphs traced with them
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, images)["logits"], eager(model, images),
                                   rtol=0, atol=0)
