"""``ignore``: ``None`` means the defaults everywhere, ``[]`` nothing, a string one entry."""

import pytest
import torch

from patcher import DEFAULT_IGNORE, UntraceableCodeError, run_subgraphs, trace_graph, trace_subgraphs
from patcher.models.attempt import prepare_trace
from patcher.samples import text_sample
from tiny_models import tiny_model


@pytest.fixture(scope="module")
def llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    return model, text_sample(model.config, batch_size=2, seq_len=5, left_padding=1)


def test_trace_subgraphs_ignore_none_means_the_defaults(llama):
    model, sample = llama
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"], ignore=None)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits)


def test_trace_graph_ignore_none_means_the_defaults(llama):
    model, sample = llama
    traced = trace_graph(model, sample, ["LlamaDecoderLayer"], ignore=None)
    with torch.no_grad():
        torch.testing.assert_close(traced.forward(model, **sample)["logits"], model(**sample).logits)


def test_an_empty_ignore_list_ignores_nothing(llama):
    model, sample = llama
    # Llama's mask builder is untraceable: with nothing ignored the trace reaches it
    with pytest.raises(UntraceableCodeError, match="masking_utils"):
        trace_subgraphs(model, sample, ["LlamaDecoderLayer"], ignore=[])


def test_a_single_string_is_one_ignore_entry(llama):
    model, sample = llama
    subgraphs = trace_subgraphs(model, sample, "LlamaDecoderLayer", ignore="create_causal_mask")
    opaque = {node.target.__name__ for subgraph in subgraphs for node in subgraph.graph.nodes
              if node.op == "call_function" and hasattr(node.target, "__name__")}
    assert "create_causal_mask" in opaque
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits)


def test_attempt_trace_path_treats_ignore_like_trace_subgraphs():
    setup = prepare_trace("LlamaForCausalLM", "Meta-Llama-3-8B", ignore=None)
    assert setup.ignore == list(DEFAULT_IGNORE)
    assert prepare_trace("LlamaForCausalLM", "Meta-Llama-3-8B", ignore=[]).ignore == []
    single = prepare_trace("LlamaForCausalLM", "Meta-Llama-3-8B", ignore="create_causal_mask",
                           extra_ignore="get_rope_index")
    assert single.ignore == ["create_causal_mask", "get_rope_index"]
