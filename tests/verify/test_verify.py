"""verify_subgraphs passes on a right partition and fails on wrong ones."""

import pytest

from patcher import trace_subgraphs
from patcher.samples import text_sample
from patcher.verify import PartitionMismatch, verify_subgraphs
from tiny_models import tiny_model


@pytest.fixture
def traced():
    model = tiny_model("Qwen3ForCausalLM")
    subgraphs = trace_subgraphs(model, text_sample(model.config, seq_len=5), ["Qwen3DecoderLayer"])
    return model, subgraphs


def test_right_partition_verifies(traced):
    model, subgraphs = traced
    report = verify_subgraphs(model, subgraphs, text_sample(model.config, batch_size=2, seq_len=9, left_padding=3),
                              ["Qwen3DecoderLayer"])
    assert report.targets_called == ["model.layers.0", "model.layers.1", "model.layers.2"]
    assert report.max_abs_diff == {"logits": 0.0}


def test_missing_layer_is_caught(traced):
    model, subgraphs = traced
    with pytest.raises(PartitionMismatch, match=r"missing from subgraphs \['model.layers.1'\]"):
        verify_subgraphs(model, subgraphs[:1] + subgraphs[2:], text_sample(model.config), ["Qwen3DecoderLayer"])


def test_wrong_numbers_are_caught(traced):
    model, subgraphs = traced
    # A silently wrong graph: layer 1's subgraph calls layer 0's weights.
    node = next(node for node in subgraphs[1].graph.nodes if node.target == "model.layers.1")
    node.target = "model.layers.0"
    subgraphs[1]._forward = None
    with pytest.raises(PartitionMismatch, match="output 'logits' differs from eager"):
        verify_subgraphs(model, subgraphs, text_sample(model.config), ["Qwen3DecoderLayer"])
