"""A loop that hands each subgraph only the batch values its ``input_names`` name.

llm-compressor's ``IntermediatesCache.fetch`` keeps a batch's value when ``name in
subgraph.input_names``. Subgraph 0's ``input_names`` held only the inputs the graph was traced with,
so a padded ``attention_mask`` on a graph traced without one (or a real mask on a graph traced with
``attention_mask=None``, or images on a graph traced on text) never reached a subgraph: nothing
refused it, and the layers ran on the activations of an unmasked (text-only) batch without an error.
``in`` subgraph 0's ``input_names`` is now true for every model-level name, so the same loop hands
subgraph 0 the whole batch and it refuses; iterating it still gives only the inputs it reads, so a
loop that indexes the batch by them does not fail on a batch without an optional input.
"""

import pytest
import torch

from patcher import InputMismatchError, trace_subgraphs
from patcher.samples import text_sample
from patcher.verify import run_eagerly
from tiny_models import tiny_model
from zoo._entries import recipe

TARGETS = ["LlamaDecoderLayer"]


def fetch(values, input_names):
    """llm-compressor 0.14's ``IntermediatesCache.fetch``: the values whose name is ``in`` input_names."""
    return {key: value for key, value in values.items() if input_names is None or key in input_names}


def fetching_loop(model, subgraphs, batch):
    """The sequential pipeline's loop: one cache per batch, each subgraph given what ``fetch`` picks."""
    cached = dict(batch)
    with torch.no_grad():
        for subgraph in subgraphs:
            outputs = subgraph.forward(model, **fetch(cached, subgraph.input_names))
            for name in subgraph.consumed_names:
                cached.pop(name)
            cached.update(outputs)
    return outputs


def indexing_loop(model, subgraphs, batch):
    """The loop that names each input: ``batch[name] for name in subgraph.input_names``."""
    intermediates = dict(batch)
    with torch.no_grad():
        for subgraph in subgraphs:
            inputs = {name: intermediates[name] for name in subgraph.input_names}
            intermediates.update(subgraph.forward(model, **inputs))
    return intermediates


@pytest.fixture(scope="module")
def llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    padded = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)
    with torch.no_grad():
        unmasked = run_eagerly(model, {"input_ids": padded["input_ids"]}).logits
    assert (unmasked - run_eagerly(model, padded).logits).abs().max() > 1e-3, "the mask must matter here"
    return model, padded, unmasked


def test_a_fetching_loop_refuses_a_padded_mask_on_a_graph_traced_without_one(llama):
    model, padded, unmasked = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"]}, TARGETS)
    torch.testing.assert_close(fetching_loop(model, subgraphs, {"input_ids": padded["input_ids"]})["logits"], unmasked,
                               rtol=0, atol=0)
    with pytest.raises(InputMismatchError, match=r"subgraph 0: input 'attention_mask' given, but the graph was traced "
                                                 r"without it"):
        fetching_loop(model, subgraphs, padded)


def test_a_fetching_loop_refuses_a_mask_on_a_graph_traced_with_none(llama):
    model, padded, unmasked = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"], "attention_mask": None}, TARGETS)
    with pytest.raises(InputMismatchError, match=r"subgraph 0: attention_mask is a tensor .* traced with "
                                                 r"attention_mask=None"):
        fetching_loop(model, subgraphs, padded)


def test_an_optional_input_left_out_breaks_neither_loop(llama):
    # attention_mask=None is a constant of the trace: a batch may leave it out. Listed among the names a
    # loop indexes the batch by, it would be a KeyError for such a batch.
    model, padded, unmasked = llama
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"], "attention_mask": None}, TARGETS)
    assert list(subgraphs[0].input_names) == ["input_ids"]
    batch = {"input_ids": padded["input_ids"]}
    for loop in (fetching_loop, indexing_loop):
        torch.testing.assert_close(loop(model, subgraphs, batch)["logits"], unmasked, rtol=0, atol=0)


def test_only_model_level_names_are_in_subgraph_0s_input_names(llama):
    # what one subgraph hands the next is never a batch's: a loop must not hand it back to subgraph 0
    model, padded, _ = llama
    subgraphs = trace_subgraphs(model, padded, TARGETS)
    first = subgraphs[0].input_names
    assert "pixel_values" in first and "logits_to_keep" in first
    assert not any(name in first for subgraph in subgraphs[:-1] for name in subgraph.output_names)
    assert all(list(subgraph.input_names) == subgraph.input_names for subgraph in subgraphs)


def test_a_fetching_loop_refuses_images_on_a_vlm_traced_on_text():
    spec = recipe("llava")
    model = spec.tiny_model()
    text = spec.build_sample(model.config, batch_size=1, seq_len=6, multimodal=False)
    images = spec.build_sample(model.config, batch_size=1, seq_len=6)
    subgraphs = trace_subgraphs(model, text, list(spec.default_targets))
    with pytest.raises(InputMismatchError, match=r"subgraph 0: input 'pixel_values' given.*trace with a sample that "
                                                 r"has it"):
        fetching_loop(model, subgraphs, images)
