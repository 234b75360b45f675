"""llm-compressor's sequential pipeline on tracezoo's tracer.

``oneshot(..., pipeline="sequential")`` traces the model with llm-compressor's own tracer and
runs the subgraphs in its ``SequentialPipeline``. Inside :func:`tracezoo_tracing`, the pipeline
takes its subgraphs from :func:`patcher.trace_subgraphs` instead, and every calibration batch is
checked against what the graph was traced with before anything is calibrated:

    >>> from patcher.integrations.llmcompressor import tracezoo_tracing
    >>> with tracezoo_tracing():                                        # doctest: +SKIP
    ...     oneshot(model=model, dataset=batches, recipe=recipe, pipeline="sequential",
    ...             sequential_targets=["LlamaDecoderLayer"])

Nothing else changes for the user: ``oneshot``'s arguments mean what they meant
(``sequential_targets``, ``sequential_targets_per_subgraph``; ``tracing_ignore`` left at its
default means tracezoo's :data:`~patcher.DEFAULT_IGNORE`, and entries a user adds to it are added
to tracezoo's; one that matches nothing in the model is refused, ``IgnoreMatchError``). An
``ignore`` entry of a recipe's modifier that matches no module is warned about
(:class:`RecipeIgnoreWarning`: ``lm_headd`` leaves ``lm_head`` quantized). Any class tracezoo traces
works: the zoo's, ``load_traceable(...)``'s, and the transformers classes that trace as they are.

Batches of several kinds (rows with images and rows without, as vision-language calibration sets
mix them; video, audio, a padded mask beside unpadded batches) each run on subgraphs traced for
their inputs: the pipeline traces the first batch's, and the cache, as it takes the batches, traces
each other kind on the first batch of that kind, once, with the same targets
(:class:`~patcher.partition.SubgraphPaths`). Each of the pipeline's subgraphs runs subgraph ``i`` of
the batch's own path (the cache notes each batch's under :data:`PATH_KEY`), so every layer is
calibrated on every batch of every kind, on the values its own path handed on. Subgraph ``i`` of
every kind must run the same sequential targets (:class:`PathMismatchError` otherwise: a vision
tower's blocks as targets run for image batches only). One batch is of one kind: a batch whose rows
are of several kinds is refused (:class:`MixedBatchError`, naming its dataset rows), since collating
them would drop the inputs of one kind.

Why the batches are checked: the pipeline hands each subgraph only the names in its
``input_names``; a batch with an input its graph was not traced with would lose it without a word.
Each batch runs on the path of its own inputs, and the values of its constants are checked against
that path's trace (:class:`~patcher.InputMismatchError`: ``logits_to_keep=2`` on a graph traced with
1), while the pipeline caches the batches: before any weight changes. Subgraph 0 is handed every
input of each batch as well (its ``input_names`` is a :class:`~patcher.partition.BatchInputNames`),
and refuses such an input itself.

Distributed ``oneshot`` (``torchrun --nproc_per_node N``, every rank inside the block): every rank
traces path 0 on rank 0's first batch and routes and checks its own batches, every rank raises
when any rank refuses a batch or calibrates a module another rank never runs, the modifiers get the
same modules per subgraph on every rank, and each layer's quantized weights are written by every
rank before any rank reads them (:mod:`patcher.integrations.llmcompressor_ranks`).

Tested with llmcompressor 0.14.0.1 (transformers 5.17.0): the patched names are internals of its
``llmcompressor.pipelines.sequential.pipeline`` module, checked on entry, and the collator maker of
``llmcompressor.datasets.utils`` (:data:`COLLATE_MODULE`), wrapped where it is there.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
from collections.abc import MutableMapping
from typing import Any, Iterable, Iterator, Mapping

import torch
from torch import nn

from ..partition import BatchInputNames, Partition, SubgraphPaths, trace_subgraphs
from ..registry.ignore import DEFAULT_IGNORE
from ..trace.errors import InputMismatchError, TracingError
from ..trace.record import input_kind
from . import llmcompressor_ranks as ranks

#: The module whose names the pipeline reads at call time (``from ... import trace_subgraphs``).
PIPELINE_MODULE = "llmcompressor.pipelines.sequential.pipeline"
#: The names of the pipeline module that ``tracezoo_tracing`` replaces inside its block.
PATCHED = ("trace_subgraphs", "IntermediatesCache", "LifecycleCallbacks")
#: Batch keys the pipeline itself reads from its cache and never passes to the model.
PIPELINE_KEYS = frozenset({"loss_mask"})
#: The llm-compressor release the integration is tested with.
TESTED_VERSION = "0.14.0.1"
#: The key under which the pipeline's cache holds the index of a batch's path (its kind's subgraphs,
#: ``SubgraphPaths.paths``): the cache picks that path's names for the batch, and each step's
#: ``forward`` runs that path's subgraph.
PATH_KEY = "tracezoo_path"
#: Where ``oneshot`` makes the collator of a dataset's dataloader (``format_calibration_data`` reads the
#: name at call time): wrapped, so that a batch of rows of several kinds is refused before it is collated.
COLLATE_MODULE = ("llmcompressor.datasets.utils", "_make_collate_fn")


class IntegrationError(RuntimeError):
    """llm-compressor is missing or does not have what the integration replaces."""


class MixedBatchError(InputMismatchError):
    """A calibration batch holds rows of several kinds (some with an image, some without): each kind
    runs on its own subgraphs, and one batch runs on one. Collated together, the rows of one kind
    lose their inputs (the default collator keeps the inputs of the first row) or the collator fails."""


class PathMismatchError(TracingError):
    """The subgraphs traced for two kinds of batch do not run the same sequential targets at the same
    index. llm-compressor's pipeline runs subgraph ``i`` over every batch, then calibrates the modules
    it ran, before subgraph ``i + 1``: subgraph ``i`` of every kind must run the same layers."""


class RecipeIgnoreWarning(UserWarning):
    """An ``ignore`` entry a recipe's modifier was given matches no module of the model, so it
    ignores nothing (``lm_headd``: ``lm_head`` is quantized)."""


def _pipeline_module():
    try:
        module = importlib.import_module(PIPELINE_MODULE)
    except ImportError as exc:
        raise IntegrationError(
            f"tracezoo_tracing needs llm-compressor ({exc}); install it (tested: llmcompressor=={TESTED_VERSION}, "
            "see GUIDE.md, 'Using tracezoo in llm-compressor')") from exc
    missing = [name for name in PATCHED if not hasattr(module, name)]
    if missing:
        raise IntegrationError(
            f"{PIPELINE_MODULE} has no {', '.join(missing)}: this llm-compressor release runs its sequential "
            f"pipeline differently from the one tracezoo_tracing was written for (llmcompressor=={TESTED_VERSION})")
    return module


def tracezoo_ignore(tracing_ignore: Iterable[str] | None) -> list[str]:
    """tracezoo's ignore list for ``oneshot``'s ``tracing_ignore``: its default (llm-compressor's
    own mask-builder names, which tracezoo's tracer keeps opaque anyway) means
    :data:`~patcher.DEFAULT_IGNORE`; entries added to it are added to tracezoo's."""
    from llmcompressor.args.dataset_arguments import DatasetArguments

    theirs = set(DatasetArguments().tracing_ignore)
    added = [entry for entry in (tracing_ignore or ()) if entry not in theirs and entry not in DEFAULT_IGNORE]
    return [*DEFAULT_IGNORE, *added]


def _pipeline_subgraph_class():
    from llmcompressor.pipelines.sequential.helpers import Subgraph as PipelineSubgraph

    @dataclasses.dataclass
    class TracezooSubgraph(PipelineSubgraph):
        """llm-compressor's ``Subgraph`` (``graph``, ``input_names``, ``consumed_names``,
        ``submodules``) running tracezoo's subgraph ``index`` of every path: ``forward`` runs the one
        of the batch's path (named by the cache, :data:`PATH_KEY`) and checks the run against its
        trace; ``submodules`` are the modules every path's subgraph ``index`` calls, so the modifiers
        finish with the modules that batches of any kind ran."""

        source: Any = None  # the list trace_subgraphs returned: a SubgraphPaths or a plain list
        index: int = 0
        # with several ranks: the modules subgraph ``index`` calls on any rank (Session.agree_modules)
        modules_of_every_rank: list[str] | None = None

        def forward(self, *args, **kwargs) -> dict[str, Any]:
            paths = _paths(self.source)
            path = kwargs.pop(PATH_KEY, None)
            if path is None:
                if len(paths) > 1:
                    raise IntegrationError(
                        f"subgraph {self.index} runs batches of {len(paths)} kinds ({'; '.join(_kinds(paths))}) and "
                        f"was handed a batch without {PATH_KEY!r}, which names its kind: only the cache "
                        "tracezoo_tracing() installs marks each batch's kind; run the pipeline inside it")
                path = 0
            return paths[path][self.index].forward(*args, **kwargs)

        def submodules(self, model: nn.Module, recurse: bool = True) -> list[nn.Module]:
            # llm-compressor's own reads self.graph, the first path's only; with several ranks, the
            # modifiers are handed the same list on every rank (their reductions go module by module)
            names = self.modules_of_every_rank or _called_modules(_paths(self.source), self.index)
            modules = list(dict.fromkeys(model.get_submodule(name) for name in names))
            if not recurse:
                return modules
            return list(dict.fromkeys(inner for module in modules for inner in module.modules()))

    return TracezooSubgraph


def _paths(subgraphs) -> list[Partition]:
    return subgraphs.paths if isinstance(subgraphs, SubgraphPaths) else [Partition.of(subgraphs)]


def _called_modules(paths: list[list[Subgraph]], index: int) -> list[str]:
    """The modules subgraph ``index`` of any of ``paths`` calls, in the order of the paths."""
    return list(dict.fromkeys(str(node.target) for path in paths
                              for node in path[index].graph.find_nodes(op="call_module")))


def _first_batch_inputs(sample_input) -> dict[str, Any]:
    if isinstance(sample_input, _MixedBatch):
        raise sample_input.error("the first calibration batch (the pipeline traces the model on it)")
    return model_inputs(sample_input)


def _kinds(paths: list[Partition]) -> list[str]:
    return [path.kind() for path in paths]


def to_pipeline_subgraphs(subgraphs: list) -> list:
    """tracezoo's subgraphs as llm-compressor's ``Subgraph`` objects, in order.

    ``subgraphs`` is what :func:`~patcher.trace_subgraphs` returned: the objects run subgraph ``i``
    of every path it holds, also of those traced later, each batch on its own path (named by the
    cache under :data:`PATH_KEY`). Their ``input_names`` and ``consumed_names`` are those of the
    batch's path (:class:`PathNames`: the cache asks for one path's).

    The pipeline reads ``input_names`` only through ``IntermediatesCache.fetch``, which keeps a batch's
    value when ``name in input_names``: subgraph 0 keeps its :class:`~patcher.partition.BatchInputNames`,
    so it is handed every input of a batch (but the keys the pipeline keeps for itself) and refuses one
    the graph was traced without, even where the batches were not checked as the cache took them."""
    cls = _pipeline_subgraph_class()
    return [cls(graph=subgraph.graph, input_names=PathNames(subgraphs, index, "input_names"),
                consumed_names=PathNames(subgraphs, index, "consumed_names"), source=subgraphs, index=index)
            for index, subgraph in enumerate(_paths(subgraphs)[0])]


class PathNames:
    """The ``input_names`` or ``consumed_names`` of subgraph ``index``, per path: :meth:`of` gives a
    path's (the cache asks for the path of the batch it fetches or deletes from). ``in`` is true of
    a name of any path's subgraph ``index`` (and of :data:`PATH_KEY` for ``input_names``); iterating
    gives the only path's, and refuses where there are several, since a caller that does not say
    which batch would delete or pick the names of another path's values."""

    def __init__(self, source, index: int, attribute: str):
        self._source = source
        self._index = index
        self._attribute = attribute

    def of(self, path: int):
        names = getattr(_paths(self._source)[path][self._index], self._attribute)
        if self._attribute == "consumed_names":
            return set(names)
        return _WithPathKey(_pipeline_input_names(names))

    def __contains__(self, name: object) -> bool:
        return any(name in self.of(path) for path in range(len(_paths(self._source))))

    def __iter__(self) -> Iterator[str]:
        paths = _paths(self._source)
        if len(paths) > 1:
            raise IntegrationError(
                f"subgraph {self._index} runs batches of {len(paths)} kinds ({'; '.join(_kinds(paths))}), whose "
                f"{self._attribute} differ: ask for one path's (PathNames.of), as the cache tracezoo_tracing() "
                "installs does")
        return (name for name in self.of(0) if name != PATH_KEY)

    def __repr__(self) -> str:
        return f"PathNames(subgraph {self._index}, {self._attribute})"


class _WithPathKey:
    """A path's input names, and :data:`PATH_KEY`, which the step's ``forward`` reads."""

    def __init__(self, names):
        self.names = names

    def __contains__(self, name: object) -> bool:
        return name == PATH_KEY or name in self.names

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)


