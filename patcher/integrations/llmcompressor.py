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

Why the batches are checked: the pipeline hands each subgraph only the names in its
``input_names``. A batch with an input the graph was not traced with (a padded
``attention_mask`` on a graph traced without one, ``pixel_values`` on a graph traced on text)
would lose it without a word, and calibrate on the logits of another input. Here such a batch
raises :class:`~patcher.InputMismatchError` (or :class:`~patcher.MissingInputError` for an input
it lacks) naming the input, while the pipeline caches the batches: before any weight changes.
Subgraph 0 is handed every input of each batch as well (its ``input_names`` is a
:class:`~patcher.partition.BatchInputNames`), and refuses such an input itself.

Distributed ``oneshot`` (``torchrun --nproc_per_node N``, every rank inside the block): every rank
traces on rank 0's first batch and checks its own batches against that graph, every rank raises
when any rank refuses a batch, and each layer's quantized weights are written by every rank before
any rank reads them (:mod:`patcher.integrations.llmcompressor_ranks`).

Tested with llmcompressor 0.14.0.1 (transformers 5.17.0): the patched names are internals of its
``llmcompressor.pipelines.sequential.pipeline`` module, checked on entry.
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

from ..partition import BatchInputNames, Subgraph, trace_subgraphs
from ..registry.ignore import DEFAULT_IGNORE
from ..trace.errors import InputMismatchError
from ..trace.record import TraceRecord
from . import llmcompressor_ranks as ranks

#: The module whose names the pipeline reads at call time (``from ... import trace_subgraphs``).
PIPELINE_MODULE = "llmcompressor.pipelines.sequential.pipeline"
#: The names of the pipeline module that ``tracezoo_tracing`` replaces inside its block.
PATCHED = ("trace_subgraphs", "IntermediatesCache", "LifecycleCallbacks")
#: Batch keys the pipeline itself reads from its cache and never passes to the model.
PIPELINE_KEYS = frozenset({"loss_mask"})
#: The llm-compressor release the integration is tested with.
TESTED_VERSION = "0.14.0.1"


class IntegrationError(RuntimeError):
    """llm-compressor is missing or does not have what the integration replaces."""


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
        ``submodules``) running tracezoo's: its ``forward`` checks every run against the trace."""

        tracezoo: Subgraph | None = None

        def forward(self, *args, **kwargs) -> dict[str, Any]:
            return self.tracezoo.forward(*args, **kwargs)

    return TracezooSubgraph


def to_pipeline_subgraphs(subgraphs: list[Subgraph]) -> list:
    """tracezoo's subgraphs as llm-compressor's ``Subgraph`` objects, in order.

    The pipeline reads ``input_names`` only through ``IntermediatesCache.fetch``, which keeps a batch's
    value when ``name in input_names``: subgraph 0 keeps its :class:`~patcher.partition.BatchInputNames`,
    so it is handed every input of a batch (but the keys the pipeline keeps for itself) and refuses one
    the graph was traced without, even where the batches were not checked as the cache took them."""
    cls = _pipeline_subgraph_class()
    return [cls(graph=subgraph.graph, input_names=_pipeline_input_names(subgraph.input_names),
                consumed_names=set(subgraph.consumed_names), tracezoo=subgraph) for subgraph in subgraphs]


