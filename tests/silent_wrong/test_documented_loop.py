"""The calibration loop GUIDE.md teaches never drops a batch input.

Its first version handed each subgraph only ``subgraph.input_names``: a padded ``attention_mask``
on a graph traced without one never reached a subgraph, so nothing could refuse it, and the
layers were calibrated on the activations of an unmasked batch (Llama logits off by 0.11). It then
handed each subgraph everything, so the mask was refused; now it runs each batch on the subgraphs
of its kind (``subgraphs.path_for``), and still hands each subgraph everything.
"""

import re
from pathlib import Path

import pytest
import torch

from patcher import InputMismatchError, trace_subgraphs
from patcher.samples import text_sample
from patcher.verify import run_eagerly
from tiny_models import tiny_model

GUIDE = Path(__file__).resolve().parents[2] / "GUIDE.md"


def guide_calibrate():
    """``calibrate`` as GUIDE.md defines it (the first python block that defines it)."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    source = next(block for block in blocks if "def calibrate(" in block)
    definition = re.search(r"^def calibrate\(.*?(?=^\S)", source, re.S | re.M).group(0)
    namespace = {"torch": torch}
    exec(definition, namespace)
    return namespace["calibrate"]


def test_guide_loop_runs_a_padded_mask_on_subgraphs_traced_with_one():
    calibrate = guide_calibrate()
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    padded = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"]}, ["LlamaDecoderLayer"])
    with torch.no_grad():
        unmasked = run_eagerly(model, {"input_ids": padded["input_ids"]}).logits
        masked = run_eagerly(model, padded).logits
    assert (unmasked - masked).abs().max() > 1e-3, "the mask must matter for this test to mean anything"
    # the loop is exact on the batch it was traced for, and on the padded batch, on its own subgraphs
    assert torch.equal(calibrate(model, subgraphs, {"input_ids": padded["input_ids"]})["logits"], unmasked)
    assert torch.equal(calibrate(model, subgraphs, padded)["logits"], masked)
    assert len(subgraphs.paths) == 2


class _OnePath:
    """Subgraphs of one trace, whatever the batch: what the loop ran on before it picked a path."""

    def __init__(self, path):
        self.path = path

    def path_for(self, model, batch, where):
        return self.path


def test_guide_loop_hands_each_subgraph_everything():
    """On one trace's subgraphs, the padded mask reaches subgraph 0, which refuses it: never dropped."""
    calibrate = guide_calibrate()
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    padded = text_sample(model.config, batch_size=2, seq_len=6, left_padding=2)
    subgraphs = trace_subgraphs(model, {"input_ids": padded["input_ids"]}, ["LlamaDecoderLayer"])
    with pytest.raises(InputMismatchError, match=r"'attention_mask' given, but the graph was traced without it"):
        calibrate(model, _OnePath(list(subgraphs)), padded)
