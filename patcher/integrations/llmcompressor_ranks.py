"""``tracezoo_tracing()`` when ``oneshot`` runs on several ranks (``torchrun --nproc_per_node N``).

llm-compressor 0.14.0.1's distributed oneshot runs the whole sequential pipeline on every rank,
each on its own share of the calibration data, over one model whose weights every rank reads from
the same place (compressed-tensors' distributed offload: rank 0's tensors in shared memory, or its
files on disk). Each rank calibrates every layer on its own batches; at the end of a layer the
modifiers reduce their statistics across ranks (GPTQ: each module's Hessian summed onto the rank
that quantizes it), each rank quantizes its share of the modules, and writes the weights back to
the one copy. What this module adds, for :mod:`patcher.integrations.llmcompressor`:

- **One first path on every rank.** The pipeline traces on the first batch each rank draws, and
  every rank draws from its own share: path 0 (the subgraphs the pipeline holds) could be another
  kind of batch on each rank. Rank 0's first batch is handed to every rank (:func:`agreed_sample`),
  every rank traces on it (tracing is deterministic given the model class, config and sample), and
  the graphs are compared (:func:`check_same_graphs`).
- **The same modules per subgraph on every rank** (:func:`same_modules_on_every_rank`). Each rank
  routes its batches of other kinds to paths of their own, traced on the first of each kind it
  meets (:class:`~patcher.partition.SubgraphPaths`): a rank of text-only batches never traces the
  image path. Subgraph ``i`` runs the same sequential targets on every path, so every rank
  calibrates the same layer per subgraph; but the modules it calls differ (the vision tower, in
  subgraph 0 of the image path only). The modifiers are handed the union of every rank's, the same
  list on every rank, and a module a modifier calibrates that runs on some ranks only is refused on
  every rank: GPTQ reduces each calibrated module's Hessian from every rank, and a rank on which it
  never ran has none.
- **One answer to the batch check.** Each rank checks its own batches; a rank that refused them
  alone would leave the others waiting in the first reduction until the process group times out.
  The ranks exchange what they found (:func:`agreed_error`; also a failed trace of a new kind of
  batch), and every rank raises, naming the ranks and dataset rows, before any weight changes.
- **Weights written before they are read** (:func:`written_before_read`). After each layer, every
  rank writes the modules it quantized into the shared copy and goes on to run that layer again
  (to hand its outputs to the next layer), reading the modules the *other* ranks write. On a CPU
  the modifiers broadcast nothing (``broadcast_qparams_and_cleanup(..., skip_cpu=True)``, the
  memory being shared) and wait for no one: a rank that went on first read weights not yet
  quantized (measured: the next layer calibrated on other inputs, and rank 0 saved a model whose
  last layer still had the uninitialized ``weight_scale`` of another rank's modules). Every rank
  waits at the end of each layer for the others.
- **Every rank's own rows** (:func:`rows_of_each_rank`). Given the same dataset on every rank,
  llm-compressor splits it: ``_make_sampler`` builds its sampler over ``dataset.select(range(start,
  end))``, but the dataloader reads the whole dataset with it, so every rank drew rows from
  ``range(0, end - start)``: rank 0's share (measured with 8 rows on 2 ranks: both ranks
  calibrated on rows 0-3, rows 4-7 on none). Its indices are shifted to the rank's own rows.

Each is a no-op unless ``torch.distributed`` is initialized.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch

#: Where llm-compressor builds the sampler of the dataloader ``oneshot`` makes from a dataset.
SAMPLER_MODULE = "llmcompressor.datasets.utils"


class RankMismatchError(RuntimeError):
    """The ranks of one distributed ``oneshot`` traced different graphs, or a module the recipe
    calibrates runs on some ranks only: they would calibrate and reduce different modules."""


def is_distributed() -> bool:
    """Whether ``oneshot`` runs on several processes, as compressed-tensors decides it (its own
    test: a process group is initialized, and no single-threaded section is on)."""
    from compressed_tensors.distributed import is_distributed as distributed

    return distributed()


def _rank_world() -> tuple[int, int]:
    import torch.distributed as dist

    return dist.get_rank(), dist.get_world_size()


def where_prefix() -> str:
    """``"rank 1 of 2, "`` before a batch's place in a message, when distributed."""
    if not is_distributed():
        return ""
    rank, world = _rank_world()
    return f"rank {rank} of {world}, "


