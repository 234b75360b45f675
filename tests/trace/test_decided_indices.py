"""A module container indexed by a traced value (patcher.trace.decided_indices): the graph calls the
module the sample picks, equal to eager, and refuses a run that would pick another."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from patcher.partition import run_subgraphs, trace_subgraphs
from patcher.trace import BranchDecisionError


class StepHeads(nn.Module):
    """A head per step, picked by a step worked out from the input (Qwen3-Omni's code predictor:
    ``self.lm_head[inputs_embeds.shape[1] - 2]``) or read from a tensor's value."""

    def __init__(self, container: str, step_from: str):
        super().__init__()
        self.step_from = step_from
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        heads = [nn.Linear(4, 3) for _ in range(3)]
        self.heads = nn.ModuleList(heads) if container == "ModuleList" else nn.Sequential(*heads)

    def forward(self, hidden, step=None):
        for layer in self.layers:
            hidden = torch.relu(layer(hidden))
        index = hidden.shape[1] - 2 if self.step_from == "shape" else step.sum()
        return {"logits": self.heads[index](hidden)}


def _sample(positions: int, batch: int = 2, step: int | None = None) -> dict:
    sample = {"hidden": torch.randn(batch, positions, 4)}
    if step is not None:
        sample["step"] = torch.tensor([step])
    return sample


def _equal_to_eager(model, subgraphs, sample) -> bool:
    with torch.no_grad():
        return torch.equal(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample)["logits"])


@pytest.mark.parametrize("container", ["ModuleList", "Sequential"])
def test_a_head_picked_by_a_shape_is_the_samples_and_another_is_refused(container):
    torch.manual_seed(0)
    model = StepHeads(container, "shape").eval()
    subgraphs = list(trace_subgraphs(model, _sample(3), [r"re:layers\.\d+"]))
    assert len(subgraphs) == 3
    assert any(node.op == "call_module" and node.target == "heads.1"
               for subgraph in subgraphs for node in subgraph.graph.nodes)
    assert _equal_to_eager(model, subgraphs, _sample(3))
    assert _equal_to_eager(model, subgraphs, _sample(3, batch=5))  # another shape picking the same head
    with pytest.raises(BranchDecisionError, match=r"picks another module .* the index of 'heads' .* is 2 here "
                                                  r"and was 1 while tracing.*trace with a sample that gives 2"):
        run_subgraphs(model, subgraphs, _sample(4))
    # the error's fix, followed: traced with a sample that picks heads.2, that input runs
    retraced = list(trace_subgraphs(model, _sample(4), [r"re:layers\.\d+"]))
    assert _equal_to_eager(model, retraced, _sample(4, batch=3))


def test_a_head_picked_by_a_tensors_value_is_the_samples_and_another_is_refused():
    torch.manual_seed(0)
    model = StepHeads("ModuleList", "value").eval()
    subgraphs = list(trace_subgraphs(model, _sample(3, step=0), [r"re:layers\.\d+"]))
    assert _equal_to_eager(model, subgraphs, _sample(5, step=0))
    with pytest.raises(BranchDecisionError, match="is 2 here and was 0 while tracing"):
        run_subgraphs(model, subgraphs, _sample(3, step=2))


class FirstLayers(nn.Module):
    """Runs as many layers as the input has positions: a slice of a ModuleList with a traced bound."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))

    def forward(self, hidden):
        for layer in self.layers[: hidden.shape[1]]:
            hidden = torch.relu(layer(hidden))
        return {"logits": hidden}


def test_a_slice_with_a_traced_bound_runs_the_samples_layers_and_refuses_another_count():
    torch.manual_seed(0)
    model = FirstLayers().eval()
    subgraphs = list(trace_subgraphs(model, _sample(2), [r"re:layers\.\d+"]))
    assert [subgraph.targets for subgraph in subgraphs] == [["layers.0"], ["layers.1"], []]
    assert _equal_to_eager(model, subgraphs, _sample(2, batch=3))
    with pytest.raises(BranchDecisionError, match="the end of the slice of 'layers' .* is 3 here and was 2"):
        run_subgraphs(model, subgraphs, _sample(3))


def test_qwen3_omni_code_predictor_calls_the_prefills_head_and_refuses_a_longer_prefill():
    """The code predictor's prefill picks ``lm_head[inputs_embeds.shape[1] - 2]``: the talker always
    hands it two positions (head 0); three would pick head 1, which the graph does not call."""
    import transformers

    from patcher import DEFAULT_IGNORE, load_traceable
    from patcher.coverage import shrink_config
    from patcher.coverage.check import _build
    from patcher.coverage.handover_samples import handover_samples

    cls = getattr(transformers, "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration", None)
    if cls is None:
        pytest.skip("this transformers has no Qwen3-Omni")
    targets = ["Qwen3OmniMoeTalkerCodePredictorDecoderLayer"]
    config = shrink_config(cls.config_class)
    original = _build(cls, config, 0).eval()
    model = _build(load_traceable(cls, targets=targets), config, 0).eval()
    model.load_state_dict(original.state_dict())
    first, second = handover_samples(original, config, 0)
    subgraphs = list(trace_subgraphs(model, first, targets, DEFAULT_IGNORE))
    with torch.no_grad():
        for sample in (first, second):
            assert torch.equal(run_subgraphs(model, subgraphs, sample)["logits"],
                               original(**sample, use_cache=False).logits)
        longer = {"inputs_embeds": torch.randn(2, 3, config.hidden_size)}
        with pytest.raises(BranchDecisionError, match="the index of 'lm_head' .* is 1 here and was 0 while tracing"):
            run_subgraphs(model, subgraphs, longer)
