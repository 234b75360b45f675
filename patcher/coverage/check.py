"""The per-architecture check: build tiny, patch, trace, split, run, compare with eager."""

from __future__ import annotations

import inspect
import linecache
import math
import os
import re
import sys
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..registry.origins import noted_location, original_line
from ..samples.modalities import MIN_INFLUENCE, MODALITIES, Modality, path_fields, prepare_config, prepare_model
from ..verify.compare import compare, sweep_tolerance
from ..verify.eager import eager_inputs, run_eagerly
from ..trace.influence import eager_ignores, main_output as _output
from ..verify.compare import max_abs_diff as tensor_diff  # the sweep's public name for it

MAX_PARAMETERS = 50_000_000


@dataclass
class Attempt:
    """One sample kind of one architecture: ``text``, a modality's (``modalities.MODALITIES``), or
    ``vision_blocks``."""

    mode: str
    ran: bool = False  # the eager original ran on the sample
    traced: bool = False
    equal: bool = False
    subgraphs: int | None = None
    expected: int | None = None
    max_diff: float | None = None
    reuse_diff: float | None = None
    influence: float | None = None  # a modality's: max |output change| when only its input changes
    stage: str | None = None  # where it stopped: sample, eager, influence, trace, run, reuse, compare
    error: str | None = None
    blocker_kind: str | None = None
    blocker_rule: str | None = None
    blocker_location: str | None = None
    blocker_code: str | None = None
    unused_inputs: list[str] = field(default_factory=list)  # sample inputs eager ignores as well
    #: the targets this attempt traced with where they are not the row's: the decoder's layer list
    #: alone, after the row's layer classes (found elsewhere too) filled a cache the traced code
    #: read (``patcher.trace.filled_caches``: PI0's VLM layers are its expert's class)
    targets: list[str] = field(default_factory=list)
    #: whether the chain made eager's computing kernel calls on eager's layouts on the second sample
    #: (``patcher.verify.kernels``), which makes it equal on other CPUs too; None: not checked
    same_kernels: bool | None = None
    kernel_difference: str | None = None  # the first call that differs, both sides
    # the same calls on the same layouts as eager, in another order (patcher.verify.kernels: TZ108)
    kernels_in_another_order: bool = False


def _modality_attempts(cls):
    """One ``Attempt | None`` field per modality, named by its ``attempt`` (``row.multimodal``,
    ``row.video``, ``row.audio``): None where the class is not given that modality. Declared by the
    modality, so that adding one adds its field (and its column in the report's JSON rows). A
    modality's ``path_field`` (``row.image_path``: whether the class takes images at all; None: not
    known, the class or config did not load) goes before ``text``, where the JSON rows have it."""
    annotations = {}
    for name, annotation in cls.__annotations__.items():
        if name == "text":
            for modality in MODALITIES:
                if modality.path_field is not None:
                    annotations[modality.path_field] = "bool | None"
                    setattr(cls, modality.path_field, None)
        annotations[name] = annotation
    for modality in MODALITIES:
        annotations[modality.attempt] = "Attempt | None"
        setattr(cls, modality.attempt, None)
    cls.__annotations__ = annotations
    return cls


@dataclass
@_modality_attempts
class CoverageRow:
    architecture: str
    model_type: str | None = None
    built: bool = False
    stage: str | None = None  # where the build stopped: class, config, size, build, targets, patch, weights
    error: str | None = None
    error_location: str | None = None
    targets: list[str] = field(default_factory=list)
    parameters: int | None = None
    rewrites: dict[str, int] = field(default_factory=dict)
    patch_blockers: int = 0
    text: Attempt | None = None
    #: images again, with the vision tower's blocks as targets too (VLMs whose image sample works)
    vision_blocks: Attempt | None = None
    vision_targets: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the environment whose sweep built this row when it is not this one's (``patcher.coverage.
    #: elsewhere``: timm's VLMs, built where timm installs); None: built (or not) here
    built_in: str | None = None

    @property
    def traced(self) -> bool:
        return bool(self.text and self.text.traced)

    @property
    def equal(self) -> bool:
        return bool(self.text and self.text.equal)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CoverageRow":
        data = dict(data)
        for key in ("text", "vision_blocks", *(modality.attempt for modality in MODALITIES)):
            if data.get(key) is not None:
                data[key] = Attempt(**data[key])
        return cls(**data)


