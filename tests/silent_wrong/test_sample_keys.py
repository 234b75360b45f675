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


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class _RenamesImages(torch.nn.Module):
    """Fuyu's pattern: `image_patches` renamed to `pixel_values` by @deprecate_kwarg, and the old
    name still a parameter of the forward's body, read by nothing."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Layer(), _Layer()])

    from transformers.utils.deprecation import deprecate_kwarg

    @deprecate_kwarg("image_patches", version="v99", new_name="pixel_values")
    def forward(self, x, image_patches=None, pixel_values=None):
        if pixel_values is not None:
            x = x + pixel_values.sum(0)
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_deprecated_keyword_is_named_with_its_new_name():
    """The tracer binds the sample to the forward's body, where eager never sees the old name: the
    pixels became an input nothing read, and the advice was to declare them unused."""
    model = _RenamesImages().eval()
    old = {"x": torch.randn(3, 4), "image_patches": torch.randn(2, 4)}
    with pytest.raises(SampleInputError, match=r"'image_patches' is a deprecated name: .* renames it to 'pixel_values'"):
        trace_subgraphs(model, old, ["_Layer"])
    new = {"x": old["x"], "pixel_values": old["image_patches"]}
    subgraphs = trace_subgraphs(model, new, ["_Layer"])
    with torch.no_grad():
        assert torch.equal(run_subgraphs(model, subgraphs, new)["output"], model(**old))
