"""Branches on shapes around sequential targets (rule TZ105): the patcher keeps them in the code
as ``_decided_*`` conditions, the tracer follows the sample's branch, and the graph checks the
condition at every run, so an input that would take the other branch raises instead of silently
running the traced one."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch import nn

from patcher.partition import run_subgraphs, trace_subgraphs
from patcher.rewrite import patch_source
from patcher.trace import BranchDecisionError, trace_graph
from patcher.trace.errors import InputMismatchError
from rewrite._fixture_runtime import load

CHUNKED = """
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, hidden_states):
        return self.proj(hidden_states)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.chunk_size = 4

    def forward(self, inputs: torch.Tensor):
        hidden_states = self.embed(inputs)
        if not self.training and self.chunk_size < hidden_states.shape[1]:
            for block in self.blocks:
                hidden_states = block(hidden_states) * 2
        else:
            for block in self.blocks:
                hidden_states = block(hidden_states)
        return hidden_states
"""


@pytest.fixture
def models(tmp_path):
    source = textwrap.dedent(CHUNKED)
    result = patch_source(source, module_name="decided_chunked", source_path=str(tmp_path / "chunked.py"),
                          targets=["Block"])
    assert "_decided_forward_chunk_size_hidden_states(" in result.code and not result.blockers
    original = load(source, tmp_path / "original.py", "tz_decided_original")
    patched = load(result.code, tmp_path / "patched.py", "tz_decided_patched")
    torch.manual_seed(0)
    eager = original.Model().eval()
    traceable = patched.Model().eval()
    traceable.load_state_dict(eager.state_dict())
    return eager, traceable


@pytest.mark.parametrize("traced_length, same_branch, other_branch", [(3, [(1, 2), (3, 4)], (2, 6)),
                                                                      (6, [(1, 5), (3, 9)], (2, 4))])
def test_the_graph_runs_the_samples_branch_and_refuses_the_other(models, traced_length, same_branch, other_branch):
    eager, traceable = models
    sample = {"inputs": torch.randn(2, traced_length, 4)}
    subgraphs = trace_subgraphs(traceable, sample, ["Block"], [])
    assert len(subgraphs) == 3  # the blocks stayed in the graph, one subgraph each
    with torch.no_grad():
        for batch, length in [(2, traced_length), *same_branch]:
            inputs = {"inputs": torch.randn(batch, length, 4)}
            torch.testing.assert_close(run_subgraphs(traceable, subgraphs, inputs)["output"], eager(**inputs),
                                       rtol=0, atol=0)
        inputs = {"inputs": torch.randn(*other_branch, 4)}
        eager(**inputs)  # eager takes the other branch
        with pytest.raises(BranchDecisionError, match="was (True|False) while tracing"):
            run_subgraphs(traceable, subgraphs, inputs)
        with pytest.raises(BranchDecisionError):
            trace_graph(traceable, sample, ["Block"], []).forward(traceable, **inputs)


def test_tiny_xlstm_traces_around_its_chunked_path_and_refuses_long_inputs(tmp_path):
    # xLSTM processes sequences longer than max_inference_chunksize in chunks, in a branch around
    # its blocks; the graph holds the unchunked branch and checks the length at every run
    from transformers import xLSTMConfig, xLSTMForCausalLM

    from patcher.models import random_model
    from patcher.models.traceable import load_traceable

    config = xLSTMConfig(vocab_size=64, hidden_size=16, embedding_dim=16, num_heads=2, num_blocks=2,
                         max_inference_chunksize=8, qk_dim_factor=0.5, v_dim_factor=1.0)
    eager = random_model(xLSTMForCausalLM, config, 0, torch.float32).eval()
    traceable_cls = load_traceable(xLSTMForCausalLM, targets=["xLSTMBlock"], locations=[(1447, "TZ105")],
                                   cache_dir=tmp_path)
    traceable = random_model(traceable_cls, config, 0, torch.float32).eval()
    traceable.load_state_dict(eager.state_dict())
    sample = {"input_ids": torch.randint(0, 64, (2, 7))}
    subgraphs = trace_subgraphs(traceable, sample, ["xLSTMBlock"], [])
    assert len(subgraphs) == 3
    with torch.no_grad():
        for shape in [(2, 7), (1, 5), (3, 8)]:
            inputs = {"input_ids": torch.randint(0, 64, shape)}
            torch.testing.assert_close(run_subgraphs(traceable, subgraphs, inputs)["logits"],
                                       eager(**inputs, use_cache=False).logits, rtol=0, atol=0)
        with pytest.raises(BranchDecisionError):
            run_subgraphs(traceable, subgraphs, {"input_ids": torch.randint(0, 64, (2, 12))})


#: Nested shape decisions around blocks reached only through a method of the class
#: (``self.image_features``), one of them on a module's output, the inner chain ending in an ``else``.
RANK_DISPATCH = """
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(2)])

    def image_features(self, pixel_values):
        for block in self.blocks:
            pixel_values = block(pixel_values)
        return pixel_values

    def forward(self, input_ids, pixel_values):
        embeds = self.embed(input_ids)
        features = torch.zeros_like(embeds[:, 0])
        if embeds.shape[1] != 1:
            if pixel_values.ndim == 3:
                features = self.image_features(pixel_values).mean(1)
            elif pixel_values.ndim == 4:
                features = self.image_features(pixel_values.flatten(1, 2)).mean(1)
            else:
                raise ValueError("rank 3 or 4")
        return embeds + features[:, None]
