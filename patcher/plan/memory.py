"""Memory plan for sequential calibration: bytes per subgraph from meta-tensor propagation.

Every subgraph of a traced model runs once on the ``meta`` device (the model stays on meta,
no weights are allocated): each node's output shape and dtype give its bytes, so the
activations handed between subgraphs are known exactly, for any architecture, with no formula
per model. What the plan *measures* (exact, checked against real runs on tiny models):
parameter bytes per subgraph and activation bytes at every boundary, and the peak of live tensor
bytes while a subgraph runs: its inputs, the graph's values until their last use, and what each
called module allocates inside (attention scores, MLP intermediates: :mod:`.live` counts every
storage the dispatcher returns until it is garbage). ``scaled_dot_product_attention`` counts as
the fused kernel torch's CPU selection picks for its shapes (output and log-sum-exp; the math path,
scores included, where no fused kernel applies). Not counted: the allocator's caching and
fragmentation, workspaces kernels allocate outside the dispatcher, and what calibration hooks
allocate (GPTQ's Hessian updates).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import fx, nn


from ..registry.normalize import positive_int
from ..partition import Subgraph
from ..partition.subgraph import subgraph_list
from ..trace.graph_runtime import ROOT_ATTRIBUTE, GraphRoot
from ..models.meta_mode import MetaWhereMixed, is_integer, untracked
from .live import LiveBytes
from .module_cache import ModuleCache, all_meta, fresh_copy

ALGORITHMS = ("none", "gptq")


def tensor_bytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (nested tuples, lists, dicts, dataclass-like outputs)."""
    return sum(t.numel() * t.element_size() for t in _tensors(value))


def _tensors(value: Any, seen: set[int] | None = None):
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        if id(value) not in seen:
            seen.add(id(value))
            yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item, seen)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item, seen)


@dataclass
class SubgraphPlan:
    index: int
    targets: list[str]
    #: parameters and buffers of the modules this subgraph calls, tied tensors once, by dtype
    parameter_bytes: dict[str, int]
    #: of which buffers (rotary frequencies, ...): every buffer of the called modules
    buffer_bytes: int
    #: bytes of the subgraph's inputs / outputs for one batch (exact, from meta shapes)
    input_bytes_per_batch: int
    output_bytes_per_batch: int
    #: the same for the whole calibration set (per batch x number of batches)
    input_bytes: int
    output_bytes: int
    #: GPTQ: one fp32 in_features^2 Hessian per nn.Linear inside the targets
    hessian_bytes: int
    hessian_linears: int
    #: peak of live tensor bytes while the subgraph runs one batch: its inputs, graph values and
    #: what the modules it calls allocate inside (no allocator overhead, no hooks)
    intermediate_peak_bytes: int
    #: GPU peak with this subgraph resident: parameters + Hessians + intermediate peak
    gpu_peak_bytes: int
    #: CPU cache while it runs: every cached value (all batches) + its outputs (all batches;
    #: not for the last subgraph, whose outputs are the model's and are not cached)
    cpu_cache_bytes: int

    @property
    def parameter_total(self) -> int:
        return sum(self.parameter_bytes.values())


@dataclass
class MemoryPlan:
    model: str
    batch_size: int
    seq_len: int | None
    samples: int
    batches: int
    algorithm: str
    subgraphs: list[SubgraphPlan]
    notes: list[str] = field(default_factory=list)
    unique_parameter_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def peak_gpu_bytes(self) -> int:
        """One subgraph on the device, the rest offloaded: the largest subgraph peak."""
        return max((s.gpu_peak_bytes for s in self.subgraphs), default=0)

    @property
    def peak_cpu_bytes(self) -> int:
        """Cached activations between subgraphs (all batches), at the worst boundary."""
        return max((s.cpu_cache_bytes for s in self.subgraphs), default=0)

    @property
    def parameter_bytes(self) -> dict[str, int]:
        """Bytes by dtype of every tensor some subgraph needs; a weight tied across subgraphs
        (embedding and head) once."""
        return dict(self.unique_parameter_bytes)

    def to_dict(self) -> dict:
        data = asdict(self)
        del data["unique_parameter_bytes"]
        data["peak_gpu_bytes"] = self.peak_gpu_bytes
        data["peak_cpu_bytes"] = self.peak_cpu_bytes
        data["parameter_bytes"] = self.parameter_bytes
        return data


