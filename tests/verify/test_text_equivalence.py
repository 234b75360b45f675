"""The subgraph chain computes exactly what the eager model computes, for any input shape."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from patcher import run_subgraphs, trace_graph, trace_subgraphs
from patcher.samples import text_sample
from patcher.verify import run_eagerly
from tiny_models import TEXT_MODELS, decoder_layer, tiny_model

_TRACED: dict = {}


def traced(name: str, device: str):
    """Trace once per model and device on a fixed sample; tests then vary the inputs."""
    key = (name, device)
    if key not in _TRACED:
        model = tiny_model(name).to(device)
        sample = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2, device=device)
        _TRACED[key] = model, trace_subgraphs(model, sample, [decoder_layer(name)])
    return _TRACED[key]


@st.composite
def text_inputs(draw):
    batch_size = draw(st.integers(1, 3))
    seq_len = draw(st.integers(1, 12))
    left_padding = draw(st.integers(0, seq_len - 1))
    seed = draw(st.integers(0, 2**16))
    return batch_size, seq_len, left_padding, seed


@pytest.mark.parametrize("name", sorted(TEXT_MODELS))
def test_subgraph_count_is_targets_called_plus_one(name, device):
    model, subgraphs = traced(name, device)
    assert len(subgraphs) == model.config.num_hidden_layers + 1
    assert [target for subgraph in subgraphs for target in subgraph.targets] == [
        f"model.layers.{index}" for index in range(model.config.num_hidden_layers)
    ]


@pytest.mark.parametrize("name", sorted(TEXT_MODELS))
@given(inputs=text_inputs())
def test_subgraph_chain_equals_eager(name, device, inputs):
    batch_size, seq_len, left_padding, seed = inputs
    model, subgraphs = traced(name, device)
    generator = torch.Generator().manual_seed(seed)
    sample = text_sample(model.config, batch_size=batch_size, seq_len=seq_len, left_padding=left_padding,
                         device=device, generator=generator)
    with torch.no_grad():
        expected = run_eagerly(model, sample).logits
        got = run_subgraphs(model, subgraphs, sample)["logits"]
    # Same modules, same kernels: exact.
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["LlamaForCausalLM", "MixtralForCausalLM", "Gemma3ForCausalLM"])
def test_whole_graph_equals_eager(name, device):
    model = tiny_model(name).to(device)
    sample = text_sample(model.config, batch_size=2, seq_len=5, left_padding=1, device=device)
    graph = trace_graph(model, sample, [decoder_layer(name)])
    other = text_sample(model.config, batch_size=1, seq_len=9, device=device)
    with torch.no_grad():
        for inputs in (sample, other):
            torch.testing.assert_close(graph.forward(model, **inputs)["logits"], run_eagerly(model, inputs).logits,
                                       rtol=0, atol=0)


def test_without_attention_mask(device):
    model = tiny_model("Qwen2ForCausalLM").to(device)
    sample = {"input_ids": text_sample(model.config, seq_len=7, device=device)["input_ids"]}
    subgraphs = trace_subgraphs(model, sample, ["Qwen2DecoderLayer"])
    assert subgraphs[0].input_names == ["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], run_eagerly(model, sample).logits,
                                   rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_on_gpu(dtype):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    model = tiny_model("LlamaForCausalLM", dtype=dtype).to("cuda")
    sample = text_sample(model.config, batch_size=2, seq_len=8, left_padding=3, device="cuda")
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], run_eagerly(model, sample).logits,
                                   rtol=0, atol=0)


def test_graph_traced_on_meta_runs_on_real_model(device):
    """Trace a meta-device copy, run the subgraphs on a model with real weights."""
    from patcher.models import build_model

    model = tiny_model("LlamaForCausalLM").to(device)
    meta_model = build_model(type(model), model.config, device="meta")
    subgraphs = trace_subgraphs(meta_model, text_sample(model.config, device="meta"), ["LlamaDecoderLayer"])
    sample = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2, device=device)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], run_eagerly(model, sample).logits,
                                   rtol=0, atol=0)
