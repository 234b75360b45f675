"""A container the forward makes for the modules it calls to share must be each batch's own.

Gemma 3n, Gemma 4 (text and multimodal), Gemma 4 unified and Mistral Large 4 make
``shared_kv_states = KVSharingDict()`` (a ``UserDict``) in the text model's forward and hand it to
every decoder layer: the layers that own keys and values store them in it, the KV-sharing layers read
them. The graph kept the dict made while tracing as a constant, handed to every run. ``run_subgraphs``
fills it before reading it, so it was right by accident of order; llm-compressor's sequential
pipeline runs subgraph 0 on every batch, then subgraph 1 on every batch, so a sharing layer read the
keys the *last* batch had stored: the logits of every batch but the last were 0.2 to 0.6 off, with no
error (:func:`run_layer_by_layer` below, on the tiny configs made to share KV). A plain ``{}`` was
wrong in every order: fx writes it into the graph's code as a literal, so each layer got a new one.
"""

from __future__ import annotations

import copy
import inspect
import os
from collections import UserDict

import pytest
import torch
import transformers
from torch import nn

from patcher import SharedStateError, load_traceable, run_subgraphs, trace_graph, trace_subgraphs
from patcher.coverage import shrink_config
from patcher.coverage.sweep_samples import coverage_text_sample
from patcher.models import random_model
from patcher.samples import multimodal_sample
from patcher.verify import run_eagerly
from versions import class_param


def run_layer_by_layer(model, subgraphs, batches, *, copying: bool):
    """The outputs of each batch, run the way llm-compressor's sequential pipeline runs the chain:
    each subgraph on every batch before the next subgraph, twice (a calibration pass, then the
    pass whose outputs are kept), each batch with its own intermediates, values picked by ``in``
    ``input_names`` and dropped once consumed. ``copying``: the intermediates cache stores and
    fetches copies (llm-compressor rebuilds every dict and list it offloads), else the objects."""
    def kept(value):
        return copy.deepcopy(value) if copying and not isinstance(value, torch.Tensor) else value

    intermediates = [{name: kept(value) for name, value in batch.items()} for batch in batches]
    outputs = [None] * len(batches)
    for subgraph in subgraphs:
        for _ in range(2):
            for index, values in enumerate(intermediates):
                step = {name: kept(value) for name, value in values.items() if name in subgraph.input_names}
                outputs[index] = subgraph.forward(model, **step)
        for values, output in zip(intermediates, outputs):
            values.update({name: kept(value) for name, value in output.items()})
            for name in subgraph.consumed_names:
                values.pop(name, None)
    return outputs


def _gemma4_sharing(config):
    # four layers: the first of each kind stores its keys and values, the last two read them
    text = config.get_text_config()
    text.num_hidden_layers = 4
    text.layer_types = ["sliding_attention", "full_attention"] * 2
    text.num_kv_shared_layers = 2
    return config


def _mistral_large4_sharing(config):
    text = config.get_text_config()
    text.kv_source_layers = [0, 0, 2, 2]  # layers 1 and 3 read the latents of layers 0 and 2
    text.no_rope_layers = [1, 1, 1, 1]  # a reading layer must take the kind of key its source stores
    return config



#: class name -> (what makes its tiny config share KV, the decoder layer class)
KV_SHARING = {
    "Gemma3nForCausalLM": (None, "Gemma3nTextDecoderLayer"),  # the tiny config shares
    "Gemma4ForCausalLM": (_gemma4_sharing, "Gemma4TextDecoderLayer"),
    "Gemma4ForConditionalGeneration": (_gemma4_sharing, "Gemma4TextDecoderLayer"),
    "Gemma4UnifiedForCausalLM": (_gemma4_sharing, "Gemma4UnifiedTextDecoderLayer"),
    "MistralLarge4ForConditionalGeneration": (_mistral_large4_sharing, "MistralLarge4TextDecoderLayer"),
}


def _assert_shares_kv(text_config) -> None:
    """The config really has layers that store keys and layers that reuse them (else the test proves
    nothing): ``kv_sharing_modes`` where transformers has it (5.23 on), else the count of sharing layers."""
    modes = getattr(text_config, "kv_sharing_modes", None)
    if modes is not None:
        assert "store" in modes and any(mode and mode.startswith("reuse") for mode in modes)
    else:
        assert 0 < text_config.num_kv_shared_layers < text_config.num_hidden_layers


@pytest.mark.parametrize("name", [class_param(name) for name in KV_SHARING])
def test_kv_sharing_layers_read_their_own_batch(name):
    model_class = getattr(transformers, name)
    shares, layer = KV_SHARING[name]
    config = shrink_config(model_class.config_class)
    config = shares(config) if shares else config
    _assert_shares_kv(config.get_text_config())
    model = random_model(load_traceable(model_class), config, seed=0)
    # the same shapes, other tokens: another batch's keys fit, so nothing fails where they are read
    batches = [coverage_text_sample(config, batch_size=2, seq_len=7, left_padding=2 * (seed == 0), seed=seed)
               for seed in range(3)]
    for batch in batches[1:]:
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    subgraphs = trace_subgraphs(model, batches[0], [layer], )
    with torch.no_grad():
        expected = [run_eagerly(model, batch).logits for batch in batches]
        for copying in (False, True):
            outputs = run_layer_by_layer(model, subgraphs, batches, copying=copying)
            for index, (output, logits) in enumerate(zip(outputs, expected)):
                torch.testing.assert_close(output["logits"], logits, rtol=0, atol=0,
                                           msg=lambda m: f"batch {index} (copying={copying}): {m}")
        for batch, logits in zip(batches, expected):
            torch.testing.assert_close(run_subgraphs(model, subgraphs, batch)["logits"], logits, rtol=0, atol=0)