def _pipeline_input_names(names: list[str]):
    return names.without(PIPELINE_KEYS) if isinstance(names, BatchInputNames) else set(names)


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The batch as the model sees it: without the keys the pipeline keeps for itself
    (``loss_mask``, read by AWQ with ``use_loss_mask=True``), which no forward takes. The graph is
    traced on this and every batch checked on this, so the two agree on what an input is."""
    return {name: value for name, value in batch.items() if name not in PIPELINE_KEYS}


def row_kind(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The kind of one dataset row: the inputs it gives (a ``datasets.Dataset`` holds None in the
    columns a row lacks: a text-only row's ``pixel_values``), without the keys the pipeline keeps."""
    return tuple(name for name, value in row.items() if value is not None and name not in PIPELINE_KEYS)


class _MixedBatch:
    """What the collator hands on instead of a batch of rows of several kinds (``kinds``: each row's,
    in the batch's order), so that the batches after it are still drawn and checked. Read as a batch
    (``model(**batch)`` in a pipeline other than the sequential one, which does not check batches), it
    raises :class:`MixedBatchError`."""

    def __init__(self, kinds: list[tuple[str, ...]]):
        self.kinds = kinds

    def keys(self):
        raise self.error("a calibration batch")

    def __getitem__(self, name):
        raise self.error("a calibration batch")

    __iter__ = items = keys

    def error(self, where: str, rows: list[int] | None = None) -> MixedBatchError:
        labels = [f"row {row}" for row in rows] if rows and len(rows) == len(self.kinds) else \
            [f"its row {position}" for position in range(len(self.kinds))]
        by_kind: dict[tuple[str, ...], list[str]] = {}
        for label, kind in zip(labels, self.kinds):
            by_kind.setdefault(kind, []).append(label)
        detail = "; ".join(f"{', '.join(labels)}: {input_kind(kind)}" for kind, labels in by_kind.items())
        return MixedBatchError(
            f"{where} mixes rows of {len(by_kind)} kinds ({detail}). Each kind of batch runs on subgraphs traced for "
            "its inputs, and one batch on one; collated together, the rows of one kind would lose their inputs (the "
            "default collator keeps the inputs of the first row) or the collator fails. Give the pipeline batches of "
            "one kind: batch_size=1, or a DataLoader (oneshot's dataset= takes one) whose batch_sampler batches the "
            "rows of each kind apart")


