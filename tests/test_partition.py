"""The partition: boundaries, several targets per subgraph, intermediates and meta models."""

import math

import pytest
import torch
from torch import nn

from patcher import ModelMismatchError, SampleInputError, run_subgraphs, trace_graph, trace_subgraphs
from patcher.models import build_model, load_config
from patcher.samples import text_sample
from tiny_models import tiny_model


@pytest.mark.parametrize("per_subgraph", [1, 2, 3, 4])
def test_targets_per_subgraph(per_subgraph):
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=4)
    sample = text_sample(model.config, batch_size=2, seq_len=6, left_padding=1)
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"], targets_per_subgraph=per_subgraph)
    assert len(subgraphs) == math.ceil(4 / per_subgraph) + 1
    layers = [f"model.layers.{index}" for index in range(4)]
    expected = [layers[start:start + per_subgraph] for start in range(0, 4, per_subgraph)] + [[]]
    assert [subgraph.targets for subgraph in subgraphs] == expected
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits,
                                   rtol=0, atol=0)


def test_targets_per_subgraph_must_be_positive():
    model = tiny_model("LlamaForCausalLM")
    with pytest.raises(ValueError, match="targets_per_subgraph must be >= 1"):
        trace_subgraphs(model, text_sample(model.config), ["LlamaDecoderLayer"], targets_per_subgraph=0)


def test_intermediates_flow_and_are_dropped_after_their_last_reader():
    model = tiny_model("MistralForCausalLM", num_hidden_layers=4)
    sample = text_sample(model.config, batch_size=1, seq_len=5)
    subgraphs = trace_subgraphs(model, sample, ["MistralDecoderLayer"])
    available = set(sample)
    for index, subgraph in enumerate(subgraphs):
        assert set(subgraph.input_names) <= available, index
        later_inputs = {name for later in subgraphs[index + 1:] for name in later.input_names}
        # a consumed name is read by no later subgraph; a kept one is
        assert not set(subgraph.consumed_names) & later_inputs
        assert set(subgraph.input_names) - set(subgraph.consumed_names) <= later_inputs
        available = (available - set(subgraph.consumed_names)) | set(subgraph.output_names)
    # only the hidden states flow between layer subgraphs, plus the shared mask and rotary values
    assert all(len(subgraph.output_names) <= 4 for subgraph in subgraphs)
    assert subgraphs[-1].output_names == ["logits"]


def test_subgraph_forward_names_a_missing_input():
    model = tiny_model("LlamaForCausalLM")
    subgraphs = trace_subgraphs(model, text_sample(model.config), ["LlamaDecoderLayer"])
    with pytest.raises(KeyError, match="subgraph 0 needs 'attention_mask'"):
        subgraphs[0].forward(model, input_ids=torch.zeros(1, 3, dtype=torch.long))


def test_subgraph_modules_are_the_real_modules_called():
    model = tiny_model("LlamaForCausalLM")
    subgraphs = trace_subgraphs(model, text_sample(model.config), ["LlamaDecoderLayer"])
    assert subgraphs[0].modules == ["model.embed_tokens", "model.rotary_emb", "model.layers.0"]
    assert subgraphs[-1].modules == ["model.norm", "lm_head"]
    # hooks on the real layer fire when the subgraph runs
    seen = []
    handle = model.model.layers[1].register_forward_hook(lambda module, args, output: seen.append(module))
    run_subgraphs(model, subgraphs, text_sample(model.config))
    handle.remove()
    assert seen == [model.model.layers[1]]


def test_real_size_llama_3_8b_on_meta_traces_into_33_subgraphs():
    config = load_config("Meta-Llama-3-8B")
    model = build_model(__import__("transformers").LlamaForCausalLM, config, device="meta")
    assert sum(parameter.numel() for parameter in model.parameters()) > 8e9
    subgraphs = trace_subgraphs(model, text_sample(config, device="meta"), ["LlamaDecoderLayer"])
    assert len(subgraphs) == 33
    assert [subgraph.targets for subgraph in subgraphs[:-1]] == [[f"model.layers.{i}"] for i in range(32)]


class Chain(nn.Module):
    def __init__(self, length):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(length)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_long_synthetic_chain():
    model = Chain(200)
    subgraphs = trace_subgraphs(model, {"x": torch.randn(1, 2)}, ["Linear"], ignore=[])
    assert len(subgraphs) == 201
    x = torch.randn(3, 2)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, {"x": x})["output"], model(x), rtol=0, atol=0)


