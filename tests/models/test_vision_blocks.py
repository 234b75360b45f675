"""Vision towers one block at a time: the tower's blocks and the text layers in one chain.

For every zoo entry: the block class is found like the decoder layers (and agrees with the
recipe's ``VISION_TARGETS``), the chain has one subgraph per vision block, then one per text
layer, then the tail, and it computes exactly what eager computes, on the traced image layout
and on another one (another image size where the family takes several, else two images a row).
What the tower hands from block to block (Qwen's ``cu_seqlens``, window index and rotary
embeddings, Mllama's tiles and aspect-ratio masks, CLIP's captured hidden states) are graph
values flowing between subgraphs.
"""

from __future__ import annotations

import importlib

import json

import pytest
import torch

import zoo
from patcher import find_tower_blocks, find_towers, run_subgraphs, trace_subgraphs
from patcher.models.attempt import default_targets
from patcher.cli import main
from patcher.verify import run_eagerly
from zoo._entries import ENTRIES, recipe

TRACEABLE = {entry: recipe(entry).traceable_class for entry in ENTRIES}


def _models(entry):
    spec = recipe(entry)
    original = spec.tiny_model()
    traceable = spec.tiny_model(model_class=getattr(zoo, TRACEABLE[entry]))
    traceable.load_state_dict(original.state_dict())
    return original, traceable


def _text_targets(entry):
    spec = recipe(entry)
    # Mllama's cross-attention layers run with an image: they are text layers of the chain too.
    return list(spec.targets(multimodal=True))


def _other_layout(entry) -> dict:
    spec = recipe(entry)
    config = spec.tiny_config()
    first = importlib.import_module(f"zoo.{entry}.recipe").default_image_size(config)
    others = [size for size in spec.example_image_sizes(config) if tuple(size) != tuple(first)]
    return {"image_size": others[0]} if others else {"num_images": 2}


def _count(model, prefix, classes):
    return sum(1 for name, module in model.named_modules()
               if name.startswith(f"{prefix}.") and type(module).__name__ in classes)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_vision_blocks_then_text_layers_in_one_chain_equal_eager(entry):
    spec = recipe(entry)
    original, traceable = _models(entry)
    vision = find_tower_blocks(traceable)
    assert vision == list(spec.vision_targets)  # found like the decoder layers, as the recipe says
    (tower,) = find_towers(traceable)
    text = _text_targets(entry)
    config = original.config
    sample = spec.build_sample(config, batch_size=2, seq_len=5, num_images=1, left_padding=1)
    subgraphs = trace_subgraphs(traceable, sample, vision + text)  # patcher.DEFAULT_IGNORE

    blocks = _count(traceable, tower, vision)
    layers = sum(1 for module in traceable.modules() if type(module).__name__ in text)
    assert blocks >= 2 and len(subgraphs) == blocks + layers + 1
    # vision blocks first, in the tower, then the text layers, then the tail
    assert all(s.targets and s.targets[0].startswith(f"{tower}.") for s in subgraphs[:blocks])
    assert all(s.targets and not s.targets[0].startswith(f"{tower}.") for s in subgraphs[blocks:-1])
    assert subgraphs[-1].targets == []

    samples = [sample, spec.build_sample(config, batch_size=1, seq_len=6, generator=torch.Generator().manual_seed(3),
                                         **_other_layout(entry))]
    for inputs in samples:
        with torch.no_grad():
            expected = run_eagerly(original, inputs).logits
            got = run_subgraphs(traceable, subgraphs, inputs)["logits"]
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_each_vision_block_reads_the_previous_blocks_output_from_the_chain(entry):
    # Block i's subgraph returns its block's output and block i+1's subgraph takes it as an input:
    # the tower's loop is cut between blocks, not run inside one subgraph.
    spec = recipe(entry)
    _, traceable = _models(entry)
    sample = spec.build_sample(traceable.config, batch_size=1, seq_len=4, num_images=1)
    subgraphs = trace_subgraphs(traceable, sample, list(spec.vision_targets) + _text_targets(entry))
    (tower,) = find_towers(traceable)
    vision = [s for s in subgraphs if s.targets and s.targets[0].startswith(f"{tower}.")]
    for current, following in zip(vision, vision[1:]):
        (call,) = [node for node in current.graph.find_nodes(op="call_module") if node.target == current.targets[0]]
        assert call.name in current.output_names and call.name in following.input_names


def test_text_model_has_no_vision_tower():
    from tiny_models import tiny_model

    model = tiny_model("LlamaForCausalLM")
    assert find_towers(model) == [] and find_tower_blocks(model) == []
    with pytest.raises(ValueError, match="unknown tower modality"):
        find_towers(model, "smell")


def test_cli_vision_blocks_on_a_saved_tiny_config(tmp_path, capsys):
    spec = recipe("llava")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(spec.tiny_config().to_dict()))
    assert main(["trace", TRACEABLE["llava"], str(path), "--multimodal", "--vision-blocks"]) == 0
    out = capsys.readouterr().out
    model = spec.tiny_model()
    blocks = _count(model, "model.vision_tower", spec.vision_targets)
    layers = sum(1 for module in model.modules() if type(module).__name__ in default_targets(model))
    assert f"targets: {', '.join([*spec.vision_targets, *spec.default_targets])}" in out
    assert f"Successfully traced model into {blocks + layers + 1} subgraphs!" in out


def test_cli_vision_blocks_without_a_tower_is_a_usage_error(capsys):
    assert main(["trace", "LlamaForCausalLM", "Meta-Llama-3-8B", "--vision-blocks"]) == 2
    assert "has no vision tower" in capsys.readouterr().err