def _on_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, Mapping):
        return {key: _on_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_on_cpu(item) for item in value)
    return value


def agreed_sample(sample: Any, inputs_of: Callable[[Any], Mapping[str, Any]],
                  errors: Iterable[type[Exception]] = ()) -> dict[str, Any]:
    """The inputs every rank traces on: those of rank 0's sample (the first batch it drew), handed
    to the others; ``inputs_of(sample)`` on rank 0 only, and where it raises (a first batch mixing
    rows of several kinds), every rank raises its error (``errors``: the classes it may be of).

    A single process traces on the first batch it draws; with several ranks, each draws from its
    own share, so without this each would trace on another batch, and path 0 (the kind of batch
    the pipeline's subgraphs were traced on) would be another kind on each rank. Rank 0's is the one
    a single process on every rank's share, rank 0's first, would have traced on."""
    if not is_distributed():
        return dict(inputs_of(sample))
    import torch.distributed as dist
    from compressed_tensors.distributed import get_source_rank

    rank, world = _rank_world()
    source = get_source_rank()
    handed: list = [None]
    own_error = None
    if rank == source:
        try:
            # pickled on the CPU: the pipeline moves it to the device it traces on
            handed[0] = ("sample", _on_cpu(dict(inputs_of(sample))))
        except Exception as error:  # every rank raises it, or the others wait for the sample forever
            own_error = error
            handed[0] = ("error", (type(error).__name__, str(error)))
    dist.broadcast_object_list(handed, src=source)
    kind, value = handed[0]
    if kind == "sample":
        return value
    if own_error is not None:
        raise own_error
    name, text = value
    raise _error_class(name, errors)(f"rank {source} of {world} could not hand its first calibration batch to the "
                                     f"other ranks to trace on (this rank: {rank}):\n{text}")


def _graph_fingerprint(subgraphs: list) -> list[str]:
    """One digest per subgraph: its code, its inputs and outputs, and what the trace recorded."""
    digests = []
    for subgraph in subgraphs:
        record = subgraph.record
        text = "\n".join([subgraph.code, repr(list(subgraph.input_names)), repr(subgraph.output_names),
                          repr(record.tensor_inputs), repr(sorted(record.constants.items(), key=str))])
        digests.append(hashlib.sha256(text.encode()).hexdigest())
    return digests


def check_same_graphs(subgraphs: list, model_name: str) -> None:
    """Raise :class:`RankMismatchError` on every rank if any two ranks traced different graphs.

    Traced on the same sample, the graphs are the same unless the ranks differ in what they trace:
    another model class or config, other ``oneshot`` arguments (``sequential_targets``,
    ``sequential_targets_per_subgraph``, ``tracing_ignore``) or another tracezoo or transformers.
    Each rank would then calibrate other modules in another order than the others, and the
    reductions at the end of each layer would pair the wrong Hessians or wait forever."""
    if not is_distributed():
        return
    import torch.distributed as dist

    rank, world = _rank_world()
    mine = _graph_fingerprint(subgraphs)
    every: list = [None] * world
    dist.all_gather_object(every, mine)
    differ = [other for other in range(world) if every[other] != every[0]]
    if not differ:
        return
    other = differ[0]
    theirs = every[other]
    first = next((index for index, (a, b) in enumerate(zip(every[0], theirs)) if a != b), min(len(every[0]), len(theirs)))
    raise RankMismatchError(
        f"rank {other} of {world} traced {model_name} into another graph than rank 0 ({len(theirs)} subgraphs, rank 0 "
        f"{len(every[0])}; subgraph {first} differs), though every rank traced on rank 0's first calibration batch "
        f"(patcher/integrations/llmcompressor_ranks.py, check_same_graphs; this rank: {rank}). The ranks would "
        "calibrate different modules and reduce each other's statistics wrongly. Fix: give every rank the same model "
        "class and checkpoint, the same oneshot arguments (sequential_targets, sequential_targets_per_subgraph, "
        "tracing_ignore) and the same tracezoo, transformers and llm-compressor versions")