def _short(message: str, limit: int = 400) -> str:
    message = " ".join(str(message).split())
    return message if len(message) <= limit else message[: limit - 3] + "..."


_SKIP_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.__file__) + os.sep,
              os.path.dirname(os.path.abspath(__file__)) + os.sep)
_PATCHER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class _Generated:
    """Maps lines of the generated (patched) module back to the original modeling file."""

    def __init__(self, cls: type | None = None) -> None:
        self.file = self.original_file = None
        self.source = self.code = None
        if cls is not None:
            module = sys.modules[cls.__module__]
            self.file = inspect.getsourcefile(module)
            result = getattr(cls, "__tracezoo_patch__", None)
            self.code = Path(self.file).read_text(encoding="utf-8")
            self.source = getattr(result, "source", None)

    def location(self, filename: str, lineno: int, original_file: str | None) -> str:
        from ..trace.diagnose import short_path

        if self.file and filename == self.file and self.source:
            original = original_line(self.source, self.code, lineno)
            name = Path(original_file).name if original_file else "generated"
            if original:
                return f"{name}:{original}"
            moved = self._moved_from(lineno)
            return f"{moved} (moved, generated line {lineno})" if moved else f"{name}:(generated line {lineno})"
        return f"{short_path(filename)}:{lineno}"


    def _moved_from(self, lineno: int) -> str | None:
        """Code the patcher moved into a wrapper names its origin: ``# from modeling_x.py:766 (...)``."""
        lines = self.code.splitlines()
        # a call of a wrapper: its TRACING comment names the wrapper, whose body names the origin
        for index in (lineno - 2, lineno - 3):
            match = re.search(r"# TRACING\(\w+\).*-> (\w+)", lines[index]) if 0 <= index < len(lines) else None
            if match:
                start = next((number for number, line in enumerate(lines) if line.startswith(f"def {match.group(1)}(")), None)
                for line in lines[start:start + 12] if start is not None else ():
                    found = noted_location(line)
                    if found:
                        return found
        for index in range(min(lineno, len(lines)) - 1, max(-1, lineno - 80), -1):
            found = noted_location(lines[index])
            if found:
                return found
            if lines[index].startswith("def ") or lines[index].startswith("class "):
                break
        return None


def _innermost_frame(exc: BaseException) -> tuple[str, int] | None:
    frames = traceback.extract_tb(exc.__traceback__)
    chosen = None
    for frame in frames:
        if not frame.filename.startswith(_SKIP_DIRS) and not frame.filename.startswith("<"):
            chosen = frame
    if chosen is None and frames:
        chosen = frames[-1]
    return (chosen.filename, chosen.lineno) if chosen else None


def _record_failure(attempt: Attempt, stage: str, exc: BaseException, generated: _Generated,
                    original_file: str | None) -> None:
    from ..trace import MissingTargetsError, UntraceableCodeError

    attempt.stage = stage
    attempt.error = _short(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, UntraceableCodeError) and getattr(exc, "construct", None) is not None:
        construct = exc.construct
        attempt.blocker_kind = construct.symptom.name
        attempt.blocker_rule = construct.symptom.rule or None
        attempt.blocker_location = generated.location(construct.filename, construct.lineno, original_file)
        attempt.blocker_code = _short(construct.code, 160)
        return
    attempt.blocker_kind = "missing targets" if isinstance(exc, MissingTargetsError) else type(exc).__name__
    frame = getattr(exc, "location", None) or _innermost_frame(exc)
    graph_source = getattr(exc, "graph_source", None)  # raised by a graph's own code: the line it was traced from
    if graph_source and (frame is None or frame[0].startswith(_PATCHER_DIR) or frame[0].startswith("<")):
        frame = graph_source
    if frame:
        attempt.blocker_location = generated.location(frame[0], frame[1], original_file)
        attempt.blocker_code = _short(linecache.getline(frame[0], frame[1]).strip(), 160) or None


def _build(cls: type, config, seed: int):
    from ..models import random_model

    model = random_model(cls, config, seed)
    prepare_model(cls, config, model, seed)  # the modalities' (patcher.samples.*.modality)
    return model