class _KindChecked:
    """A collator that refuses a batch of rows of several kinds before collating it: it hands on a
    :class:`_MixedBatch`, which the checked cache (or the trace of the first batch) raises about."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, features, *args, **kwargs):
        if isinstance(features, list) and len(features) > 1 and all(isinstance(row, Mapping) for row in features):
            kinds = [row_kind(row) for row in features]
            if len(set(kinds)) > 1:
                return _MixedBatch(kinds)
        return self.collate(features, *args, **kwargs)


@contextlib.contextmanager
def _collator_checked(dataloader) -> Iterator[None]:
    """The dataloader's collator checks each batch's rows for kinds, inside the block, where oneshot's
    did not wrap it (a DataLoader handed to oneshot as its dataset). Without automatic batching
    (``batch_size=None``) each row is a batch: nothing to check."""
    collate = getattr(dataloader, "collate_fn", None)
    if collate is None or isinstance(collate, _KindChecked) or getattr(dataloader, "batch_sampler", None) is None:
        yield
        return
    dataloader.collate_fn = _KindChecked(collate)
    try:
        yield
    finally:
        dataloader.collate_fn = collate


class _Drawn:
    """A sampler whose indices are noted as they are drawn (by the batch sampler, in the process
    that iterates the dataloader, also when workers load the rows)."""

    def __init__(self, sampler, drawn: list[int]):
        self.sampler = sampler
        self._drawn = drawn

    def __iter__(self) -> Iterator[int]:
        for index in self.sampler:
            self._drawn.append(int(index))
            yield index

    def __len__(self) -> int:
        return len(self.sampler)


class _BatchRows:
    """Which rows of the dataset each batch of a dataloader holds.

    llm-compressor's dataloader shuffles by default (``shuffle_calibration_samples=True``: a
    ``RandomSampler``, which draws another order on every pass), so the batch number of an error
    names no row of the dataset, and the order cannot be worked out afterwards. Its batches come
    from a ``BatchSampler`` over that sampler: the indices are noted as it draws them, and batch
    ``k`` holds the ``k``-th run of ``batch_size`` of them. A dataloader without automatic batching
    (``batch_size=None``) over a ``SequentialSampler`` makes batch ``k`` of row ``k``; any other
    sampler's rows are not known."""

    def __init__(self, dataloader):
        self._dataloader = dataloader
        self._drawn: list[int] = []
        self._batch_size: int | None = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        from torch.utils.data import BatchSampler

        batch_sampler = getattr(self._dataloader, "batch_sampler", None)
        if type(batch_sampler) is not BatchSampler:  # a subclass may batch otherwise
            yield
            return
        sampler = batch_sampler.sampler
        batch_sampler.sampler = _Drawn(sampler, self._drawn)
        self._batch_size = batch_sampler.batch_size
        try:
            yield
        finally:
            batch_sampler.sampler = sampler

    def rows(self, index: int) -> list[int] | None:
        from torch.utils.data import SequentialSampler

        if self._batch_size is not None:
            return self._drawn[index * self._batch_size:(index + 1) * self._batch_size] or None
        if getattr(self._dataloader, "batch_sampler", True) is None and \
                type(getattr(self._dataloader, "sampler", None)) is SequentialSampler:
            return [index]
        return None

    def where(self, index: int) -> str:
        rows = self.rows(index)
        if rows is None:
            return f"calibration batch {index} (in the order the dataloader gives them; its sampler does not say " \
                   "which dataset rows)"
        return f"calibration batch {index} (dataset row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows))})"


