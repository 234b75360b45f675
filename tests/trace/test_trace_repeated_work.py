"""Work a trace does not redo: moved code's source is parsed once per function, not at every trace,
and the state check after a trace compares only the modules tracing wrote to (issue 29 item 8:
Qwen2-VL-2B traced slower than llm-compressor's tracer). Each test fails where the work is redone."""

import functools
import inspect

import torch
from torch import nn

from patcher import trace_subgraphs
from patcher.models.attempt import prepare_trace
from patcher.trace import state
from patcher.trace.moved_code import function_tree
from patcher.trace.state import StateSnapshot


def _moved_helper(module, x):
    module.mode = "switched"
    return x


def _wrapper_of(function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


def _counting_getsource(monkeypatch) -> list:
    calls = []
    original = inspect.getsource

    def counted(obj):
        calls.append(obj)
        return original(obj)

    monkeypatch.setattr(inspect, "getsource", counted)
    return calls


def test_wrappers_of_one_function_share_its_parsed_definition(monkeypatch):
    # opaque_calls wraps an ignored method anew at every trace: the wrapper's source is the function's
    calls = _counting_getsource(monkeypatch)
    first = function_tree(_wrapper_of(_moved_helper))
    second = function_tree(_wrapper_of(_moved_helper))
    assert first is second and first is function_tree(_moved_helper)
    assert first.name == "_moved_helper"
    assert len(calls) <= 1


def test_a_second_trace_of_qwen2_vl_reads_no_source(monkeypatch):
    setup = prepare_trace("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct", multimodal_data=True)
    first = trace_subgraphs(setup.model, setup.sample, setup.targets, setup.ignore)
    calls = _counting_getsource(monkeypatch)
    second = trace_subgraphs(setup.model, setup.sample, setup.targets, setup.ignore)
    assert calls == []
    assert [subgraph.graph.python_code("self").src for subgraph in second] == \
        [subgraph.graph.python_code("self").src for subgraph in first]


class _Writes(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.other = nn.Linear(2, 2)
        self.name = "first"
        self.table = torch.zeros(3)


def test_untouched_modules_are_not_compared_attribute_by_attribute(monkeypatch):
    model = _Writes()
    snapshot = StateSnapshot(model)
    compared = []
    original = state._same
    monkeypatch.setattr(state, "_same", lambda old, new: compared.append((old, new)) or original(old, new))
    model.inner.extra = 1  # one module written to
    assert snapshot.changes(snapshot.names) == ["inner.extra: '<unset>' -> 1"]
    assert compared  # `inner` was, attribute by attribute
    assert {id(new) for _, new in compared} <= {id(value) for value in vars(model.inner).values()}
    assert not any(new is model.table or new is model.other._parameters for _, new in compared)
    snapshot.restore()
    assert not hasattr(model.inner, "extra")


def test_a_changed_attribute_is_found_and_restored_whatever_its_type():
    model = _Writes()
    name, table, child, bias = model.name, model.table, model.other, model.inner.bias
    snapshot = StateSnapshot(model)
    model.name = "".join(["fir", "st"])  # an equal string that is another object: no change
    assert model.name is not name
    model.table = torch.zeros(3)  # an equal tensor that is another object: a change, found without `==`
    model.other = nn.Identity()
    del model.inner.bias
    found = snapshot.changes(snapshot.names)
    assert [line.split(":")[0] for line in found] == ["table", "other"]
    assert found[1] == "other: submodule replaced by Identity"
    snapshot.restore()
    assert model.name is name and model.table is table and model.other is child and model.inner.bias is bias


def test_every_base_class_is_read_once_for_the_functions_an_ignore_entry_can_name():
    from patcher.trace.opaque import _functions_and_methods

    setup = prepare_trace("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct")
    owners = [(id(owner), name) for owner, name, _, _ in _functions_and_methods(setup.model)]
    assert len(owners) == len(set(owners))  # nn.Module's and PreTrainedModel's methods once, not once per class
    found = {name for _, name, _, _ in _functions_and_methods(setup.model, {"get_rope_index", "no_such_name"})}
    assert found == {"get_rope_index"}


def test_hooks_are_copied_for_hooked_modules_only_and_all_put_back():
    model = _Writes()
    kept = model.inner.register_forward_hook(lambda module, args, output: output)
    snapshot = StateSnapshot(model)
    assert list(snapshot.hooks) == [model.inner]
    model.other.register_forward_pre_hook(lambda module, args: None)  # added while tracing: removed
    model.inner.register_forward_hook(lambda module, args, output: output)
    snapshot.restore()
    assert not model.other._forward_pre_hooks
    assert list(model.inner._forward_hooks) == [kept.id]


class _Tied(nn.Module):
    """A tied weight (two paths, one tensor), a parameter also registered as another module's buffer."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(4, 2)
        self.head = nn.Linear(2, 4, bias=False)
        self.head.weight = self.embed.weight
        self.norm = nn.LayerNorm(2)
        self.other = nn.Module()
        self.other.register_buffer("alias", self.norm.weight)


def test_the_tracer_finds_tensor_paths_in_one_walk_as_named_parameters_and_buffers_would(monkeypatch):
    from patcher.trace.tracer import SequentialTracer

    model = _Tied()
    expected = {id(tensor): name for name, tensor in [*model.named_parameters(remove_duplicate=False),
                                                      *model.named_buffers(remove_duplicate=False)]}
    walks = []
    original = nn.Module.named_modules

    def counted(self, *args, **kwargs):
        if self is model:
            walks.append(args or kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "named_modules", counted)
    tracer = SequentialTracer(model, set(), set())
    assert tracer._tensor_paths == expected
    assert tracer._tensor_paths[id(model.embed.weight)] == "head.weight"
    assert tracer._tensor_paths[id(model.norm.weight)] == "other.alias"
    assert len(walks) == 1


def _reads_a_size(module, x):
    size = module.in_features
    return x * size


def test_moved_code_is_walked_once_for_the_settings_it_may_write(monkeypatch):
    import ast

    from patcher.trace.wrapped_state import may_change_settings

    walks = []
    original = ast.walk
    monkeypatch.setattr(ast, "walk", lambda node: walks.append(node) or original(node))
    layer = nn.Linear(2, 2)
    assert may_change_settings(_moved_helper, (layer, 1), {}) is True  # module.mode = ...
    assert may_change_settings(_reads_a_size, (layer, 1), {}) is False
    first = len(walks)
    for _ in range(3):  # as at every trace: the same definitions, asked again
        assert may_change_settings(_moved_helper, (layer, 1), {}) is True
        assert may_change_settings(_reads_a_size, (layer, 1), {}) is False
    assert len(walks) == first


class _Shared(nn.Module):
    """One block under two paths (with its children), one leaf under three, a tied weight."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        self.again = nn.ModuleDict({"inner": self.block, "act": self.block[1]})
        self.head = nn.Linear(2, 2)
        self.tail = nn.Linear(2, 2)
        self.tail.weight = self.head.weight


def test_the_walk_gives_what_named_modules_and_modules_give():
    from patcher.trace.model_walk import ModelWalk

    model = _Shared()
    walk = ModelWalk(model)
    assert walk.named == list(model.named_modules(remove_duplicate=False))
    assert walk.unique == list(model.named_modules())
    assert walk.modules == list(model.modules())
    assert walk.names == {module: name for name, module in model.named_modules(remove_duplicate=False)}
    assert walk.classes == {type(module) for module in model.modules()}
    assert walk.unique != walk.named  # the model does share modules


def _walks_from_patcher(monkeypatch, model) -> list[str]:
    """The walks of ``model``'s modules that tracezoo's own code asks for (fx's own walk inside
    Tracer.trace is not tracezoo's to share), each as the file that asked."""
    import os
    import sys

    import patcher

    patcher_dir = os.path.dirname(patcher.__file__)
    module_file = inspect.getsourcefile(nn.Module)
    walks = []
    original = nn.Module.named_modules

    def counted(self, memo=None, prefix="", remove_duplicate=True):
        if self is model and memo is None:
            frame = sys._getframe(1)
            while frame.f_code.co_filename == module_file:  # modules() asks named_modules()
                frame = frame.f_back
            if frame.f_code.co_filename.startswith(patcher_dir):
                walks.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
        return original(self, memo, prefix, remove_duplicate)

    monkeypatch.setattr(nn.Module, "named_modules", counted)
    return walks


def test_a_trace_graph_call_walks_the_modules_once_however_often_it_traces(monkeypatch):
    from patcher.trace import mid_trace_runs, trace_graph
    from patcher.trace import tracer as tracer_module

    # Qwen2-VL with an image, its None result decided between traces (where model code cannot run in the
    # middle of a trace): traced twice, text_position_ids being None for the sample
    monkeypatch.setattr(mid_trace_runs, "AVAILABLE", False)
    setup = prepare_trace("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct", multimodal_data=True)
    traces = []
    original_trace_once = tracer_module.trace_once
    monkeypatch.setattr(tracer_module, "trace_once",
                        lambda tracing, facts: traces.append(facts) or original_trace_once(tracing, facts))
    walks = _walks_from_patcher(monkeypatch, setup.model)
    trace_graph(setup.model, setup.sample, setup.targets, setup.ignore)
    assert len(traces) == 2
    assert len(walks) == 1, walks


class _Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(2, 2) for _ in range(2))
        self.head = nn.Linear(2, 2)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_every_module_is_compared_with_its_snapshot_once_per_trace(monkeypatch):
    from collections import Counter

    from patcher.trace import trace_graph

    model = _Chain()
    compared = Counter()
    original = StateSnapshot._untouched
    monkeypatch.setattr(StateSnapshot, "_untouched",
                        lambda self, module: compared.update([id(module)]) or original(self, module))
    trace_graph(model, {"x": torch.zeros(1, 2)}, ["Linear"])
    assert {id(module): 1 for module in model.modules()} == dict(compared)


def test_restore_lists_the_changes_of_the_modules_asked_for_before_putting_them_back():
    model = _Writes()
    snapshot = StateSnapshot(model)
    model.inner.extra = 1
    model.other.extra = 2
    model.table = torch.ones(3)
    before = snapshot.changes([model, model.inner])  # in the walk's order, as the tracer asks
    snapshot.report_changes(lambda module: module in (model.inner, model))
    snapshot.restore()
    assert snapshot.changes_found == before
    assert [line.split(":")[0] for line in before] == ["table", "inner.extra"]
    assert not hasattr(model.inner, "extra") and not hasattr(model.other, "extra")


def test_tensors_registered_on_a_module_that_held_none_are_removed():
    model = _Writes()  # the root holds no parameter or buffer of its own
    weight = model.inner.weight
    snapshot = StateSnapshot(model)
    model.register_buffer("added", torch.zeros(1))
    model.register_parameter("grown", nn.Parameter(torch.zeros(1)))
    model.inner.weight = nn.Parameter(torch.ones(2, 2))
    snapshot.restore()
    assert not model._buffers and not model._parameters
    assert model.inner.weight is weight


def test_the_walk_reads_each_modules_config_once_for_its_paths_and_configs(monkeypatch):
    from patcher.trace.model_walk import ModelWalk
    from patcher.trace.state import configs_of

    setup = prepare_trace("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct")
    model = setup.model
    expected_configs = configs_of(model.modules())
    reads = []
    original = nn.Module.__getattr__

    def counted(self, name):
        if name == "config":
            reads.append(self)
        return original(self, name)

    monkeypatch.setattr(nn.Module, "__getattr__", counted)
    walk = ModelWalk(model)
    paths, configs = walk.config_paths, walk.configs
    assert len(reads) == len(set(map(id, reads))) == len(list(model.modules())) - _with_own_config(model)
    assert [id(config) for config in configs] == [id(config) for config in expected_configs]
    assert paths[id(model.config)] == "config"


def _with_own_config(model) -> int:
    return sum("config" in vars(module) for module in model.modules())
