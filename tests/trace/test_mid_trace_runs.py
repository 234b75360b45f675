"""Moved code's None results decided where the trace meets them (patcher.trace.mid_trace_runs).

Each graph is compared with the one the tracer made before, deciding between two traces
(``mid_trace_runs.AVAILABLE`` off): the run in the middle of a trace must see the model as that run
did, and the trace must come out the same, only once instead of twice.
"""

from __future__ import annotations

import torch
from torch import fx, nn
from transformers import LlamaConfig

from patcher import BranchDecisionError, run_subgraphs, trace_subgraphs
from patcher.models.attempt import prepare_trace
from patcher.trace import mid_trace_runs
from patcher.trace import tracer as tracer_module
from patcher.trace.mid_trace_runs import TraceTouched, run_mid_trace
from patcher.trace.state import StateSnapshot
from tiny_layers import Layer


def _wrapped_text_positions(position_ids):
    # as the rewriter moves Qwen2-VL's `if position_ids.ndim == 3 and position_ids.shape[0] == 4` (TZ105)
    text_position_ids = None
    if position_ids.ndim == 3 and position_ids.shape[0] == 4:
        text_position_ids = position_ids[0]
        position_ids = position_ids[1:]
    return (text_position_ids, position_ids)


def _wrapped_kept_for_cache(obj, hidden):
    # the shape test first: the tracer cannot trace this through, so the call stays one opaque node
    kept = None
    if hidden.shape[0] > 0 and obj.config.use_cache:
        kept = hidden.flip(-1)
    return (kept, hidden)


fx.wrap("_wrapped_text_positions")
fx.wrap("_wrapped_kept_for_cache")