def agreed_error(error: Exception | None, errors: Iterable[type[Exception]] = ()) -> Exception | None:
    """The error this rank raises after every rank checked its batches: its own, with what the
    other ranks found; or, on a rank whose batches all fit, one naming the ranks that refused
    theirs. None where every batch of every rank fits.

    Collective (every rank calls it once, after its last batch): a rank that raised alone would
    leave the others waiting in the first reduction of a layer until the process group timed out.
    ``errors``: classes the other ranks' errors may be of, besides :mod:`patcher.trace.errors`'."""
    if not is_distributed():
        return error
    import torch.distributed as dist

    rank, world = _rank_world()
    every: list = [None] * world
    dist.all_gather_object(every, None if error is None else (type(error).__name__, str(error)))
    refused = {other: found for other, found in enumerate(every) if found is not None}
    if not refused:
        return None
    others = "\n".join(f"rank {other}: {text}" for other, (_, text) in refused.items() if other != rank)
    if error is not None:
        if not others:
            return error
        return type(error)(f"{error}\nthe other ranks refused theirs too:\n{others}")
    kind = _error_class(refused[min(refused)][0], errors)
    return kind(f"rank{'s' if len(refused) > 1 else ''} {', '.join(map(str, refused))} of {world} refused "
                f"calibration batches, so no rank calibrates (this rank's batches fit: rank {rank}):\n{others}")


def _error_class(name: str, known: Iterable[type[Exception]] = ()) -> type[Exception]:
    from ..trace import errors

    for cls in known:
        if cls.__name__ == name:
            return cls
    found = getattr(errors, name, None)
    return found if isinstance(found, type) and issubclass(found, Exception) else errors.InputMismatchError


def same_modules_on_every_rank(model: torch.nn.Module, called: list[list[str]],
                               kinds: list[str]) -> list[list[str]] | None:
    """The modules each pipeline subgraph calls on any rank (``called[i]``: those subgraph ``i`` of
    this rank's paths calls), the same lists on every rank; None when not distributed. Collective:
    every rank calls it once its cache routed its batches (``kinds``: the inputs of its paths).

    With batches of several kinds, each rank traces the paths of the kinds its own batches have
    (rank 0's first kind on all of them): a rank whose batches are all text-only never traces the
    image path, and its subgraph 0 calls no vision module. The pipeline hands the modifiers each
    subgraph's modules at the end of the layer, and their reductions go module by module
    (``sync_obs_act_stats``): given the union of every rank's, they make the same calls on every
    rank. A module that runs on some ranks only and that a modifier calibrates (its hooks, its
    quantization scheme) is refused, on every rank, before any weight changes: GPTQ reduces each
    calibrated module's Hessian from every rank, and a rank on which it never ran has none, so the
    ranks would pair other modules' Hessians, or wait for each other forever."""
    if not is_distributed():
        return None
    import torch.distributed as dist

    rank, world = _rank_world()
    every: list = [None] * world
    dist.all_gather_object(every, (called, kinds))
    if len({len(their_called) for their_called, _ in every}) > 1:
        raise RankMismatchError(
            f"the ranks partitioned the model into {sorted({len(c) for c, _ in every})} subgraphs (this rank: "
            f"{rank} of {world}; patcher/integrations/llmcompressor_ranks.py, same_modules_on_every_rank): give every "
            "rank the same model and oneshot arguments")
    agreed = [list(dict.fromkeys(name for their_called, _ in every for name in their_called[index]))
              for index in range(len(called))]
    watched = _calibrated_modules(model)
    for index, modules in enumerate(agreed):
        for other, (their_called, their_kinds) in enumerate(every):
            missing = [name for name in modules if name not in their_called[index]
                       and any(inner in watched for inner in model.get_submodule(name).modules())]
            if missing:
                running = [other_rank for other_rank, (c, _) in enumerate(every) if missing[0] in c[index]]
                raise RankMismatchError(
                    f"subgraph {index} calls {len(missing)} module(s) that the recipe calibrates "
                    f"({', '.join(map(repr, missing[:4]))}{' ...' if len(missing) > 4 else ''}) on rank(s) "
                    f"{', '.join(map(str, running))} of {world}, but none of rank {other}'s batches runs them (its "
                    f"batches are of the kinds: {'; '.join(their_kinds)}); this rank: {rank} "
                    "(patcher/integrations/llmcompressor_ranks.py, same_modules_on_every_rank). The modifiers reduce "
                    "each calibrated module's statistics from every rank (GPTQ: its Hessian), and rank "
                    f"{other} has none for them: the ranks would pair other modules' statistics or wait for each "
                    "other forever. Fix: give every rank batches of every kind (interleave the kinds in the "
                    "dataset, or shuffle it before it is split: shuffle_calibration_samples), or leave these "
                    "modules out of the recipe (ignore=[...], e.g. the vision tower's)")
    return agreed


