"""The chain makes eager's kernel calls on eager's memory layouts, so it is exact on any CPU.

A fresh clone failed on an AMD EPYC: BigBird's chain was 1.49e-8 from eager in 9 of 1728 logits,
equal on Intel. The chain ran with the cache off, eager with its config's ``use_cache=True``, whose
``DynamicCache`` concatenates the keys onto an empty tensor: eager's ``query @ key.transpose(-1, -2)``
got a transposed contiguous key, the chain's a copy of a strided one, and MKL rounds those two BLAS
calls differently on that CPU. These tests see such a difference on any CPU, by comparing the calls.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from patcher import load_traceable, trace_subgraphs
from patcher.samples import text_sample
from patcher.verify import run_eagerly
from patcher.verify.kernels import KernelLayoutMismatch, record_kernel_calls, verify_kernel_layouts
from tiny_layers import Layer
from tiny_models import TEXT_MODELS, decoder_layer, tiny_model


def _bigbird():
    config = transformers.BigBirdConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, attention_type="block_sparse", block_size=4, num_random_blocks=1,
        is_decoder=True, pad_token_id=0)
    torch.manual_seed(0)
    model = load_traceable(transformers.BigBirdForCausalLM, targets=["BigBirdLayer"])(config).eval()
    return model, r"re:bert\.encoder\.layer\.\d+$"


def _gpt2(attention: str):
    config = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)
    config._attn_implementation = attention
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval(), "GPT2Block"


def _traced(model, targets):
    sample = text_sample(model.config, batch_size=2, seq_len=7, left_padding=1)
    other = text_sample(model.config, batch_size=1, seq_len=9, generator=torch.Generator().manual_seed(1))
    return trace_subgraphs(model, sample, targets), other


@pytest.mark.parametrize("name", sorted(TEXT_MODELS))
def test_the_chain_makes_eagers_kernel_calls_on_eagers_layouts(name):
    model = tiny_model(name)
    subgraphs, other = _traced(model, [decoder_layer(name)])
    assert verify_kernel_layouts(model, subgraphs, other) > 10 * model.config.num_hidden_layers


@pytest.mark.parametrize("build", [_bigbird, lambda: _gpt2("eager"), lambda: _gpt2("sdpa")],
                         ids=["BigBird", "GPT2-eager", "GPT2-sdpa"])
def test_attention_of_eager_and_chain_runs_on_the_same_layouts_with_the_cache_off(build):
    model, targets = build()
    subgraphs, other = _traced(model, targets)
    verify_kernel_layouts(model, subgraphs, other)


@pytest.mark.parametrize("build, kernel, line", [
    (_bigbird, "aten.bmm", "modeling_big_bird"),
    (lambda: _gpt2("eager"), "aten.bmm", "modeling_gpt2.py"),
    (lambda: _gpt2("sdpa"), "aten._scaled_dot_product", "sdpa_attention.py"),
], ids=["BigBird", "GPT2-eager", "GPT2-sdpa"])
def test_eager_with_the_cache_on_hands_attention_other_layouts_and_the_check_names_the_call(build, kernel, line):
    # The AMD failure, seen on any CPU: with the cache on, attention gets the cache's contiguous keys.
    model, targets = build()
    subgraphs, other = _traced(model, targets)
    with pytest.raises(KernelLayoutMismatch) as caught:
        verify_kernel_layouts(model, subgraphs, other, eager_flags={"use_cache": True})
    eager_line, chain_line = str(caught.value).splitlines()[1:3]
    assert eager_line.lstrip().startswith(f"eager: {kernel}") and line in eager_line
    assert "strides" in eager_line and eager_line.split(" at ")[0] != chain_line.split(" at ")[0]


def test_a_strided_copy_the_chain_makes_is_a_difference():
    # Calls that only move values (the copy) are not compared; the matmul that reads the copy is.
    weight = torch.randn(8, 8)
    x = torch.randn(4, 8)
    eager = record_kernel_calls(lambda: x @ weight.t())
    chain = record_kernel_calls(lambda: x @ weight.t().contiguous())
    assert [call.op for call in eager] == [call.op for call in chain] == ["aten.mm"]
    assert eager[0].operands[1].stride == (1, 8) and chain[0].operands[1].stride == (8, 1)
    assert eager[0].key() != chain[0].key()


def test_run_eagerly_is_the_cache_off_run_the_graph_was_traced_for():
    model = tiny_model("LlamaForCausalLM")
    sample = text_sample(model.config, batch_size=1, seq_len=4)
    assert model.config.use_cache is True
    assert run_eagerly(model, sample).past_key_values is None
    assert run_eagerly(model, {**sample, "use_cache": True}).past_key_values is not None  # a given flag wins


class _TwoHeads(nn.Module):
    """Two independent heads after one layer, computed in ``order``: as rule TZ108 leaves a loop over
    a set's items in first-occurrence order where eager, in some processes, iterates them the other way."""

    order = ("narrow", "wide")

    def __init__(self):
        super().__init__()
        self.layer = Layer()
        self.narrow = nn.Linear(4, 3)
        self.wide = nn.Linear(4, 5)

    def forward(self, hidden):
        hidden = self.layer(hidden)
        heads = {name: getattr(self, name)(hidden) for name in self.order}
        return {"narrow": heads["narrow"], "wide": heads["wide"]}


class _TwoHeadsTheOtherWay(_TwoHeads):
    order = ("wide", "narrow")


class _TransposedWide(_TwoHeads):
    def forward(self, hidden):
        hidden = self.layer(hidden)
        wide = hidden @ self.wide.weight.t().contiguous() + self.wide.bias  # another layout for the same numbers
        return {"narrow": self.narrow(hidden), "wide": wide}


def test_the_same_calls_in_another_order_are_told_apart_from_another_layout():
    torch.manual_seed(0)
    model = _TwoHeads().eval()
    subgraphs = trace_subgraphs(model, {"hidden": torch.randn(2, 4)}, ["Layer"])
    batch = {"hidden": torch.randn(3, 4)}
    other_way = _TwoHeadsTheOtherWay().eval()
    other_way.load_state_dict(model.state_dict())
    with pytest.raises(KernelLayoutMismatch) as caught:
        verify_kernel_layouts(model, subgraphs, batch, eager_model=other_way)
    assert caught.value.reordered and "in another order" in str(caught.value)
    assert verify_kernel_layouts(model, subgraphs, batch, eager_model=other_way, any_order=True) == 4  # 3 addmm, relu
    transposed = _TransposedWide().eval()
    transposed.load_state_dict(model.state_dict())
    for any_order in (False, True):
        with pytest.raises(KernelLayoutMismatch) as caught:
            verify_kernel_layouts(model, subgraphs, batch, eager_model=transposed, any_order=any_order)
        assert not caught.value.reordered and "differs" in str(caught.value)