def check_architecture(
    name: str,
    *,
    multimodal: bool = True,
    atol: float | None = None,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    max_parameters: int = MAX_PARAMETERS,
) -> CoverageRow:
    """Run the whole check for one model class name; never raises for the model's own failures.
    ``atol``: the largest |diff| that counts as equal (default: the sweep's row of
    ``patcher.verify.TOLERANCES``)."""
    from ..models import build_model, resolve_model_class
    from ..trace.tracer import sample_keys_not_taken
    from ..models.traceable import load_traceable
    from .discover import find_layers, trace_targets
    from .shrink import shrink_config

    start = time.perf_counter()
    row = CoverageRow(architecture=name)
    stage = "class"
    try:
        cls = resolve_model_class(name)
        if has_no_forward(cls):
            row.stage, row.error = NO_FORWARD, no_forward_message(cls)
            row.seconds = time.perf_counter() - start
            return row
        stage = "config"
        config = shrink_config(cls.config_class)
        prepare_config(config, cls)
        row.model_type = getattr(config, "model_type", None)
        for name, value in path_fields(cls, config).items():
            setattr(row, name, value)
        stage = "size"
        meta = build_model(cls, config, device="meta")
        row.parameters = sum(parameter.numel() for parameter in meta.parameters())
        if row.parameters > max_parameters:
            largest = sorted(meta.named_parameters(), key=lambda item: -item[1].numel())[:3]
            raise ValueError(f"{row.parameters:,} parameters after shrinking (limit {max_parameters:,}); largest: "
                             + ", ".join(f"{key} {tuple(value.shape)}" for key, value in largest))
        stage = "targets"
        classes, layer_list = find_layers(meta)
        row.targets = trace_targets(meta, classes, layer_list)
        del meta
        stage = "build"
        original = _build(cls, config, seed)
    except Exception as exc:  # noqa: BLE001
        from .upstream import upstream_note

        row.stage, row.error = stage, _short(f"{type(exc).__name__}: {exc}")
        known = upstream_note(row.model_type, str(exc))
        if known:
            row.error = _short(f"{type(exc).__name__}: {known}", 800)
        frame = _innermost_frame(exc)
        row.error_location = _Generated().location(*frame, None) if frame else None
        row.seconds = time.perf_counter() - start
        return row

    original_file = inspect.getsourcefile(sys.modules[cls.__module__])
    row.text = Attempt("text")
    attempts = [row.text]
    modality_of: dict[str, Modality] = {}
    for modality in MODALITIES if multimodal else ():
        if modality.takes(cls, config):
            attempt = Attempt(modality.attempt)
            setattr(row, modality.attempt, attempt)
            attempts.append(attempt)
            modality_of[attempt.mode] = modality

    # The eager original on each sample first: "built" means the tiny model runs.
    samples = {}
    for attempt in attempts:
        modality = modality_of.get(attempt.mode)
        try:
            samples[attempt.mode] = (modality.samples(config, original, seed) if modality is not None
                                     else _text_samples(config, seed, original))
            # Inputs the forward cannot take would be refused by the tracer: decoder_input_ids of a
            # decoder-only head on an encoder-decoder config (PegasusForCausalLM), attention_mask of
            # a model without one (xLSTM, whose **kwargs pass it to nothing)
            for sample in samples[attempt.mode]:
                for key in sample_keys_not_taken(original, sample):
                    del sample[key]
        except Exception as exc:  # noqa: BLE001
            _record_failure(attempt, "sample", exc, _Generated(), original_file)
            continue
        try:
            # the graph is traced with the cache off; some caches fail on hybrid layer mixes
            extra = eager_inputs(original, {})
            expected = [run_eagerly(original, fresh(sample)) for sample in samples[attempt.mode]]
            calls = _count_calls(original, row.targets, {**fresh(samples[attempt.mode][0]), **extra})
            samples[attempt.mode] = (samples[attempt.mode], expected, calls)
            attempt.ran = True
        except Exception as exc:  # noqa: BLE001
            _record_failure(attempt, "eager", exc, _Generated(), original_file)
            samples.pop(attempt.mode)
            continue
        if modality is None:
            continue
        inputs, expected, calls = samples[attempt.mode]
        try:
            varied = check_influence(attempt, modality, original, inputs[0], expected[0], extra, seed)
        except Exception as exc:  # noqa: BLE001
            _record_failure(attempt, "influence", exc, _Generated(), original_file)
            varied = None
        if varied is None:
            samples.pop(attempt.mode)
        elif modality.chain_runs_varied:
            samples[attempt.mode] = ([*inputs, varied[0]], [*expected, varied[1]], calls)
    _mark_text_alone(row.text, [(modality_of[attempt.mode], attempt) for attempt in attempts[1:]])
    row.built = any(attempt.ran for attempt in attempts)
    if not row.built:
        row.stage, row.error = "eager", attempts[0].error
        row.error_location = attempts[0].blocker_location
        row.seconds = time.perf_counter() - start
        return row

    stage = "patch"
    try:
        traceable_cls = load_traceable(cls, targets=classes, cache_dir=cache_dir)
        result = traceable_cls.__tracezoo_patch__
        row.rewrites = dict(sorted(Counter(rewrite.code for rewrite in result.rewrites).items()))
        row.patch_blockers = len(result.blockers)
        stage = "weights"
        traceable = _build(traceable_cls, config, seed)
        traceable.load_state_dict(original.state_dict(), strict=True)
    except Exception as exc:  # noqa: BLE001
        row.stage, row.error = stage, _short(f"{type(exc).__name__}: {exc}")
        frame = _innermost_frame(exc)
        row.error_location = _Generated().location(*frame, None) if frame else None
        for attempt in attempts:
            if attempt.ran:
                attempt.stage, attempt.error = stage, row.error
        row.seconds = time.perf_counter() - start
        return row

    generated = _Generated(traceable_cls)
    for attempt in attempts:
        if attempt.mode in samples:
            _attempt(attempt, traceable, original, row.targets, *samples[attempt.mode], generated, original_file,
                     sweep_tolerance(atol), layer_list=layer_list)
    for mode, modality in modality_of.items():
        if modality.vision_blocks and mode in samples:
            _vision_blocks_attempt(row, cls, config, original, classes, samples[mode][:2], cache_dir, seed,
                                   original_file, atol)
    row.seconds = time.perf_counter() - start
    return row