#: Dataset rows named in the summary of the batches that do not fit, at most.
ROWS_NAMED = 20


class _CheckedBatches:
    """A dataloader whose batches are routed and checked as the pipeline caches them: each batch is
    handed on with the index of its kind's path (:data:`PATH_KEY`), the path traced on it where it is
    the first of its kind. A batch that does not fit (rows of several kinds, a constant of the trace
    with another value) stops the caching (nothing of it or after it is kept); the rest are still drawn
    and checked, so the error names every dataset row to change, not only the first."""

    def __init__(self, dataloader, session: "_Session"):
        self._dataloader = dataloader
        self._session = session

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        rows = _BatchRows(self._dataloader)
        failures: list[tuple[int, InputMismatchError]] = []
        fatal: Exception | None = None
        with rows.recording(), _collator_checked(self._dataloader):
            for index, batch in enumerate(self._dataloader):
                where = ranks.where_prefix() + rows.where(index)
                try:
                    if isinstance(batch, _MixedBatch):
                        raise batch.error(where, rows.rows(index))
                    path = self._session.route(batch, where)
                except InputMismatchError as error:
                    failures.append((index, error))
                    continue
                except Exception as error:
                    # a new kind's trace failed, or its path runs other targets (PathMismatchError):
                    # with several ranks, the others still learn it (below), or they would wait for
                    # this one in their first reduction until the process group timed out
                    if not ranks.is_distributed():
                        raise
                    fatal = error
                    break
                if not failures:
                    yield {**batch, PATH_KEY: path}
        error = fatal or (_summary(failures, rows, len(self._dataloader)) if failures else None)
        # with several ranks, every rank raises or none does (llmcompressor_ranks.agreed_error)
        error = ranks.agreed_error(error, (MixedBatchError, PathMismatchError))
        if error is not None:
            raise error from (failures[0][1] if failures and fatal is None else None)
        self._session.agree_modules()


