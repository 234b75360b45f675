"""A graph traced on the meta device runs on any device: no device of the trace is baked in.

Idefics3 (and Granite-Docling, the same code) moves its embeddings with ``.to(self.device)``:
``self.device`` is a property that reads a parameter, so the tracer saw a concrete
``torch.device('meta')`` and baked ``.to(device(type='meta'))`` into the graph. Run on the real
model, the image-token merge then checked a meta tensor (``Tensor.item() cannot be called on
meta tensors``); a graph traced on CPU and run on a GPU moved the embeddings back to the CPU.
"""

import copy

import pytest
import torch
import transformers

from patcher import run_subgraphs, trace_subgraphs
from patcher.coverage.check import _build
from patcher.coverage.shrink import shrink_config
from patcher.samples.sweep import coverage_multimodal_sample
from patcher.models import build_model
from patcher.trace.graph_runtime import module_device
from patcher.models.traceable import load_traceable
from patcher.verify import run_eagerly

TARGETS = ["LlamaDecoderLayer"]


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory):
    cls = transformers.Idefics3ForConditionalGeneration
    config = shrink_config(cls.config_class)
    traceable_cls = load_traceable(cls, targets=TARGETS, cache_dir=tmp_path_factory.mktemp("generated"))
    original = _build(cls, config, 0)
    traceable = _build(traceable_cls, config, 0)
    traceable.load_state_dict(original.state_dict(), strict=True)
    sample = coverage_multimodal_sample(config, batch_size=2, seq_len=8, left_padding=1, seed=0, model=original)
    meta = build_model(traceable_cls, config, device="meta")
    subgraphs = trace_subgraphs(meta, {key: value.to("meta") for key, value in sample.items()}, TARGETS)
    return original, traceable, sample, subgraphs


def test_no_meta_device_is_baked_into_a_graph_traced_on_meta(idefics3):
    *_, subgraphs = idefics3
    baked = [node.format_node() for subgraph in subgraphs for node in subgraph.graph.nodes
             if "device(type='meta')" in repr((node.args, node.kwargs))]
    assert baked == []
    # the device is read from the module whose `.device` the code asked for, when the graph runs
    reads = [node for subgraph in subgraphs for node in subgraph.graph.nodes if node.target is module_device]
    assert reads


def test_an_idefics3_graph_traced_on_meta_runs_on_the_real_model(idefics3, device):
    original, traceable, sample, subgraphs = idefics3
    # copies: `Module.to` moves in place, and the fixture is shared by the other device's case
    original, traceable = copy.deepcopy(original).to(device), copy.deepcopy(traceable).to(device)
    sample = {key: value.to(device) for key, value in sample.items()}
    with torch.no_grad():
        expected = run_eagerly(original, sample).logits
        # the same kernels on the same weights: exact
        torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["logits"], expected, rtol=0, atol=0)