def subgraph_parameters(model: nn.Module, subgraph: Subgraph, read: Mapping[int, torch.Tensor] = {}) -> dict[int, torch.Tensor]:
    """Parameters and buffers the subgraph needs on the device, keyed by tensor identity (tied
    weights once): all of every module it calls (what offloading moves), tensors it reads with
    get_attr, and ``read``: the model's tensors its code read while it ran (a module passed by
    reference to an opaque function, e.g. ``get_image_features(self.model, ...)``, counts only
    for what that function reads, never whole)."""
    tensors: dict[int, torch.Tensor] = {}
    for node in subgraph.graph.find_nodes(op="call_module"):
        if node.target == ROOT_ATTRIBUTE:
            continue
        module = model.get_submodule(str(node.target))
        for tensor in list(module.parameters()) + list(module.buffers()):
            tensors.setdefault(id(tensor), tensor)
    for node in subgraph.graph.find_nodes(op="get_attr"):
        value = _attribute(model, str(node.target))
        if isinstance(value, torch.Tensor):
            tensors.setdefault(id(value), value)
    for key, tensor in read.items():
        tensors.setdefault(key, tensor)
    return tensors


def _attribute(model: nn.Module, target: str) -> Any:
    value: Any = model
    for part in target.split("."):
        if part == ROOT_ATTRIBUTE:
            continue
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def bytes_by_dtype(tensors: Iterable[torch.Tensor]) -> dict[str, int]:
    result: dict[str, int] = {}
    for tensor in tensors:
        key = str(tensor.dtype).removeprefix("torch.")
        result[key] = result.get(key, 0) + tensor.numel() * tensor.element_size()
    return dict(sorted(result.items()))


def hessians(model: nn.Module, subgraph: Subgraph) -> tuple[int, int]:
    """(bytes, count) of GPTQ Hessians: in_features^2 fp32 per linear inside the targets.

    Linears are ``nn.Linear`` modules, and the experts of fused MoE modules (a class named
    ``...Experts`` holding 3-d parameters ``(experts, out, in)`` used with ``F.linear``, as in
    transformers 5): one linear per expert, two for a fused ``gate_up_proj``, as a GPTQ run that
    calibrates every expert's projections separately needs."""
    seen: set[int] = set()
    total = count = 0
    for target in subgraph.targets:
        for module in model.get_submodule(target).modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            if isinstance(module, nn.Linear):
                total += module.in_features ** 2 * 4
                count += 1
            elif type(module).__name__.endswith("Experts"):
                for name, parameter in module.named_parameters(recurse=False):
                    if parameter.ndim == 3:
                        linears = parameter.shape[0] * (2 if "gate_up" in name else 1)
                        total += linears * parameter.shape[-1] ** 2 * 4
                        count += linears
    return total, count


def _map_tensors(value: Any, leaf: Callable[[torch.Tensor], Any]) -> Any:
    """``value`` with ``leaf`` applied to every tensor inside plain tuples, lists and dicts (named
    tuples and other objects are returned as they are)."""
    if isinstance(value, torch.Tensor):
        return leaf(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map_tensors(v, leaf) for v in value)
    if isinstance(value, list):
        return [_map_tensors(v, leaf) for v in value]
    if isinstance(value, dict):
        return {k: _map_tensors(v, leaf) for k, v in value.items()}
    return value


def _to_meta(value: Any) -> Any:
    # not `.to("meta")`, which the mode keeps on the CPU for integers: these values are stand-ins
    return _map_tensors(value, lambda tensor: tensor if tensor.device.type == "meta"
                        else torch.empty(tensor.shape, dtype=tensor.dtype, device="meta"))