def check_aligned(paths: list[Partition], index: int, where: str) -> None:
    """Raise :class:`PathMismatchError` unless path ``index`` runs, at each subgraph, the sequential
    targets path 0 runs there, and every module both paths call in the same subgraphs: the pipeline
    calibrates subgraph ``i``'s modules on every batch, then finishes them, before subgraph ``i + 1``.
    (A module one path called one subgraph later would be calibrated again after it was compressed.)"""
    first, new = paths[0], paths[index]
    one, other = (f"batches with {path.kind()}" for path in (first, new))
    problem = None
    only = {kind: [target for subgraph in path for target in subgraph.targets]
            for kind, path in ((one, first), (other, new))}
    for kind, targets in ((one, only[one]), (other, only[other])):
        elsewhere = set(only[other if kind == one else one])
        missing = [target for target in targets if target not in elsewhere]
        if missing:
            problem = (f"sequential targets {', '.join(map(repr, missing[:5]))}{' ...' if len(missing) > 5 else ''} "
                       f"run for {kind} only")
            break
    if problem is None:
        for position, (a, b) in enumerate(zip(first, new)):
            if a.targets != b.targets:
                problem = f"subgraph {position} runs {a.targets} for {one}, {b.targets} for {other}"
                break
    if problem is None:
        calls = [_call_positions(path) for path in (first, new)]
        for module in calls[0].keys() & calls[1].keys():
            if calls[0][module] != calls[1][module]:
                problem = (f"module {module!r} runs in subgraph {_positions(calls[0][module])} for {one}, in subgraph "
                           f"{_positions(calls[1][module])} for {other}")
                break
    if problem is not None:
        raise PathMismatchError(
            f"{where} has inputs {new.kind()}, another kind than the batches before it, so the pipeline "
            f"traced its own subgraphs on it; but {problem}. llm-compressor's sequential pipeline runs subgraph i over "
            "every batch and calibrates the modules it ran before subgraph i + 1, so subgraph i of every kind must run "
            "the same layers. Leave the targets one kind does not run out of sequential_targets (a vision tower's "
            "blocks: the tower then runs whole before the first text layer), or calibrate on rows of one kind")


def _call_positions(path: Partition) -> dict[str, tuple[int, ...]]:
    positions: dict[str, list[int]] = {}
    for subgraph in path:
        for node in subgraph.graph.find_nodes(op="call_module"):
            positions.setdefault(str(node.target), []).append(subgraph.index)
    return {module: tuple(dict.fromkeys(found)) for module, found in positions.items()}


def _positions(positions: tuple[int, ...]) -> str:
    return ", ".join(map(str, positions))


def _summary(failures: list[tuple[int, InputMismatchError]], rows: _BatchRows, total: int) -> InputMismatchError:
    first = failures[0][1]
    if len(failures) == 1:
        return first
    named = [row for index, _ in failures for row in (rows.rows(index) or [])]
    where = (f"dataset rows {', '.join(map(str, named[:ROWS_NAMED]))}{' ...' if len(named) > ROWS_NAMED else ''}"
             if named else f"calibration batches {', '.join(str(index) for index, _ in failures[:ROWS_NAMED])}")
    return type(first)(f"{first}\n{len(failures)} of {total} calibration batches are refused: {where}")