#: The stage of a row whose class has no ``forward`` of its own (``nn.Module``'s
#: ``_forward_unimplemented``): a top-level model whose ``generate`` calls its parts (Qwen2.5-Omni:
#: thinker, talker, token2wav), each swept as a row of its own. Nothing to run or trace, so neither
#: built nor a failure.
NO_FORWARD = "no forward"


def has_no_forward(cls) -> bool:
    return getattr(cls, "forward", None) is torch.nn.Module.forward


def no_forward_message(cls) -> str:
    parts = sorted({type_name for type_name in _part_classes(cls)})
    return (f"{cls.__name__} has no forward (nn.Module's _forward_unimplemented): its generate loop calls its parts"
            + (f" ({', '.join(parts)}), each swept as a row of its own" if parts else "")
            + "; nothing to trace here")


def _part_classes(cls) -> list[str]:
    """The generative classes of ``cls``'s modeling module that have a forward (the parts a
    top-level ``generate`` calls)."""
    from .discover import SUFFIXES

    module = sys.modules.get(cls.__module__)
    return [name for name, value in vars(module or object()).items()
            if isinstance(value, type) and name.endswith(SUFFIXES) and issubclass(value, torch.nn.Module)
            and not has_no_forward(value)]


#: The stage of a vision-blocks attempt on a model whose images reach the text model without a
#: tower of blocks: nothing to split, so neither a failure nor a success of the attempt.
NO_TOWER = "no tower"


def _vision_blocks_attempt(row: CoverageRow, cls, config, original, classes, samples_expected, cache_dir, seed,
                           original_file, atol) -> None:
    """The image samples again, with the vision tower's blocks before the text layers as targets:
    the class is patched with those blocks as targets too (never hidden in wrapped code)."""
    from ..models.towers import find_tower_blocks
    from ..models.traceable import load_traceable

    attempt = row.vision_blocks = Attempt("vision_blocks", ran=True)
    samples, expected = samples_expected
    stage = "targets"
    try:
        row.vision_targets = find_tower_blocks(original)
        if not row.vision_targets:
            # Fuyu, Gemma 4 Unified: patches go through a projection, there is no tower to split
            attempt.ran, attempt.stage = False, NO_TOWER
            attempt.error = "no vision tower with a list of blocks (patcher.find_tower_blocks found none)"
            return
        targets = row.vision_targets + [target for target in row.targets if target not in row.vision_targets]
        extra = eager_inputs(original, {})
        calls = _count_calls(original, targets, {**fresh(samples[0]), **extra})
        stage = "patch"
        patch_targets = list(dict.fromkeys([*classes, *(t for t in row.vision_targets if not t.startswith("re:"))]))
        traceable_cls = load_traceable(cls, targets=patch_targets, cache_dir=cache_dir)
        stage = "weights"
        traceable = _build(traceable_cls, config, seed)
        traceable.load_state_dict(original.state_dict(), strict=True)
    except Exception as exc:  # noqa: BLE001
        _record_failure(attempt, stage, exc, _Generated(), original_file)
        return
    _attempt(attempt, traceable, original, targets, samples, expected, calls, _Generated(traceable_cls), original_file,
             sweep_tolerance(atol))