def _materialize(value: Any) -> Any:
    """A CPU stand-in for a meta tensor (ones: an all-ones attention mask means no padding)."""
    return _map_tensors(value, lambda tensor: torch.ones(tensor.shape, dtype=tensor.dtype)
                        if tensor.device.type == "meta" else tensor)


def propagate(model: nn.Module, subgraph: Subgraph, inputs: Mapping[str, Any],
              cache: ModuleCache | None = None,
              weights: Mapping[int, torch.Tensor] | None = None,
              tracker: LiveBytes | None = None) -> tuple[dict[str, Any], int, dict[int, torch.Tensor]]:
    """Run ``subgraph`` node by node on meta tensors; return its outputs and the peak of live
    bytes: the graph's values (a value is freed after its last reader; inputs and outputs live to
    the end) plus, while a node runs, what it allocates beyond them (``tracker``: the inside of a
    called module, e.g. attention scores and MLP intermediates).

    Integer sample inputs may be real CPU tensors (see :class:`~patcher.models.meta_mode.MetaWhereMixed`). A function
    that needs values of a meta tensor runs on CPU stand-ins of ones instead, and its result goes
    back to meta."""
    root = GraphRoot(model, subgraph.constants)
    nodes = list(subgraph.graph.nodes)
    last_use: dict[fx.Node, int] = {}
    for position, node in enumerate(nodes):
        for value in node.all_input_nodes:
            last_use[value] = position
    env: dict[fx.Node, Any] = {}
    live = peak = 0
    sizes: dict[fx.Node, int] = {}
    outputs: dict[str, Any] = {}
    mode = MetaWhereMixed(weights)
    tracker = tracker if tracker is not None else LiveBytes()
    if cache is not None:
        cache.reads = mode  # repeated layers inside called modules record their reads here
        cache.live = tracker  # and what they allocate inside
    with torch.no_grad(), mode, tracker:
        for position, node in enumerate(nodes):
            if node.op == "placeholder":
                value = inputs[node.name]
            elif node.op == "get_attr":
                value = getattr(root, node.target) if "." not in node.target else _attribute(model, node.target)
            elif node.op == "output":
                result = fx.map_arg(node.args[0], env.__getitem__)
                outputs = result if isinstance(result, dict) else {"output": result}
                break
            else:
                args = _plain(fx.map_arg(node.args, env.__getitem__))
                kwargs = _plain(fx.map_arg(node.kwargs, env.__getitem__))
                try:
                    with tracker.measure() as inside:
                        value = _call(model, root, node, args, kwargs, cache)
                except Exception as exc:  # noqa: BLE001  (model code, on meta: said in one line with its place)
                    raise PlanError(subgraph.index, node, exc) from exc
                del args, kwargs
            env[node] = value
            size = tensor_bytes(value) if node.op != "get_attr" else 0
            sizes[node] = size
            # while the node ran: the values alive before it, and its allocations at their peak
            # (its result included; at least the result's bytes, a view being counted whole here)
            peak = max(peak, live + max(size, inside.extra if node.op not in ("placeholder", "get_attr") else 0))
            live += size
            for used in node.all_input_nodes:
                if last_use.get(used) == position:
                    if used.op != "placeholder":  # inputs: the caller holds them until the subgraph ends
                        live -= sizes.pop(used, 0)
                        del env[used]  # freed as in the real run: the tracker sees the memory go
    return outputs, peak, mode.read