def _pipeline_input_names(names: list[str]):
    return names.without(PIPELINE_KEYS) if isinstance(names, BatchInputNames) else set(names)


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The batch as the model sees it: without the keys the pipeline keeps for itself
    (``loss_mask``, read by AWQ with ``use_loss_mask=True``), which no forward takes. The graph is
    traced on this and every batch checked on this, so the two agree on what an input is."""
    return {name: value for name, value in batch.items() if name not in PIPELINE_KEYS}


def check_batch(record: TraceRecord, batch: Mapping[str, Any], where: str, fix: str | None = None) -> None:
    """Raise if ``batch`` has an input the graph was traced without, lacks one it takes, or gives
    a constant of the trace another value (see :class:`~patcher.trace.record.TraceRecord`);
    ``fix`` replaces what the error of an input too many or too few says to do."""
    record.check_model_inputs(model_inputs(batch), where, fix)


def dataset_fix(record: TraceRecord, batch: Mapping[str, Any]) -> str | None:
    """What to do about a calibration batch with other inputs than the batch the graph was traced
    on: the pipeline traces on the first batch it draws, so the user changes the dataset, not the
    trace (text-only rows beside image rows: the first batch decides which kind the graph takes)."""
    inputs = model_inputs(batch)
    lacks = [name for name in record.tensor_inputs if name not in inputs]
    extra = [name for name in inputs if name not in record.tensor_inputs and name not in record.constants]
    if not lacks and not extra:
        return None
    # about the inputs the error names: check_model_inputs names an input too many before one too few
    names = ", ".join(map(repr, extra or lacks))
    traced = "had no" if extra else "had"
    kind = "without" if extra else "that have"
    return (f"the pipeline traced the graph on the first batch it drew, which {traced} {names}, and every batch "
            f"must carry the inputs that batch carried: filter the dataset to rows of one kind (the rows {kind} "
            f"{names}, or only the others, the graph then being traced on those), or batch it so that every batch "
            "carries the same inputs (rows of both kinds in each batch, where the model and the collator allow); "
            "one graph cannot take batches of both kinds")


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
    """A dataloader whose batches are checked as the pipeline caches them. A batch that does not
    fit stops the caching (nothing of it or after it is kept); the rest are still drawn and
    checked, so the error names every dataset row to filter out, not only the first."""

    def __init__(self, dataloader, record: TraceRecord):
        self._dataloader = dataloader
        self._record = record

    def __len__(self) -> int:
        return len(self._dataloader)

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        rows = _BatchRows(self._dataloader)
        failures: list[tuple[int, InputMismatchError]] = []
        with rows.recording():
            for index, batch in enumerate(self._dataloader):
                try:
                    check_batch(self._record, batch, ranks.where_prefix() + rows.where(index),
                                dataset_fix(self._record, batch))
                except InputMismatchError as error:
                    failures.append((index, error))
                if not failures:
                    yield batch
        error = _summary(failures, rows, len(self._dataloader)) if failures else None
        # with several ranks, every rank raises or none does (llmcompressor_ranks.agreed_error)
        error = ranks.agreed_error(error)
        if error is not None:
            raise error from (failures[0][1] if failures else None)


def _summary(failures: list[tuple[int, InputMismatchError]], rows: _BatchRows, total: int) -> InputMismatchError:
    first = failures[0][1]
    if len(failures) == 1:
        return first
    named = [row for index, _ in failures for row in (rows.rows(index) or [])]
    where = (f"dataset rows {', '.join(map(str, named[:ROWS_NAMED]))}{' ...' if len(named) > ROWS_NAMED else ''}"
             if named else f"calibration batches {', '.join(str(index) for index, _ in failures[:ROWS_NAMED])}")
    return type(first)(f"{first}\n{len(failures)} of {total} calibration batches do not fit the graph: {where}")


class _Session:
    """What one ``tracezoo_tracing`` block patches into the pipeline, and the last trace's record."""

    def __init__(self, module, unused_inputs: Iterable[str]):
        self.module = module
        self.unused_inputs = tuple([unused_inputs] if isinstance(unused_inputs, str) else unused_inputs)
        self.record: TraceRecord | None = None

    def trace_subgraphs(self, model: nn.Module, sample_input: Mapping[str, Any], sequential_targets,
                        ignore: Iterable[str] | None, targets_per_subgraph: int = 1) -> list:
        """The pipeline's ``trace_subgraphs(model, sample_input, sequential_targets, ignore,
        targets_per_subgraph)``, on tracezoo's tracer; traced in the context the pipeline runs
        the subgraphs in (eager attention, no cache, eval mode), like llm-compressor's own."""
        from compressed_tensors.offload import disable_onloading
        from llmcompressor.modifiers.utils.hooks import HooksMixin
        from llmcompressor.utils.helpers import calibration_forward_context

        warn_unmatched_recipe_ignores(model)
        # with several ranks, every rank traces on rank 0's first batch (llmcompressor_ranks.agreed_sample)
        sample = ranks.agreed_sample(model_inputs(sample_input))
        with calibration_forward_context(model), HooksMixin.disable_hooks(), disable_onloading():
            subgraphs = trace_subgraphs(model, _on_device(sample, model), sequential_targets,
                                        tracezoo_ignore(ignore), targets_per_subgraph, self.unused_inputs)
        ranks.check_same_graphs(subgraphs, type(model).__name__)
        self.record = subgraphs[0].record
        return to_pipeline_subgraphs(subgraphs)

    def cache_class(self):
        session = self

        class CheckedIntermediatesCache(self.module.IntermediatesCache):
            """The pipeline's cache, checking batches as it takes them and keeping the type of
            the containers it stores."""

            @classmethod
            def from_dataloader(cls, dataloader, *args, **kwargs):
                if session.record is not None:
                    dataloader = _CheckedBatches(dataloader, session.record)
                return super().from_dataloader(dataloader, *args, **kwargs)

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
    Under ``torchrun``, every rank runs the block: the ranks trace one graph, agree on refused
    batches, and wait for each other's quantized weights (:mod:`.llmcompressor_ranks`).
    Raises :class:`IntegrationError` when llm-compressor is missing or lacks what this replaces.
    Not re-entrant across threads: it patches the pipeline module and the registry.
    """
    module = _pipeline_module()
    session = _Session(module, unused_inputs)
    saved = {name: getattr(module, name) for name in PATCHED}
    module.trace_subgraphs = session.trace_subgraphs
    module.IntermediatesCache = session.cache_class()
    module.LifecycleCallbacks = ranks.written_before_read(saved["LifecycleCallbacks"])
    try:
        with _registries_find_copies(), ranks.rows_of_each_rank():
            yield session
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