def _text_samples(config, seed: int, model) -> list[dict]:
    """Two text samples: another batch size, length and left padding on the second, so the graph is
    reused on a new layout."""
    from .assistant_samples import assistant_sample, check_states_reach_output, needs_target_states
    from ..samples.sweep import coverage_text_sample, with_encoder_embeds

    from .handover_samples import check_handover_reaches_output, handover_builder, handover_samples

    if handover_builder(model) is not None:
        # a part of an Omni model: what the top-level generate hands it from the thinker
        samples = handover_samples(model, config, seed)
        check_handover_reaches_output(model, samples[0], seed, MIN_INFLUENCE)
        return samples
    if needs_target_states(model):
        # a draft model: the target's states after its prefill of each text sample's tokens
        text = config.get_text_config()
        samples = [assistant_sample(config, coverage_text_sample(text, batch_size=batch, seq_len=length,
                                                                 left_padding=padding, seed=seed + index), seed)
                   for index, (batch, length, padding) in enumerate(((2, 7, 1), (3, 11, 2)))]
        check_states_reach_output(model, samples[0], seed, MIN_INFLUENCE)
        return samples
    return [with_encoder_embeds(model, coverage_text_sample(config, batch_size=2, seq_len=7, left_padding=1,
                                                             seed=seed), seed),
            with_encoder_embeds(model, coverage_text_sample(config, batch_size=3, seq_len=11, left_padding=2,
                                                             seed=seed + 1), seed + 1)]


def check_influence(attempt: Attempt, modality: Modality, model, sample: dict, output, extra: dict,
                    seed: int) -> tuple[dict, Any] | None:
    """Eager's output must change when only the modality's input changes: else that input never
    reaches it (a broken sample, or a tower that drops it), and the attempt stops at ``influence``
    (None). ``output``: eager's output on ``sample``. Returns the varied sample and eager's output
    on it."""
    config = getattr(model, "config", None)
    varied = modality.vary(sample, seed, config)
    with torch.no_grad():
        reference = model(**fresh(varied), **extra)
    key, first = _output(output)
    _, second = _output(reference, key)
    attempt.influence = tensor_diff(first, second)
    if attempt.influence > MIN_INFLUENCE:
        return varied, reference
    attempt.stage = "influence"
    attempt.blocker_kind = f"no {modality.noun} influence"
    attempt.blocker_location = modality.sample_location(config)
    attempt.error = (f"eager {key!r} changed by {attempt.influence:.1e} (<= {MIN_INFLUENCE}) when only "
                     f"{modality.varied} changed: the {modality.noun} never reaches them ({modality.hint})")
    return None


def _mark_text_alone(text: Attempt, given: list[tuple[Modality, Attempt]]) -> None:
    """A text attempt that failed in eager (or whose text sample the config cannot give: PI0 has no
    vocabulary of its own) while a modality's attempt ran: the model needs that input (decided by
    evidence, not by a list). Its error stays: what the forward said without it."""
    if text.ran or text.stage not in ("sample", "eager"):
        return
    for modality, attempt in given:
        if attempt.ran:
            text.stage = modality.text_alone
            return