"""


@pytest.fixture
def rank_models(tmp_path):
    source = textwrap.dedent(RANK_DISPATCH)
    result = patch_source(source, module_name="decided_ranks", source_path=str(tmp_path / "ranks.py"),
                          targets=["Block"])
    assert not result.blockers
    assert "(pixel_values.ndim == 3)" in result.code and "(embeds.shape[1] != 1)" in result.code
    assert "_wrapped" not in result.code  # wrapping either branch would hide the blocks
    original = load(source, tmp_path / "original.py", "tz_ranks_original")
    patched = load(result.code, tmp_path / "patched.py", "tz_ranks_patched")
    torch.manual_seed(0)
    eager = original.Model().eval()
    traceable = patched.Model().eval()
    traceable.load_state_dict(eager.state_dict())
    return eager, traceable


def _rank_sample(batch, seq, *pixels):
    return {"input_ids": torch.randint(0, 10, (batch, seq)), "pixel_values": torch.randn(batch, *pixels, 4)}


def test_decisions_around_a_method_reaching_the_blocks_keep_them_and_equal_eager(rank_models):
    eager, traceable = rank_models
    subgraphs = trace_subgraphs(traceable, _rank_sample(2, 3, 5), ["Block"], [])
    assert [s.targets for s in subgraphs] == [["blocks.0"], ["blocks.1"], []]
    for sample in (_rank_sample(2, 3, 5), _rank_sample(1, 6, 2), _rank_sample(3, 2, 7)):
        with torch.no_grad():
            torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["output"], eager(**sample),
                                       rtol=0, atol=0)


# Rank 4 pixels take the other branch (an input's rank is checked before any node runs), one
# token skips the images (the decided test on the embedding's output refuses it): the graph holds neither.
@pytest.mark.parametrize("other, refusal, message", [
    (_rank_sample(2, 3, 2, 5), InputMismatchError, "traced with 3"),
    (_rank_sample(2, 1, 5), BranchDecisionError, "was True while tracing"),
], ids=["rank", "one token"])
def test_an_input_deciding_a_nested_test_otherwise_is_refused(rank_models, other, refusal, message):
    eager, traceable = rank_models
    subgraphs = trace_subgraphs(traceable, _rank_sample(2, 3, 5), ["Block"], [])
    with torch.no_grad():
        eager(**other)  # eager runs it
        with pytest.raises(refusal, match=message):
            run_subgraphs(traceable, subgraphs, other)


class ChunkedEncoder(nn.Module):
    """Encodes a clip chunk by chunk, carrying a cache from one chunk to the next (as VibeVoice
    ASR's tokenizers do): a Python loop over the pieces of a split traced value."""

    def __init__(self, chunk_size: int, by_method: bool):
        super().__init__()
        self.chunk_size, self.by_method = chunk_size, by_method
        self.encode = nn.Linear(chunk_size, 4)
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))

    def forward(self, clip):
        pieces = clip.split(self.chunk_size, dim=-1) if self.by_method else torch.split(clip, self.chunk_size, dim=-1)
        cache, encoded = None, []
        for piece in pieces:
            hidden = self.encode(piece) if cache is None else self.encode(piece) + cache
            encoded.append(hidden)
            cache = hidden
        hidden = torch.stack(encoded, dim=1)
        for layer in self.layers:
            hidden = torch.relu(layer(hidden))
        return {"logits": hidden}


