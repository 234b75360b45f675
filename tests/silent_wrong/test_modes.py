"""A graph runs in the train/eval mode it was traced in; layerdrop is refused in train mode.

``self.training`` branches (functional dropout, layerdrop) are decided while tracing: a graph
traced in train mode and run in eval mode kept dropping out, different numbers on every run.
"""

import pytest
import torch
from transformers import OPTConfig, OPTForCausalLM

from patcher import TrainingModeError, run_subgraphs, trace_graph, trace_subgraphs
from patcher.samples import text_sample
from tiny_models import tiny_model

TARGETS = ["LlamaDecoderLayer"]


@pytest.fixture
def llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2, attention_dropout=0.5)
    return model, text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)


def test_subgraphs_traced_in_train_mode_refuse_to_run_in_eval_mode(llama):
    model, sample = llama
    subgraphs = trace_subgraphs(model.train(), sample, TARGETS)
    model.eval()
    with pytest.raises(TrainingModeError, match=r"traced with LlamaForCausalLM in train mode.*in eval mode now.*"
                                                r"Trace in the mode you will run in"):
        run_subgraphs(model, subgraphs, sample)
    with pytest.raises(TrainingModeError, match="Trace in the mode you will run in"):
        subgraphs[0].forward(model, **sample)
    model.train()
    assert run_subgraphs(model, subgraphs, sample)["logits"].shape == (2, 6, model.config.vocab_size)


def test_a_graph_traced_in_eval_mode_refuses_train_mode(llama):
    model, sample = llama
    traced = trace_graph(model, sample, TARGETS)
    model.train()
    with pytest.raises(TrainingModeError, match=r"in eval mode, and it is in train mode now"):
        traced.forward(model, **sample)


def test_one_submodule_in_another_mode_is_named(llama):
    model, sample = llama
    subgraphs = trace_subgraphs(model, sample, TARGETS)
    model.model.layers[1].self_attn.train()
    with pytest.raises(TrainingModeError, match=r"module 'model.layers.1.self_attn' in eval mode"):
        run_subgraphs(model, subgraphs, sample)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits)


def tiny_opt(layerdrop):
    torch.manual_seed(0)
    config = OPTConfig(vocab_size=64, hidden_size=16, ffn_dim=32, num_hidden_layers=4, num_attention_heads=2,
                       word_embed_proj_dim=16, max_position_embeddings=64, layerdrop=layerdrop)
    return OPTForCausalLM(config)


def test_layerdrop_in_train_mode_is_refused_at_trace_time():
    model = tiny_opt(layerdrop=0.5).train()
    sample = text_sample(model.config, batch_size=1, seq_len=5)
    # the graph used to keep the layers of one draw (1 or 2 of 4) for ever
    with pytest.raises(TrainingModeError, match=r"train mode with layerdrop \(.*config.layerdrop=0.5\).*"
                                                r"Trace in eval mode"):
        trace_subgraphs(model, sample, ["OPTDecoderLayer"])


def test_layerdrop_in_eval_mode_traces_every_layer():
    model = tiny_opt(layerdrop=0.5).eval()
    sample = text_sample(model.config, batch_size=2, seq_len=5, left_padding=1)
    subgraphs = trace_subgraphs(model, sample, ["OPTDecoderLayer"])
    assert [target for subgraph in subgraphs for target in subgraph.targets] == [
        f"model.decoder.layers.{index}" for index in range(4)]
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits)