class PlanError(RuntimeError):
    """A subgraph failed to run on meta tensors: ``str()`` is one line naming the subgraph, the model
    code that raised (file:line), the error and the fix."""

    def __init__(self, index: int, node: fx.Node, exc: BaseException):
        from ..trace.liveness import describe_node

        self.index, self.node, self.error = index, node, exc
        where = _model_frame(exc)
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        real_model = "plan from Python with patcher.plan.plan_memory(model, subgraphs, sample) on a real model " \
                     "(only shapes and dtypes are read)"
        if isinstance(exc, (ValueError, AssertionError, IndexError, KeyError)):
            fix = ("the sample does not fit the model (e.g. image tokens and image features): check the options, "
                   "or plan your own sample from Python with patcher.plan.plan_memory(model, subgraphs, sample)")
        elif isinstance(exc, NotImplementedError) or "meta" in message:
            fix = f"this code needs tensor values or a kernel the meta device lacks: {real_model}"
        else:
            fix = ("the eager model most likely fails here too: check that the config's sizes fit together and the "
                   f"options; if it runs eagerly, {real_model}")
        super().__init__(f"subgraph {index} could not run on meta tensors: {type(exc).__name__}: {message} "
                         f"(raised at {where}, by its node {describe_node(node)}); fix: {fix}")


def _model_frame(exc: BaseException) -> str:
    """``file:line in function()`` of the innermost frame of model code in ``exc``'s traceback (not
    torch, not tracezoo, not transformers' generic helpers such as its check functions)."""
    import os
    import traceback

    from ..trace.diagnose import short_path

    skip = tuple(os.path.dirname(module.__file__) + os.sep for module in (torch, os))
    patcher_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    chosen = None
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename
        if name.startswith(skip) or name.startswith(patcher_dir) or name.startswith("<") \
                or f"transformers{os.sep}utils{os.sep}" in name:
            continue
        chosen = frame
    return f"{short_path(chosen.filename)}:{chosen.lineno} in {chosen.name}()" if chosen else "an unknown place"


def _plain(value: Any) -> Any:
    """fx's immutable lists and dicts as plain ones: the graph's code builds a fresh literal for
    every call, and callees may mutate it (transformers' vision helpers pop precomputed values
    from their ``kwargs`` dict)."""
    from torch.fx.immutable_collections import immutable_dict, immutable_list

    if type(value) in (dict, immutable_dict):
        return {key: _plain(item) for key, item in value.items()}
    if type(value) in (list, immutable_list):
        return [_plain(item) for item in value]
    if type(value) is tuple:
        return tuple(_plain(item) for item in value)
    return value


def _call(model, root, node, args, kwargs, cache: ModuleCache | None = None):
    if node.op == "call_module" and cache is not None:
        module = model if node.target == ROOT_ATTRIBUTE else model.get_submodule(str(node.target))
        key = cache.key(module, args, kwargs)
        if key is not None and key in cache.results:
            result, extra = cache.results[key]
            if cache.live is not None:
                cache.live.transient(extra)  # the peak inside the layer, which did not run again
            return fresh_copy(result)
        if cache.live is None:
            result, extra = _call(model, root, node, args, kwargs), 0
        else:
            with cache.live.measure() as inside:
                result = _call(model, root, node, args, kwargs)
            extra = inside.extra
        if key is not None and all_meta(result):
            cache.results[key] = (result, extra)
        return result

    def run(args, kwargs):
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        module = model if node.target == ROOT_ATTRIBUTE else model.get_submodule(str(node.target))
        return module(*args, **kwargs)

    try:
        return run(args, kwargs)
    except (RuntimeError, NotImplementedError):
        if node.op == "call_module":
            raise
        with untracked():  # CPU stand-ins of ones: copies the real run does not make
            result = run(_materialize(args), _materialize(kwargs))
        return _to_meta(result)