@pytest.mark.parametrize("by_method", [False, True], ids=["torch.split", "Tensor.split"])
def test_a_loop_over_a_split_runs_the_samples_count_of_pieces_and_refuses_another(by_method):
    torch.manual_seed(0)
    model = ChunkedEncoder(chunk_size=5, by_method=by_method).eval()
    sample = {"clip": torch.randn(2, 15)}
    subgraphs = trace_subgraphs(model, sample, [r"re:layers\.\d+"])
    with torch.no_grad():
        for inputs in (sample, {"clip": torch.randn(4, 15)}):
            assert torch.equal(run_subgraphs(model, subgraphs, inputs)["logits"], model(**inputs)["logits"])
        with pytest.raises(BranchDecisionError, match="gives 4 pieces here and gave 3 while tracing"):
            run_subgraphs(model, subgraphs, {"clip": torch.randn(2, 20)})


def test_vibevoice_asr_encodes_its_clip_chunk_by_chunk_in_the_graph_equal_to_eager():
    """VibeVoice ASR's get_audio_features loops over `torch.split(input_values, chunk_size)` around
    its tokenizer encoders; the loop is traced over the sample's chunks, equal to eager on two clip
    layouts, and a clip of more chunks is refused."""
    import transformers

    from patcher import DEFAULT_IGNORE, load_traceable
    from patcher.samples.audio import fill_audio_ids
    from patcher.coverage import shrink_config
    from patcher.coverage.check import _build
    from patcher.samples.audio.modality import audio_samples

    cls = transformers.VibeVoiceAsrForConditionalGeneration
    config = shrink_config(cls.config_class)
    fill_audio_ids(config, cls)
    # chunks of 60 s by default: the clips in chunks of 3200 samples instead, the cache carried over
    config.acoustic_tokenizer_chunk_size = 3200
    original = _build(cls, config, 0).eval()
    samples = audio_samples(config, original, 0)  # 6400 samples (2 chunks), then 9600 (3 chunks)
    # patched with its targets (as the sweep does), the loop stays in the code: the tokenizers' cache
    # layers it reaches hold the decoder's layer types (patched without, the loop is one opaque call)
    model = _build(load_traceable(cls, targets=["Qwen2DecoderLayer"]), config, 0).eval()
    model.load_state_dict(original.state_dict())
    subgraphs = list(trace_subgraphs(model, samples[0], ["Qwen2DecoderLayer"], DEFAULT_IGNORE))
    assert len(subgraphs) == config.get_text_config().num_hidden_layers + 1
    one_row = {key: value[:1] if isinstance(value, torch.Tensor) else value  # another shape, two chunks too
               for key, value in samples[0].items()}
    with torch.no_grad():
        for sample in (samples[0], one_row):
            expected = original(**sample, use_cache=False).logits
            assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], expected)
        original(**samples[1], use_cache=False)  # eager runs three chunks
        with pytest.raises(BranchDecisionError, match="gives 3 pieces here and gave 2 while tracing"):
            run_subgraphs(model, subgraphs, samples[1])