class _Session:
    """What one ``tracezoo_tracing`` block patches into the pipeline, and the paths of the last trace
    (with the model and context to trace a new kind of batch in, as the cache meets it)."""

    def __init__(self, module, unused_inputs: Iterable[str]):
        self.module = module
        self.unused_inputs = tuple([unused_inputs] if isinstance(unused_inputs, str) else unused_inputs)
        self.paths: SubgraphPaths | None = None
        self.model: nn.Module | None = None
        self.pipeline_subgraphs: list = []
        self.routed: set[int] = set()  # the paths this process's batches run on

    @contextlib.contextmanager
    def _tracing_context(self, model: nn.Module) -> Iterator[None]:
        # the context the pipeline runs the subgraphs in (eager attention, no cache, eval mode), like
        # llm-compressor's own trace; the modifiers' hooks stay off while tracing
        from compressed_tensors.offload import disable_onloading
        from llmcompressor.modifiers.utils.hooks import HooksMixin
        from llmcompressor.utils.helpers import calibration_forward_context

        with calibration_forward_context(model), HooksMixin.disable_hooks(), disable_onloading():
            yield

    def trace_subgraphs(self, model: nn.Module, sample_input: Mapping[str, Any], sequential_targets,
                        ignore: Iterable[str] | None, targets_per_subgraph: int = 1) -> list:
        """The pipeline's ``trace_subgraphs(model, sample_input, sequential_targets, ignore,
        targets_per_subgraph)``, on tracezoo's tracer; traced in the context the pipeline runs
        the subgraphs in (eager attention, no cache, eval mode), like llm-compressor's own. The
        subgraphs of another kind of batch are traced as the cache meets the first of its kind."""
        # with several ranks, every rank traces on rank 0's first batch (llmcompressor_ranks.agreed_sample)
        sample = ranks.agreed_sample(sample_input, _first_batch_inputs, (MixedBatchError,))
        warn_unmatched_recipe_ignores(model)
        with self._tracing_context(model):
            paths = trace_subgraphs(model, _on_device(sample, model), sequential_targets,
                                    tracezoo_ignore(ignore), targets_per_subgraph, self.unused_inputs)
        ranks.check_same_graphs(paths, type(model).__name__)
        self.paths, self.model, self.routed = paths, model, set()
        self.pipeline_subgraphs = to_pipeline_subgraphs(paths)
        return self.pipeline_subgraphs

    def route(self, batch: Mapping[str, Any], where: str) -> int:
        """The index of ``batch``'s path, traced on it if it is the first of its kind; raises for a
        batch its path does not take (a constant of the trace with another value)."""
        inputs = model_inputs(batch)
        index = self.paths.find(inputs)
        if index is None:
            with self._tracing_context(self.model):
                index = self.paths.trace_path(self.model, _on_device(inputs, self.model), where)
            check_aligned(self.paths.paths, index, where)
        self.paths.paths[index].check_batch(inputs, where)
        self.routed.add(index)
        return index

    def agree_modules(self) -> None:
        """With several ranks, once each routed its batches: every pipeline subgraph's ``submodules``
        are those subgraph ``i`` calls on any rank, the same list on every rank, or every rank raises
        where a module the modifiers calibrate runs on some ranks only
        (:func:`~.llmcompressor_ranks.same_modules_on_every_rank`)."""
        # the paths this rank's batches run on: rank 0's first kind is traced on every rank, and runs
        # on those that have batches of it
        paths = [path for index, path in enumerate(_paths(self.paths)) if index in self.routed]
        called = [_called_modules(paths, index) for index in range(len(self.paths))]
        agreed = ranks.same_modules_on_every_rank(self.model, called, _kinds(paths))
        if agreed is not None:
            for subgraph, modules in zip(self.pipeline_subgraphs, agreed):
                subgraph.modules_of_every_rank = modules

    def cache_class(self):
        session = self

        class CheckedIntermediatesCache(self.module.IntermediatesCache):
            """The pipeline's cache, checking batches as it takes them and keeping the type of
            the containers it stores."""

            @classmethod
            def from_dataloader(cls, dataloader, *args, **kwargs):
                if session.paths is not None:
                    dataloader = _CheckedBatches(dataloader, session)
                return super().from_dataloader(dataloader, *args, **kwargs)

            # A step runs the subgraph of each batch's own path: the names it reads, and those it
            # drops after, are that path's (a name of another path may be a value this batch still
            # needs, or one it never had).
            def fetch(self, batch_index, input_names=None):
                if isinstance(input_names, PathNames):
                    input_names = input_names.of(self._path(batch_index))
                return super().fetch(batch_index, input_names)

            def pin_memory(self, batch_index, input_names=None):
                if isinstance(input_names, PathNames):
                    input_names = input_names.of(self._path(batch_index))
                return super().pin_memory(batch_index, input_names)

            def delete(self, batch_index, consumed_names=None):
                if isinstance(consumed_names, PathNames):
                    consumed_names = consumed_names.of(self._path(batch_index))
                return super().delete(batch_index, consumed_names)

            def _path(self, batch_index: int) -> int:
                marker = self.batch_intermediates[batch_index].get(PATH_KEY)
                return 0 if marker is None else marker.value

            # The cache rebuilds every dict as a plain dict and every tuple as a plain tuple. A
            # value handed from one subgraph to the next may be a ModelOutput (a dict subclass:
            # Qwen3-VL's image features, read as `.deepstack_features` by the next subgraph) or a
            # named tuple, whose attribute access would fail after the cache.
            # A mapping that is no dict (Gemma 4's `shared_kv_states`, a UserDict the layers fill:
            # patcher.trace.shared_state) it keeps as it is, with a warning and its keys and values
            # left on the accelerator for every batch; it is stored as a dict and refilled instead.
            @classmethod
            def _offload_value(cls, value, *args, **kwargs):
                kind = type(value)
                if (isinstance(value, dict) and kind is not dict) or (isinstance(value, tuple) and hasattr(value, "_fields")):
                    plain = dict(value) if isinstance(value, dict) else tuple(value)
                    offloaded = super()._offload_value(plain, *args, **kwargs)
                    offloaded.value = _Typed(kind, offloaded.value)
                    return offloaded
                if isinstance(value, MutableMapping) and not isinstance(value, dict):
                    offloaded = super()._offload_value(dict(value), *args, **kwargs)
                    offloaded.value = _Refilled(value, offloaded.value)
                    return offloaded
                return super()._offload_value(value, *args, **kwargs)

            @classmethod
            def _onload_value(cls, intermediate):
                if isinstance(intermediate.value, _Typed):
                    typed = intermediate.value
                    plain = super()._onload_value(dataclasses.replace(intermediate, value=typed.value))
                    return typed.kind(**plain) if isinstance(plain, dict) else typed.kind(*plain)
                if isinstance(intermediate.value, _Refilled):
                    refilled = intermediate.value
                    items = super()._onload_value(dataclasses.replace(intermediate, value=refilled.value))
                    return refilled.filled(items)
                return super()._onload_value(intermediate)

        return CheckedIntermediatesCache