class PackedPositions(nn.Module):
    """Qwen2-VL's text model in small: positions stored on the module (a proxy while tracing, as
    ``self.rope_deltas``), then moved code that hands back None unless the positions are packed."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(2))
        self.last_positions = None

    def forward(self, hidden, position_ids):
        self.last_positions = position_ids
        text_position_ids, position_ids = _wrapped_text_positions(position_ids)
        for layer in self.layers:
            shift = position_ids.sum(0).unsqueeze(-1).float()
            hidden = layer(hidden + shift if text_position_ids is None else hidden + text_position_ids.unsqueeze(-1))
        return {"logits": hidden}


class CacheAware(nn.Module):
    """Moved code that reads ``config.use_cache``: the trace turns the cache off in every config, the
    graph runs with the config as the user left it."""

    def __init__(self):
        super().__init__()
        self.config = LlamaConfig(use_cache=True)
        self.layers = nn.ModuleList(Layer() for _ in range(2))

    def forward(self, hidden):
        kept, hidden = _wrapped_kept_for_cache(self, hidden)
        for layer in self.layers:
            hidden = layer(hidden if kept is None else hidden + kept)
        return {"logits": hidden}


def _positions(batch: int, length: int, rows: int = 3) -> torch.Tensor:
    return torch.arange(length).expand(rows, batch, length).clone()


def _traced(monkeypatch, model, sample, targets, *, mid_trace: bool):
    """(the subgraphs' code, how many times the model was traced)"""
    monkeypatch.setattr(mid_trace_runs, "AVAILABLE", mid_trace)
    traces = []
    original = tracer_module.trace_once
    monkeypatch.setattr(tracer_module, "trace_once", lambda tracing, facts: traces.append(1) or original(tracing, facts))
    subgraphs = trace_subgraphs(model, sample, targets)
    monkeypatch.setattr(tracer_module, "trace_once", original)
    return [subgraph.code for subgraph in subgraphs], len(traces), subgraphs


def test_a_none_result_is_decided_in_the_trace_that_meets_it(monkeypatch):
    torch.manual_seed(0)
    model = PackedPositions().eval()
    sample = {"hidden": torch.randn(2, 5, 4), "position_ids": _positions(2, 5)}
    between, traces_between, _ = _traced(monkeypatch, model, sample, ["Layer"], mid_trace=False)
    code, traces, subgraphs = _traced(monkeypatch, model, sample, ["Layer"], mid_trace=True)
    assert (traces_between, traces) == (2, 1)
    assert code == between
    assert model.last_positions is None  # the trace's write, a proxy, is undone
    with torch.no_grad():
        for batch in (sample, {"hidden": torch.randn(3, 7, 4), "position_ids": _positions(3, 7)}):
            assert torch.equal(run_subgraphs(model, subgraphs, batch)["logits"], model(**batch)["logits"])
        packed = {"hidden": torch.randn(2, 5, 4), "position_ids": _positions(2, 5, rows=4)}
        try:
            run_subgraphs(model, subgraphs, packed)
        except BranchDecisionError as error:
            assert "text_position_ids" in str(error)
        else:
            raise AssertionError("packed positions ran on the graph traced for text_position_ids None")


def test_the_run_sees_the_configs_as_the_graph_will(monkeypatch):
    # While tracing every config says use_cache=False; a run in the middle of the trace that read that
    # would decide `kept` None, and the graph would refuse every batch (the config says True when it runs).
    torch.manual_seed(0)
    model = CacheAware().eval()
    sample = {"hidden": torch.randn(2, 3, 4)}
    between, _, _ = _traced(monkeypatch, model, sample, ["Layer"], mid_trace=False)
    code, traces, subgraphs = _traced(monkeypatch, model, sample, ["Layer"], mid_trace=True)
    assert (code, traces) == (between, 1)
    assert model.config.use_cache is True
    with torch.no_grad():
        batch = {"hidden": torch.randn(1, 6, 4)}
        assert torch.equal(run_subgraphs(model, subgraphs, batch)["logits"], model(**batch)["logits"])


def test_qwen2_vl_with_an_image_traces_once_into_the_same_graph(monkeypatch):
    # text_position_ids is None for the sample: decided between traces, Qwen2-VL-2B was traced twice
    setup = prepare_trace("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct", multimodal_data=True)
    between, traces_between, _ = _traced(monkeypatch, setup.model, setup.sample, setup.targets, mid_trace=False)
    code, traces, _ = _traced(monkeypatch, setup.model, setup.sample, setup.targets, mid_trace=True)
    assert (traces_between, traces) == (2, 1)
    assert code == between


def test_a_run_that_reaches_the_trace_gives_it_up_and_decides_between_traces(monkeypatch):
    torch.manual_seed(0)
    model = PackedPositions().eval()
    sample = {"hidden": torch.randn(2, 5, 4), "position_ids": _positions(2, 5)}
    between, _, _ = _traced(monkeypatch, model, sample, ["Layer"], mid_trace=False)
    runs = []
    original = mid_trace_runs.sample_result

    def touching(graph, node, *args):
        runs.append(node.name)
        graph.create_node("call_function", torch.neg, (node,))  # as a run handed a proxy of the trace would
        return original(graph, node, *args)

    monkeypatch.setattr(mid_trace_runs, "sample_result", touching)
    code, traces, _ = _traced(monkeypatch, model, sample, ["Layer"], mid_trace=True)
    assert runs == ["_wrapped_text_positions"]  # the retrace asks no run in the middle of the trace
    assert (code, traces) == (between, 3)  # given up, then traced as between traces: twice


def test_a_run_in_the_middle_of_a_trace_calls_modules_for_real_on_the_state_the_trace_began_with():
    model = PackedPositions()
    model.last_positions = "before"
    seen = {}

    class Tracer(fx.Tracer):
        def create_proxy(self, kind, target, args, kwargs, *rest, **options):
            proxy = super().create_proxy(kind, target, args, kwargs, *rest, **options)
            if getattr(target, "__name__", None) == "_wrapped_text_positions":
                def run():
                    seen["tracing"] = mid_trace_runs.fx_tracing_now()
                    seen["positions"] = model.last_positions  # the trace stored a proxy there
                    model.last_positions = "written by the run"
                    seen["output"] = model.layers[0](torch.ones(1, 4))  # runs: no node, a tensor
                    return 1

                seen["nodes"] = len(self.graph.nodes)
                seen["tracing outside"] = mid_trace_runs.fx_tracing_now()
                seen["value"] = run_mid_trace(self, snapshot, run)
                seen["after"] = model.last_positions
                seen["nodes after"] = len(self.graph.nodes)
            return proxy

    snapshot = StateSnapshot(model)
    Tracer().trace(model)
    assert seen["value"] == 1 and (seen["tracing outside"], seen["tracing"]) == (True, False)
    assert seen["positions"] == "before"
    assert isinstance(seen["output"], torch.Tensor)
    assert isinstance(seen["after"], fx.Proxy)  # the trace's write is back, the run's is gone
    assert seen["nodes after"] == seen["nodes"]


def test_a_run_that_adds_to_the_graph_raises_trace_touched():
    class Tracer(fx.Tracer):
        def create_proxy(self, kind, target, args, kwargs, *rest, **options):
            proxy = super().create_proxy(kind, target, args, kwargs, *rest, **options)
            if getattr(target, "__name__", None) == "_wrapped_text_positions":
                run_mid_trace(self, snapshot, lambda: proxy[1] + 1)
            return proxy

    model = PackedPositions()
    snapshot = StateSnapshot(model)
    try:
        Tracer().trace(model)
    except TraceTouched as touched:
        assert "added 2 node(s)" in str(touched)
    else:
        raise AssertionError("a run reaching the trace's proxies went unnoticed")


def test_every_supported_torch_lets_model_code_run_in_the_middle_of_a_trace():
    # fx's private _maybe_revert_all_patches and its tracing flag: without them, decisions wait for the
    # trace's end (correct, one trace more); CI runs this file on the oldest and newest torch we support
    assert mid_trace_runs.AVAILABLE