def plan_memory(
    model: nn.Module,
    subgraphs: list[Subgraph],
    sample: Mapping[str, Any],
    *,
    samples: int | None = None,
    algorithm: str = "none",
    name: str | None = None,
) -> MemoryPlan:
    """The memory plan for calibrating ``model`` subgraph by subgraph with ``samples`` samples
    fed in batches shaped like ``sample`` (its first dimension is the batch size).

    ``model`` may be on the meta device (the usual case) or real: only shapes and dtypes are
    read. ``algorithm`` is ``"none"`` or ``"gptq"`` (Hessians of in_features^2 fp32 per
    nn.Linear inside each subgraph's targets). ``subgraphs`` is the non-empty list
    ``trace_subgraphs`` returned and ``samples`` an int >= 1 (else ``TypeError``/``ValueError``).

    >>> import torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> from patcher import trace_subgraphs
    >>> config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
    ...                      num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1)
    >>> model = LlamaForCausalLM(config).eval()
    >>> sample = {"input_ids": torch.randint(0, 64, (2, 5))}
    >>> plan = plan_memory(model, trace_subgraphs(model, sample, ["LlamaDecoderLayer"]), sample, samples=8)
    >>> # 4 batches x (hidden states 2x5x16 + cos, sin 1x5x8 float32, position ids 1x5 int64)
    >>> plan.batches, plan.subgraphs[1].input_bytes
    (4, 4000)
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    subgraphs = subgraph_list(subgraphs, "plan_memory")
    tensors = [value for value in sample.values() if isinstance(value, torch.Tensor)]
    batch_size = tensors[0].shape[0] if tensors and tensors[0].ndim else 1
    seq_len = int(tensors[0].shape[1]) if tensors and tensors[0].ndim > 1 else None
    samples = batch_size if samples is None else positive_int(samples, "samples")
    batches = math.ceil(samples / batch_size)
    # large values on meta; integer tensors (ids, masks, image grids) keep their values
    intermediates = {key: value if is_integer(value) else _to_meta(value) for key, value in sample.items()}
    plans = []
    cache = ModuleCache()
    weights = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    every_needed: dict[int, torch.Tensor] = {}
    tracker = LiveBytes()
    with cache.repeated_layers(model):
        for subgraph in subgraphs:
            step = {name: intermediates[name] for name in subgraph.input_names if name in intermediates}
            cached = sum(tensor_bytes(value) for value in intermediates.values())
            outputs, peak, read = propagate(model, subgraph, step, cache, weights, tracker)
            in_bytes = tensor_bytes(list(step.values()))
            out_bytes = tensor_bytes(list(outputs.values()))
            needed_by_id = subgraph_parameters(model, subgraph, read)
            every_needed.update(needed_by_id)
            needed = needed_by_id.values()
            params = bytes_by_dtype(needed)
            buffers = sum(t.numel() * t.element_size() for t in needed if not isinstance(t, nn.Parameter))
            hessian_bytes, hessian_count = hessians(model, subgraph) if algorithm == "gptq" else (0, 0)
            plans.append(SubgraphPlan(
                index=subgraph.index, targets=list(subgraph.targets), parameter_bytes=params, buffer_bytes=buffers,
                input_bytes_per_batch=in_bytes, output_bytes_per_batch=out_bytes,
                input_bytes=in_bytes * batches, output_bytes=out_bytes * batches,
                hessian_bytes=hessian_bytes, hessian_linears=hessian_count,
                intermediate_peak_bytes=peak,
                gpu_peak_bytes=sum(params.values()) + hessian_bytes + peak,
                # the last subgraph's outputs are the model's (logits): nothing caches them
                cpu_cache_bytes=(cached + (out_bytes if subgraph is not subgraphs[-1] else 0)) * batches,
            ))
            for consumed in subgraph.consumed_names:
                intermediates.pop(consumed, None)
            intermediates.update(outputs)
    notes = [
        "exact: activation bytes in/out (meta shapes x element size) and parameter bytes (every parameter "
        "the subgraph reads, plus all buffers of the modules it calls)",
        "gpu peak: live tensor bytes inside the called modules too (attention as torch's fused kernel where one "
        "applies); not counted: allocator caching and fragmentation, kernel workspaces, calibration hooks' "
        "temporaries",
        "assumes no padding: mask builders ran on an all-ones attention mask",
    ]
    return MemoryPlan(model=name or type(model).__name__, batch_size=batch_size, seq_len=seq_len, samples=samples,
                      batches=batches, algorithm=algorithm, subgraphs=plans, notes=notes,
                      unique_parameter_bytes=bytes_by_dtype(every_needed.values()))