class InPlaceAssignment(nn.Module):
    """Writes into a traced tensor by index, as mask and position code often does."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

    def forward(self, x):
        x = self.layers[0](x)
        scaled = x * 2
        scaled[:, 0] = 0.0
        return self.layers[1](scaled + x)


def test_in_place_indexed_assignment_is_recorded_in_order():
    model = InPlaceAssignment()
    subgraphs = trace_subgraphs(model, {"x": torch.randn(2, 3)}, ["Linear"], ignore=[])
    assert "setitem" in subgraphs[1].code
    x = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, {"x": x})["output"], model(x), rtol=0, atol=0)


def test_batches_of_every_kind_run_on_one_traced_model_each_on_its_own_path(monkeypatch):
    """Calibration sets of vision-language models mix rows with images, with video and without either.
    Traced on a batch with images, the chain refused every other kind (``MissingInputError:
    'mm_token_type_ids', 'pixel_values', 'image_grid_thw'``). Each kind runs on subgraphs traced on the
    first batch of that kind, once, with the same targets, so subgraph i of every path calibrates the
    same layer; every run equals eager, exactly."""
    import patcher.partition.paths as paths_module
    from patcher.verify import run_eagerly
    from patcher.videos import video_sample
    from zoo import TraceableQwen2VLForConditionalGeneration
    from zoo._entries import recipe

    spec = recipe("qwen2_vl")
    model = spec.tiny_model(model_class=TraceableQwen2VLForConditionalGeneration)
    image = spec.build_sample(model.config, batch_size=1, seq_len=5, num_images=1)
    subgraphs = trace_subgraphs(model, image, list(spec.default_targets))
    traced = []
    monkeypatch.setattr(paths_module, "trace_graph", lambda model, inputs, *args: traced.append(sorted(inputs))
                        or trace_graph(model, inputs, *args))
    batches = [spec.build_sample(model.config, batch_size=2, seq_len=7, multimodal=False),
               video_sample(model.config, batch_size=1, seq_len=6, model=model),
               image,
               spec.build_sample(model.config, batch_size=1, seq_len=4, multimodal=False,
                                 generator=torch.Generator().manual_seed(1)),
               spec.build_sample(model.config, batch_size=2, seq_len=6, num_images=2, left_padding=1,
                                 generator=torch.Generator().manual_seed(2))]
    with torch.no_grad():
        for index, batch in enumerate(batches):
            torch.testing.assert_close(run_subgraphs(model, subgraphs, batch)["logits"],
                                       run_eagerly(model, batch).logits, rtol=0, atol=0, msg=lambda m: f"{index}: {m}")
    # one trace for text, one for video; the second text batch and the images ran on their paths
    assert traced == [["attention_mask", "input_ids"],
                      ["attention_mask", "input_ids", "mm_token_type_ids", "pixel_values_videos", "video_grid_thw"]]
    assert subgraphs.kinds() == [
        "'input_ids', 'attention_mask', 'mm_token_type_ids', 'pixel_values', 'image_grid_thw'",
        "'input_ids', 'attention_mask'",
        "'input_ids', 'attention_mask', 'mm_token_type_ids', 'pixel_values_videos', 'video_grid_thw'"]
    layers = [[subgraph.targets for subgraph in path] for path in subgraphs.paths]
    assert layers == [[["model.language_model.layers.0"], ["model.language_model.layers.1"], []]] * 3
    # the list is the sample's path, as trace_subgraphs always returned it
    assert list(subgraphs) == subgraphs.paths[0] and len(subgraphs) == 3


def test_a_batch_of_a_new_kind_on_another_model_is_refused_before_tracing():
    """The paths of one trace run the model it was traced from: a batch of a new kind on a model of
    another structure is refused, as a batch of the sample's kind is, and nothing is traced."""
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    sample = text_sample(model.config, batch_size=1, seq_len=5)
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
    other = tiny_model("LlamaForCausalLM", num_hidden_layers=3)
    with pytest.raises(ModelMismatchError, match=r"run_subgraphs: the model is not the one the graph was traced"):
        run_subgraphs(other, subgraphs, {"input_ids": sample["input_ids"]})
    assert len(subgraphs.paths) == 1


def test_a_failed_trace_of_a_new_kind_says_what_was_traced_and_why():
    """A misspelt key was an input 'the graph was traced without'; it is a new kind now, whose trace
    refuses the key as tracing refuses it (the closest name), after saying why it was traced."""
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=1)
    sample = text_sample(model.config, batch_size=1, seq_len=5)
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
    misspelt = {"input_ids": sample["input_ids"], "attenton_mask": sample["attention_mask"]}
    with pytest.raises(SampleInputError) as caught:
        run_subgraphs(model, subgraphs, misspelt)
    message = str(caught.value)
    assert message.startswith("run_subgraphs: a batch with inputs 'input_ids', 'attenton_mask' is of another kind "
                              "than the batches the subgraphs were traced on ('input_ids', 'attention_mask'), so its "
                              "own subgraphs were traced on it, with the same targets; that trace failed: "), message
    assert "'attention_mask'" in message.split("that trace failed: ")[1], message
    assert len(subgraphs.paths) == 1
