"""Sample keys must be inputs the model takes: a typo is not a new graph input."""

import pytest
import torch

from patcher import SampleInputError, run_subgraphs, trace_subgraphs
from patcher.samples import text_sample
from tiny_models import tiny_model

TARGETS = ["LlamaDecoderLayer"]


@pytest.fixture(scope="module")
def llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    return model, text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)


def test_a_misspelt_sample_key_is_refused_with_the_closest_name(llama):
    model, sample = llama
    typo = {"input_ids": sample["input_ids"], "attenton_mask": sample["attention_mask"]}
    # LlamaForCausalLM.forward takes **kwargs: the typo used to become a graph input nothing read
    with pytest.raises(SampleInputError, match=r"'attenton_mask'.*\n.*did you mean 'attention_mask'\?"):
        trace_subgraphs(model, typo, TARGETS)


@pytest.mark.parametrize("key, value", [("output_attentions", False), ("output_router_logits", False)])
def test_keys_transformers_takes_through_kwargs_still_trace(llama, key, value):
    model, sample = llama
    with_kwarg = {**sample, key: value}
    subgraphs = trace_subgraphs(model, with_kwarg, TARGETS)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, with_kwarg)["logits"], model(**with_kwarg).logits)


def test_position_ids_still_trace(llama):
    model, sample = llama
    with_positions = {**sample, "position_ids": torch.arange(6).expand(2, 6)}
    subgraphs = trace_subgraphs(model, with_positions, TARGETS)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, with_positions)["logits"],
                                   model(**with_positions).logits)


def test_the_coverage_sweep_gives_decoder_only_heads_no_decoder_input_ids(tmp_path):
    from patcher.coverage import check_architecture

    # PegasusForCausalLM's config says is_encoder_decoder; its forward takes **kwargs, so the sweep's
    # decoder_input_ids used to be traced as an input nothing read (now refused as unknown)
    row = check_architecture("PegasusForCausalLM", cache_dir=tmp_path)
    assert row.text.traced and row.text.equal, (row.text.stage, row.text.error)