def warn_unmatched_recipe_ignores(model: nn.Module, modifiers: Iterable | None = None) -> list[str]:
    """Warn (:class:`RecipeIgnoreWarning`) for every ``ignore`` entry given to a modifier of the
    active recipe (or of ``modifiers``) that matches no module of ``model``, naming the closest
    module or class name and whether this run quantizes it; return the warnings' texts.

    Matched as compressed-tensors matches them (``is_match``: a whole module name, a ``re:`` regex
    from the start of the name, or a class name along the MRO). A warning, not an error: recipes
    are shared across models, and llm-compressor's own examples name modules of two transformers
    layouts (``re:visual.*`` and ``re:model.visual.*``), one of which matches nothing. Entries left
    at a modifier's default (QuIP's ``lm_head``) are not the user's and are not checked. Called when
    the pipeline traces: the recipe is initialized then (each module it quantizes carries its
    ``quantization_scheme``) and no weight has changed."""
    import difflib
    import warnings

    from compressed_tensors.utils.match import is_match

    if modifiers is None:
        from llmcompressor.core import active_session

        recipe = getattr(active_session().lifecycle, "recipe", None)
        modifiers = getattr(recipe, "modifiers", None) or ()
    named = list(model.named_modules())
    candidates = sorted({name for name, _ in named if name} | {type(module).__name__ for _, module in named})
    texts = []
    for modifier in modifiers:
        if "ignore" not in getattr(modifier, "model_fields_set", {"ignore"}):
            continue
        entries = getattr(modifier, "ignore", None) or ()
        for entry in [entries] if isinstance(entries, str) else entries:
            if not isinstance(entry, str) or any(is_match(name, module, entry) for name, module in named):
                continue
            wanted = entry.removeprefix("re:").replace("\\", "").rstrip(".*$")
            close = difflib.get_close_matches(wanted, candidates, n=1)
            hint = ""
            if close:
                found = dict(named).get(close[0])
                quantized = found is not None and getattr(found, "quantization_scheme", None) is not None
                hint = f"; did you mean {close[0]!r}?" + (f" ({close[0]!r} is quantized by this run)" if quantized else "")
            text = (f"{type(modifier).__name__}'s ignore entry {entry!r} matches no module of {type(model).__name__}, "
                    f"so it ignores nothing{hint}. Entries match a whole module name, a 're:' regex from the start "
                    "of the name, or a module class name")
            texts.append(text)
            warnings.warn(text, RecipeIgnoreWarning, stacklevel=2)
    return texts


class _Typed:
    """A cached container's items, with the container type to rebuild on the way out."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: type, value: Any):
        self.kind = kind
        self.value = value


class _Refilled:
    """A cached mapping of another class than dict: its items, and an empty copy of it to fill with
    them on the way out (each fetch gets a new one, as the chain copies it for every layer)."""

    __slots__ = ("empty", "value")

    def __init__(self, mapping: MutableMapping, value: Any):
        self.empty = copy.copy(mapping)
        self.empty.clear()
        self.value = value

    def filled(self, items: Mapping[str, Any]) -> MutableMapping:
        mapping = copy.copy(self.empty)
        mapping.update(items)
        return mapping


def _on_device(sample: Mapping[str, Any], model: nn.Module) -> dict[str, Any]:
    """The sample's tensors on the device the pipeline runs the model on (not meta)."""
    from llmcompressor.utils.dev import get_main_device

    device = get_main_device()
    return {name: value.to(device) if isinstance(value, torch.Tensor) and value.device != device else value
            for name, value in sample.items()}