def fresh(sample: dict) -> dict:
    """A copy of ``sample`` whose tensors (also inside dicts, tuples and lists) are clones: every
    run gets its own, as every call of a generate loop does. The Qwen2.5-Omni talker adds its codec
    embeddings into ``inputs_embeds`` in place: runs sharing one tensor would each start from
    what the last one left."""
    def copy(value):
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, dict):
            return {key: copy(item) for key, item in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(copy(item) for item in value)
        return value

    return {key: copy(value) for key, value in sample.items()}


def _count_calls(model, targets, sample) -> int:
    from .discover import count_target_calls

    def run():
        with torch.no_grad():
            model(**sample)

    return count_target_calls(model, targets, run)


def _listed_layers(targets: list[str], layer_list: str | None) -> list[str] | None:
    """The decoder's layer list alone as targets (``re:<list>.<n>``), where the row's targets are
    class names; None where that changes nothing."""
    if layer_list is None or any(target.startswith("re:") for target in targets):
        return None
    return [f"re:{re.escape(layer_list)}\\.\\d+"]


def _attempt(attempt: Attempt, model, original, targets, samples, expected, calls, generated, original_file,
             within, layer_list: str | None = None) -> None:
    from ..partition import run_subgraphs, trace_subgraphs
    from ..trace import DEFAULT_IGNORE, DroppedInputError
    from ..trace.filled_caches import FilledCacheError

    attempt.expected = calls + 1
    try:
        try:
            subgraphs = trace_subgraphs(model, fresh(samples[0]), targets, DEFAULT_IGNORE)
        except DroppedInputError as exc:
            # No per-model list: an input counts as unused only if eager ignores it too.
            unused = [name for name in exc.inputs if not exc.calls and eager_ignores(model, samples[0], name) is True]
            if not unused or len(unused) < len(exc.inputs):
                raise
            attempt.unused_inputs = unused
            subgraphs = trace_subgraphs(model, fresh(samples[0]), targets, DEFAULT_IGNORE, unused_inputs=unused)
        except FilledCacheError:
            # The error's fix, followed: modules of the layer classes outside the decoder's list
            # (PI0's VLM) traced through, so that the cache they fill is in the graph.
            listed = _listed_layers(targets, layer_list)
            if listed is None:
                raise
            targets = attempt.targets = listed
            attempt.expected = _count_calls(original, listed, {**fresh(samples[0]), **eager_inputs(original, {})}) + 1
            subgraphs = trace_subgraphs(model, fresh(samples[0]), listed, DEFAULT_IGNORE)
    except Exception as exc:  # noqa: BLE001
        _record_failure(attempt, "trace", exc, generated, original_file)
        return
    attempt.traced = True
    attempt.subgraphs = len(subgraphs)
    key, _ = _output(expected[0])
    diffs, agreed = [], []
    # One path: the second sample proves that the chain traced on the first runs another input of
    # its kind; run_subgraphs on what trace_subgraphs returned would trace a sample of another kind
    # anew, and the reuse would prove nothing.
    path = list(subgraphs)
    for index, (sample, reference) in enumerate(zip(samples, expected)):
        stage = "run" if index == 0 else "reuse"
        try:
            with torch.no_grad():
                outputs = run_subgraphs(model, path, fresh(sample))
        except Exception as exc:  # noqa: BLE001
            _record_failure(attempt, stage, exc, generated, original_file)
            break
        _, got = _output(outputs, key)
        comparison = compare(got, _output(reference, key)[1], within)
        diffs.append(comparison.max_abs_diff)
        agreed.append(comparison.equal)
    if diffs:
        attempt.max_diff = diffs[0]
    if len(diffs) > 1:
        attempt.reuse_diff = diffs[1]
    attempt.equal = (len(diffs) == len(samples) and all(agreed)
                     and attempt.subgraphs == attempt.expected)
    if attempt.equal:
        _check_kernels(attempt, model, original, path, samples[-1])
    if not attempt.equal and attempt.stage is None:
        attempt.stage = "compare"
        attempt.error = (f"subgraphs {attempt.subgraphs}/{attempt.expected}, max diff {attempt.max_diff}, "
                         f"reuse diff {attempt.reuse_diff} (output {key!r})")


def _check_kernels(attempt: Attempt, model, original, subgraphs, sample) -> None:
    """Whether the chain of the patched ``model`` makes the eager ``original``'s kernel calls."""
    from ..verify.kernels import KernelLayoutMismatch, verify_kernel_layouts

    try:
        verify_kernel_layouts(model, subgraphs, sample, eager_model=original)
        attempt.same_kernels = True
    except KernelLayoutMismatch as exc:
        attempt.same_kernels = attempt.kernels_in_another_order = exc.reordered
        attempt.kernel_difference = _short(str(exc).split("\nthe outputs")[0].split("\nindependent work")[0], 1000)
    except Exception as exc:  # noqa: BLE001 - a run that fails under the recorder says nothing about layouts
        attempt.kernel_difference = _short(f"not checked: {type(exc).__name__}: {exc}")