def _calibrated_modules(model: torch.nn.Module) -> set:
    """The modules of ``model`` that the active recipe's modifiers calibrate: a hook of theirs
    (``HooksMixin``) on it, or a quantization scheme."""
    from llmcompressor.core import active_session

    recipe = getattr(getattr(active_session(), "lifecycle", None), "recipe", None)
    handles = {handle.id for modifier in getattr(recipe, "modifiers", None) or ()
               for handle in getattr(modifier, "_hooks", None) or ()}
    return {module for module in model.modules()
            if getattr(module, "quantization_scheme", None) is not None
            or handles & (set(module._forward_hooks) | set(module._forward_pre_hooks))}


class _Shifted:
    """A sampler of a dataset's rows ``start..``, whose indices count from ``start``: the indices
    into the whole dataset."""

    def __init__(self, sampler, start: int):
        self.sampler = sampler
        self.start = start

    def __iter__(self) -> Iterator[int]:
        for index in self.sampler:
            yield int(index) + self.start

    def __len__(self) -> int:
        return len(self.sampler)


@contextlib.contextmanager
def rows_of_each_rank() -> Iterator[None]:
    """Inside, the sampler llm-compressor makes for a dataset split across ranks draws this rank's
    own rows. Left as it is where the sampler already ranges over the whole dataset (a release
    that indexes it right)."""
    module = importlib.import_module(SAMPLER_MODULE)
    make_sampler = getattr(module, "_make_sampler", None)
    split = getattr(module, "_is_dist_and_same_ds", None)
    bounds = getattr(module, "_get_partition_start_end", None)
    if make_sampler is None or split is None or bounds is None:
        yield  # another release: nothing of this shape to correct
        return

    def own_rows(args, dataset):
        sampler = make_sampler(args, dataset)
        # the same collective as make_sampler's own test: every rank takes this branch or none
        if not split(dataset):
            return sampler
        source = getattr(sampler, "data_source", None)
        if source is None or len(source) == len(dataset):
            return sampler
        rank, world = _rank_world()
        start, _ = bounds(args.num_calibration_samples or len(dataset), rank, world)
        return _Shifted(sampler, start)

    module._make_sampler = own_rows
    try:
        yield
    finally:
        module._make_sampler = make_sampler


def written_before_read(callbacks: type) -> type:
    """llm-compressor's ``LifecycleCallbacks``, whose ``sequential_epoch_end`` (a layer calibrated:
    the modifiers quantize it) returns on every rank only once every rank has written its share of
    the layer's weights."""

    class LifecycleCallbacksAcrossRanks(callbacks):
        @classmethod
        def sequential_epoch_end(cls, *args, **kwargs):
            result = super().sequential_epoch_end(*args, **kwargs)
            if is_distributed():
                import torch.distributed as dist
                from compressed_tensors.offload.cache import OffloadCache

                dist.barrier()
                # The pipeline keeps each weight it onloaded for the layer's whole calibration
                # (disable_offloading). Read from disk, that copy is this rank's own, and another
                # rank's quantized weights never reach it (no broadcast on a CPU); dropped, the next
                # read takes them from the offload, which every rank wrote before the barrier.
                OffloadCache.keep_onloaded_values.clear()
            return result

    return LifecycleCallbacksAcrossRanks