#: llm-compressor's lookup keyed on a class object that a rewritten copy of the class must pass too:
#: the linearized experts module registered for a fused experts class (``modeling/moe/llama4.py``,
#: ``gpt_oss.py``: ``LinearExperts2D._registry[GptOssExperts] = GptOssLinearExperts``). Read by
#: ``get_non_linearized_moes`` (which experts ``oneshot`` linearizes) and ``linearize_moe`` (into
#: what). Every other lookup of llm-compressor 0.14.0.1 and compressed-tensors 0.19.0 that a
#: tracezoo class meets keys on the class *name*, which tracezoo keeps (GUIDE.md, "Using tracezoo
#: in llm-compressor", MoE models).
EXPERTS_REGISTRY = ("llmcompressor.modeling.moe.linear_experts", "LinearExperts2D", "get_registration")


@contextlib.contextmanager
def _registries_find_copies() -> Iterator[None]:
    """Inside the block, the experts registry finds a rewritten copy of a registered class.

    A class the rewrite leaves alone is the original already (``rewrite.originals``); one it
    rewrites is a copy (GPT-OSS's experts: their loop over the routed experts is rewritten), and
    missing the registry was silent: ``linearize_moe`` fell back to the generic linearization,
    which splits GPT-OSS's interleaved gate/up columns into halves, so each "gate_proj" held
    gate and up rows mixed (the same function, other Linears to quantize and save). A lookup
    that misses is asked again with the class the copy was made from."""
    from ..rewrite.originals import source_class

    module_name, class_name, method = EXPERTS_REGISTRY
    owner = getattr(importlib.import_module(module_name), class_name, None)
    saved = getattr(owner, "__dict__", {}).get(method)
    if not isinstance(saved, classmethod):
        raise IntegrationError(
            f"{module_name}.{class_name}.{method} is not the classmethod tracezoo_tracing extends: this "
            f"llm-compressor release registers MoE experts differently from the one it was written for "
            f"(llmcompressor=={TESTED_VERSION}), so tracezoo's rewritten experts classes may not be linearized")
    lookup = saved.__func__

    def get_registration(cls, key, default=None):
        found = lookup(cls, key, None)
        original = source_class(key) if found is None and isinstance(key, type) else None
        if original is not None:
            found = lookup(cls, original, None)
        return default if found is None else found

    setattr(owner, method, classmethod(get_registration))
    try:
        yield
    finally:
        setattr(owner, method, saved)


@contextlib.contextmanager
def tracezoo_tracing(unused_inputs: Iterable[str] = ()):
    """Make ``oneshot``'s sequential pipeline trace with tracezoo, inside the ``with`` block.

    ``unused_inputs`` names calibration inputs the eager model does not read either (see
    :func:`patcher.trace_subgraphs`); any other input that would not reach the graph's output is
    an error, never a silent drop. Inside the block, llm-compressor's registry of MoE experts
    finds tracezoo's rewritten copies of the classes it registers (:data:`EXPERTS_REGISTRY`).
    Under ``torchrun``, every rank runs the block: the ranks trace one first path, agree on refused
    batches and on each subgraph's modules, and wait for each other's quantized weights
    (:mod:`.llmcompressor_ranks`).
    Raises :class:`IntegrationError` when llm-compressor is missing or lacks what this replaces.
    Not re-entrant across threads: it patches the pipeline module, the registry and the collator maker.

    Yields the block's session: ``session.paths`` is the :class:`~patcher.partition.SubgraphPaths` of
    the last pipeline run (the subgraphs of each kind of batch it met; ``kinds()`` names their inputs).
    """
    module = _pipeline_module()
    session = _Session(module, unused_inputs)
    saved = {name: getattr(module, name) for name in PATCHED}
    module.trace_subgraphs = session.trace_subgraphs
    module.IntermediatesCache = session.cache_class()
    module.LifecycleCallbacks = ranks.written_before_read(saved["LifecycleCallbacks"])
    try:
        with _registries_find_copies(), _collators_check_kinds(), ranks.rows_of_each_rank():
            yield session
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


@contextlib.contextmanager
def _collators_check_kinds() -> Iterator[None]:
    """Inside the block, the collator ``oneshot`` makes for a dataset refuses a batch of rows of several
    kinds (:class:`_KindChecked`), also the first batch, which the pipeline draws and traces on before
    its cache checks any (the cache wraps the collator of a DataLoader handed to ``oneshot`` itself).
    Left alone where this llm-compressor release makes its collators elsewhere: the cache still
    refuses such batches, only the first batch is then collated unchecked."""
    module_name, name = COLLATE_MODULE
    try:
        owner = importlib.import_module(module_name)
    except ImportError:
        owner = None
    make = getattr(owner, name, None)
    if make is None:
        yield
        return

    def make_collate_fn(*args, **kwargs):
        return _KindChecked(make(*args, **kwargs))

    setattr(owner, name, make_collate_fn)
    try:
        yield
    finally:
        setattr(owner, name, make)