def test_kv_sharing_layers_read_their_own_batch_with_images():
    model_class = transformers.Gemma4ForConditionalGeneration
    config = _gemma4_sharing(shrink_config(model_class.config_class))
    _assert_shares_kv(config.get_text_config())
    model = random_model(load_traceable(model_class), config, seed=0)
    batches = [multimodal_sample(config, batch_size=1, seq_len=8, model=model,
                                 generator=torch.Generator().manual_seed(seed)) for seed in range(3)]
    assert "pixel_values" in batches[0]
    # Gemma 4 reads image positions from input_ids; the eager model ignores mm_token_type_ids too
    subgraphs = trace_subgraphs(model, batches[0], ["Gemma4TextDecoderLayer"],
                                unused_inputs=["mm_token_type_ids"])
    with torch.no_grad():
        expected = [run_eagerly(model, batch).logits for batch in batches]
        for index, (output, logits) in enumerate(zip(run_layer_by_layer(model, subgraphs, batches, copying=True),
                                                     expected)):
            torch.testing.assert_close(output["logits"], logits, rtol=0, atol=0, msg=lambda m: f"batch {index}: {m}")


class _Writer(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, state):
        if isinstance(state, list):
            state.append(self.proj(x))
        else:
            state["keys"] = self.proj(x)
        return x + 1


class _Reader(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x, state):
        # `.get` with a default: a missing entry is no error, so only the numbers tell
        stored = sum(state) if isinstance(state, list) else state.get("keys", 0)
        return self.proj(x) + stored


class _Sharing(nn.Module):
    """Two writers and a reader sharing one container the forward makes, as Gemma 4's layers do."""

    def __init__(self, make):
        super().__init__()
        self.make = make
        self.first, self.second, self.reader = _Writer(), _Writer(), _Reader()

    def forward(self, x):
        state = self.make()
        x = self.first(x, state)
        x = self.second(x, state)
        return {"out": self.reader(x, state), "state": state}


TARGETS = ["_Writer", "_Reader"]
_HERE = os.path.relpath(__file__)


@pytest.mark.parametrize("make", [dict, UserDict, list], ids=lambda make: make.__name__)
def test_a_container_the_layers_fill_is_each_runs_own(make):
    model = _Sharing(make).eval()
    batches = [{"x": torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))} for seed in range(3)]
    subgraphs = trace_subgraphs(model, batches[0], TARGETS)
    traced = trace_graph(model, batches[0], TARGETS)
    with torch.no_grad():
        expected = [model(**batch) for batch in batches]
        for copying in (False, True):
            for output, eager in zip(run_layer_by_layer(model, subgraphs, batches, copying=copying), expected):
                torch.testing.assert_close(output["out"], eager["out"], rtol=0, atol=0)
        for batch, eager in zip(batches, expected):
            for output in (run_subgraphs(model, subgraphs, batch), traced.forward(model, **batch)):
                torch.testing.assert_close(output["out"], eager["out"], rtol=0, atol=0)
                # what the model returns is the container the run's modules filled, of its own class
                assert type(output["state"]) is type(eager["state"])
                torch.testing.assert_close(list(output["state"].values()) if make is not list else output["state"],
                                           list(eager["state"].values()) if make is not list else eager["state"],
                                           rtol=0, atol=0)


class _ChangedAfterHanding(_Sharing):
    def forward(self, x):
        state = {}
        x = self.first(x, state)
        state["scale"] = 2  # the graph cannot hand this on: it exists only while tracing
        return {"out": self.reader(x, state)}


def test_traced_code_changing_the_container_after_a_layer_got_it_is_refused():
    model = _ChangedAfterHanding(dict).eval()
    with pytest.raises(SharedStateError) as caught:
        trace_subgraphs(model, {"x": torch.randn(2, 4)}, TARGETS)
    message = str(caught.value)
    lines, start = inspect.getsourcelines(_ChangedAfterHanding.forward)
    first, reader = (start + index for index, line in enumerate(lines) if "(x, state)" in line)
    # where the first module got it, and where it is handed on changed
    assert f"module 'first' at {_HERE}:{first} in forward(), which got it first" in message
    assert f"{_HERE}:{reader} in forward(), where it is handed on again" in message
    assert "fix: change the dict before the first module gets it" in message


class _Applies(nn.Module):
    def forward(self, x, modules):
        return modules["proj"](x)


class _HandsAModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.applies = _Applies()

    def forward(self, x):
        return {"out": self.applies(x, {"proj": self.proj})}


def test_a_dict_of_modules_handed_to_a_module_reads_them_when_the_graph_runs():
    # fx's literal reads `self.proj` at every run; made anew from what it held while tracing, it
    # would hand the module the Linear the model had then
    model = _HandsAModule().eval()
    x = torch.randn(2, 4)
    subgraphs = trace_subgraphs(model, {"x": x}, ["_Applies"])
    model.proj = nn.Linear(4, 4).eval()  # new weights loaded by assigning a module, as a loader may
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, {"x": x})["out"], model(x)["out"], rtol=0, atol=0)
