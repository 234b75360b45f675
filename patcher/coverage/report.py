"""Coverage tables (markdown, JSON), the summary line and the blocker ranking."""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

from .elsewhere import elsewhere_line, environment_name
from .check import NO_FORWARD, NO_TOWER, Attempt, CoverageRow
from ..samples.modalities import MODALITIES, TEXT_ALONE_NAMED, TEXT_ALONE_STAGES, Modality, built as _built


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def no_forward(row: CoverageRow) -> bool:
    """The class has no ``forward`` (``check.NO_FORWARD``): nothing to build, trace or fail."""
    return not row.built and row.stage == NO_FORWARD


def _forward_share(rows: list[CoverageRow]) -> str:
    """`` (4 without a forward, built B of the N with one)``; empty when every class has one."""
    without = sum(no_forward(row) for row in rows)
    if not without:
        return ""
    built = sum(row.built for row in rows)
    return f" ({without} without a forward, built {built} of the {len(rows) - without} with one)"


def summary(rows: list[CoverageRow]) -> str:
    total = len(rows)
    built = [row for row in rows if row.built]
    text_ran = [row for row in built if row.text and row.text.ran]
    text_traced = [row for row in text_ran if row.text.traced]
    text_equal = [row for row in text_ran if row.text.equal]
    b = len(built)
    return (f"{total} architectures: built {b} ({_pct(b, total)}){_forward_share(rows)}; "
            f"text: ran {len(text_ran)}" + _text_alone_share(built)
            + f", traced {len(text_traced)} ({_pct(len(text_traced), b)} of built), "
            f"equal {len(text_equal)} ({_pct(len(text_equal), b)} of built)"
            + "".join(modality_share(rows, modality) for modality in MODALITIES))


def _text_alone_share(built: list[CoverageRow]) -> str:
    """`` (8 need images)``: the built rows whose text attempt stopped at a stage the modalities name
    (``Modality.text_alone_summary``); empty when there is none."""
    counts = [(sum(bool(row.text and row.text.stage == stage) for row in built), words)
              for stage, words in TEXT_ALONE_NAMED.items()]
    shares = [f"{count} {words}" for count, words in counts if count]
    return f" ({', '.join(shares)})" if shares else ""


def _counts(rows: list[CoverageRow], modality: Modality) -> tuple[int, list[Attempt]]:
    """How many classes were given the modality, and their attempts whose sample is built (eager
    ran on it and changing only that input changed eager's output)."""
    attempts = modality.given_to(rows)
    return len(attempts), [attempt for attempt in attempts if _built(attempt)]


def modality_share(rows: list[CoverageRow], modality: Modality) -> str:
    """``; images: N with a sample builder, built B, traced T, equal E`` (then, for images, the
    vision blocks' share). Empty for a sweep that gave no class the modality."""
    given, built = _counts(rows, modality)
    if not given:
        return ""
    share = (f"; {modality.label}: {given} {modality.given}, built {len(built)}, "
             f"traced {sum(a.traced for a in built)}, equal {sum(a.equal for a in built)}")
    if modality.vision_blocks:
        share += vision_blocks_share([row for row in rows
                                      if getattr(row, modality.attempt, None) is not None
                                      and _built(getattr(row, modality.attempt))])
    return share


def modality_lines(rows: list[CoverageRow]) -> list[str]:
    """One line per modality fed by the sweep: ``images: built X, traced Y, equal Z (of N that take
    them)``. Built counts only samples whose input provably reaches eager's logits."""
    lines = []
    for modality in MODALITIES:
        given, built = _counts(rows, modality)
        if not given:
            continue
        lines.append(f"- {modality.label}: built {len(built)}, traced {sum(a.traced for a in built)}, "
                     f"equal {sum(a.equal for a in built)} (of {given} classes given {modality.label}; built = "
                     f"eager ran and its logits changed when only {modality.varied} changed)")
    return lines


def equal_on_every_input(row: CoverageRow) -> bool:
    """Built, nothing stopped any of its attempts (text, each modality's), and at least one of
    them is equal to eager. A modality whose sample could not be built or does not reach the logits
    stops the row: an input the sweep could not feed is no answer for that input."""
    attempts = [row.text, *(getattr(row, modality.attempt, None) for modality in MODALITIES)]
    return row.built and blocker(row) is None and any(a is not None and a.equal for a in attempts)


def overall_line(rows: list[CoverageRow]) -> str:
    """``equal on every input: X of N (P%)``: the share of all architectures, not of the built ones."""
    equal = sum(equal_on_every_input(row) for row in rows)
    labels = ", ".join(modality.label for modality in MODALITIES)
    *nouns, last = [modality.noun for modality in MODALITIES]
    without = sum(no_forward(row) for row in rows)
    return (f"Equal on every input: {equal} of {len(rows)} ({_pct(equal, len(rows))})"
            + (f" ({equal} of the {len(rows) - without} with a forward)" if without else "")
            + " are built, and every "
            f"attempt the sweep made on them (text, {labels}) is equal to eager; a "
            f"row whose {', '.join(nouns)} or {last} sample could not be built, or did not reach the logits, counts "
            "as not equal.")


def _equal_attempts(row: CoverageRow) -> list[tuple[str, Attempt]]:
    attempts = [("text", row.text), *((modality.label, getattr(row, modality.attempt, None)) for modality in MODALITIES),
                ("vision blocks", getattr(row, "vision_blocks", None))]
    return [(label, attempt) for label, attempt in attempts if attempt is not None and attempt.equal]


def kernels_line(rows: list[CoverageRow]) -> str:
    """``Same kernels as eager: X of N equal attempts``, naming the others with their first
    difference: an attempt that is equal here and makes eager's kernel calls on eager's layouts
    (``patcher.verify.kernels``) is equal on any CPU; the others were equal on this one."""
    equal = [(row.architecture, label, attempt) for row in rows for label, attempt in _equal_attempts(row)]
    checked = [item for item in equal if item[2].same_kernels is not None]
    if not checked:
        return ""
    same = sum(attempt.same_kernels for _, _, attempt in checked)
    reordered = [f"{name} ({label})" for name, label, attempt in checked if attempt.kernels_in_another_order]
    others = [f"{name} ({label}): {attempt.kernel_difference or 'not checked'}"
              for name, label, attempt in equal if not attempt.same_kernels]
    return (f"Same kernels as eager: {same} of {len(equal)} equal attempts make eager's computing kernel calls on "
            "eager's memory layouts (patcher.verify.kernels), so they are equal on other CPUs too"
            + (f" ({len(reordered)} of them in another order, independent work that rounds nothing differently: "
               "rule TZ108 iterates a set in first-occurrence order, eager in this process's hash order: "
               + ", ".join(reordered) + ")" if reordered else "")
            + ("; not: " + "; ".join(others) if others else "") + ".")


def vision_blocks_share(mm_built: list[CoverageRow]) -> str:
    """``; vision blocks: X of Y exact (N without a tower)``: of the VLMs whose image sample works
    and that have a vision tower of blocks (Y), those whose chain of vision blocks + text layers
    equals eager (X); models without such a tower are counted apart. Empty for a sweep without the
    attempt."""
    attempted = [row for row in mm_built if getattr(row, "vision_blocks", None) is not None]
    tried = [row for row in attempted if row.vision_blocks.stage != NO_TOWER]
    exact = [row for row in tried if row.vision_blocks.equal]
    without = len(attempted) - len(tried)
    return (f"; vision blocks: {len(exact)} of {len(tried)} exact" + (f" ({without} without a tower)" if without else "")
            if attempted else "")


def _vision_cell(row: CoverageRow) -> str:
    attempt = getattr(row, "vision_blocks", None)
    if attempt is None:
        return "-"
    if attempt.equal:
        return f"equal ({attempt.subgraphs})"
    if not attempt.ran:
        return attempt.stage or "-"
    return _failed_attempt_cell(attempt)


def _attempt_cell(attempt: Attempt | None) -> str:
    """A modality's attempt: ``equal (influence X)``, or where it stopped; ``-`` without the attempt."""
    if attempt is None:
        return "-"
    cell = "equal" if attempt.equal else _failed_attempt_cell(attempt) if attempt.traced else f"{attempt.stage}"
    notes = [f"influence {_diff(attempt.influence)}"] if attempt.influence is not None else []
    notes += [f"targets {' '.join(attempt.targets)}"] if getattr(attempt, "targets", None) else []
    return cell + (f" ({'; '.join(notes)})" if notes else "")


def _failed_attempt_cell(attempt: Attempt) -> str:
    """A traced and compared attempt shows its diffs; one that stopped earlier (in the trace, or in
    running the chain after a trace that succeeded) shows where and why."""
    if attempt.traced and attempt.max_diff is not None:
        return f"traced {attempt.subgraphs}/{attempt.expected} {_diff(attempt.max_diff)}/{_diff(attempt.reuse_diff)}"
    where = f" @ {attempt.blocker_location}" if attempt.blocker_location else ""
    kind = f": {attempt.blocker_kind[:40]}" if attempt.blocker_kind else ""
    return f"{attempt.stage or '-'}{kind}{where}"


def mapping_classes() -> set[str]:
    """The classes of transformers' image-text-to-text auto mapping."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values():
        names.update(value if isinstance(value, (list, tuple)) else [value])
    return names


def image_text_to_text(rows: list[CoverageRow], mapping: set[str] | None = None) -> dict:
    """The images metric over the image-text-to-text mapping (not over "has a sample builder"): of
    the mapping's classes in ``rows`` that build, those with an image path must be equal with images.
    Classes that take no images at all (no pixel input, no vision config) are named, not counted."""
    mapping = mapping_classes() if mapping is None else set(mapping)
    swept = [row for row in rows if row.architecture in mapping]
    built = [row for row in swept if row.built]
    # image_path None (an older report): counted as having one, so no failure is hidden
    with_path = [row for row in built if row.image_path is not False]
    equal = [row for row in with_path if any(attempt is not None and attempt.equal
                                             for attempt in (getattr(row, modality.attempt, None)
                                                             for modality in MODALITIES if modality.carries_images))]
    return {"in_mapping": len(mapping), "swept": len(swept), "built": len(built),
            "without_image_path": sorted(row.architecture for row in built if row.image_path is False),
            "with_image_path": len(with_path), "equal_with_images": len(equal),
            "not_equal_with_images": sorted(row.architecture for row in with_path if row not in equal),
            "not_equal_reasons": {row.architecture: not_equal_with_images_reason(row)
                                  for row in sorted(with_path, key=lambda row: row.architecture) if row not in equal}}


def not_equal_with_images_reason(row: CoverageRow) -> str:
    """Why a class of the mapping that takes images is not equal with them: never given images (no
    sample builder for its model type), or where its image attempt stopped."""
    attempt = row.multimodal
    why = _why_not_given(row, "multimodal") if attempt is None else None
    if why is not None:
        others = [f"{modality.label}: {_attempt_cell(other)}" for modality in MODALITIES
                  if modality.attempt != "multimodal" and (other := getattr(row, modality.attempt, None)) is not None]
        return f"never run with images: {why}" + "".join(f"; {other}" for other in others)
    if attempt is None:
        return (f"never run with images: no image sample builder for model type {row.model_type!r} "
                "(patcher.samples.images layouts, the zoo's builders)")
    if attempt.traced:
        return _failed_attempt_cell(attempt)
    error = f": {attempt.error[:160]}" if attempt.error else ""
    where = f" @ {attempt.blocker_location}" if attempt.blocker_location else ""
    return f"{attempt.stage or 'not run'}{error}{where}"


def _why_not_given(row: CoverageRow, mode: str) -> str | None:
    """Why the row's class is given no sample of the modality whose attempt is ``mode``, where its
    declaration can tell from the class (transformers' class of that name); None otherwise."""
    import transformers

    modality = next((modality for modality in MODALITIES if modality.attempt == mode), None)
    cls = getattr(transformers, row.architecture, None)
    if modality is None or modality.why_not_given is None or not isinstance(cls, type):
        return None
    return modality.why_not_given(cls)


def not_equal_with_images_lines(rows: list[CoverageRow], mapping: set[str] | None = None) -> list[str]:
    """One line per class of the image-text-to-text line that takes images and is not equal with them."""
    reasons = image_text_to_text(rows, mapping)["not_equal_reasons"]
    if not reasons:
        return []
    return ["Not equal with images:", "", *(f"- {name}: {reason}" for name, reason in reasons.items()), ""]


def image_text_to_text_line(rows: list[CoverageRow], mapping: set[str] | None = None) -> str:
    metric = image_text_to_text(rows, mapping)
    without = metric["without_image_path"]
    swept = (f"{metric['swept']} in the mapping" if metric["swept"] == metric["in_mapping"]
             else f"{metric['swept']} of the {metric['in_mapping']} in the mapping swept")
    return (f"image-text-to-text: {swept}, {metric['built']} build, {len(without)} without an image path"
            + (f" ({', '.join(without)})" if without else "")
            + f", {metric['equal_with_images']} equal with images of {metric['with_image_path']} "
            f"({_pct(metric['equal_with_images'], metric['with_image_path'])})")


def _diff(value: float | None) -> str:
    if value is None:
        return ""
    if math.isinf(value):
        return "inf"
    return "0" if value == 0 else f"{value:.1e}"


def _yes(value: bool | None) -> str:
    return "yes" if value else "no"


def blocker(row: CoverageRow) -> tuple[str, str, str, str] | None:
    """``(kind, location, code, message)`` of what stopped the row first; None if all equal."""
    if no_forward(row):
        return None
    if not row.built:
        attempt = row.text
        if attempt is not None and attempt.stage == "eager":
            return (f"eager: {attempt.blocker_kind}", attempt.blocker_location or "", attempt.blocker_code or "",
                    attempt.error or "")
        return (f"{row.stage}", row.error_location or "", "", row.error or "")
    if row.stage in ("patch", "weights"):
        return (row.stage, row.error_location or "", "", row.error or "")
    for attempt in (row.text, *(getattr(row, modality.attempt, None) for modality in MODALITIES)):
        # an attempt that stopped before eager ran (its sample failed) is a blocker like any other;
        # the text attempt of a class that needs another input (images, a clip) is none: that
        # modality's attempt says how the row went
        if attempt is not None and attempt is row.text and attempt.stage in TEXT_ALONE_STAGES:
            continue
        if attempt is not None and not attempt.equal and (attempt.ran or attempt.stage is not None):
            kind = attempt.blocker_kind or attempt.stage or "?"
            if attempt.stage == "compare":
                kind = "not equal" if attempt.subgraphs == attempt.expected else "wrong subgraph count"
            return (f"{attempt.stage}: {kind}", attempt.blocker_location or "", attempt.blocker_code or "",
                    attempt.error or "")
    return None


_KINDS = ("control flow", "iteration", "starred", "assert", "data-dependent", "Python object", "shape, ndim",
          "model's own code", "not equal", "wrong subgraph count")


def _group_key(kind: str, message: str) -> str:
    if any(word in kind for word in _KINDS):
        return kind
    if ":" in message:
        message = message.split(":", 1)[1]
    text = re.sub(r"\d+", "N", message)
    return f"{kind} | {' '.join(text.split())[:70]}"


def top_blockers(rows: list[CoverageRow], count: int = 10, built: bool | None = None) -> list[tuple[str, int, list[str]]]:
    """The most common blockers: ``(kind | message, count, examples)``. ``built=True``: only what
    stops architectures that build (tracer and patcher problems); ``False``: only build failures."""
    groups: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if built is not None and row.built != built:
            continue
        found = blocker(row)
        if found is None:
            continue
        kind, location, _, message = found
        groups[_group_key(kind, message)].append(f"{row.architecture} @ {location}")
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))[:count]
    return [(key, len(examples), examples[:4]) for key, examples in ranked]


def _cell_text(found: tuple[str, str, str, str]) -> str:
    """The source line for untraceable constructs, the error message for everything else."""
    kind, _, code, message = found
    if any(word in kind for word in _KINDS) and code:
        return f"`{code}`"
    return message.split(": ", 1)[1] if ": " in message else message


def _modality_columns() -> list[str]:
    columns = []
    for modality in MODALITIES:
        columns += [modality.attempt, "vision blocks"] if modality.vision_blocks else [modality.attempt]
    return columns


def _modality_cells(row: CoverageRow) -> list[str]:
    cells = []
    for modality in MODALITIES:
        cells.append(_attempt_cell(getattr(row, modality.attempt, None)))
        if modality.vision_blocks:
            cells.append(_vision_cell(row))
    return cells


def markdown(rows: list[CoverageRow], elapsed: float | None = None) -> str:
    header = ["architecture", "built", "traced", "subgraphs", "max diff", "reuse diff", "equal",
              *_modality_columns(), "blocker", "where", "rewrites"]
    lines = ["# tracezoo coverage", "", summary(rows), "", overall_line(rows), ""]
    if elsewhere_line(rows):
        lines += [elsewhere_line(rows), ""]
    if kernels_line(rows):
        lines += [kernels_line(rows), ""]
    per_modality = modality_lines(rows)
    if per_modality:
        lines += ["Per modality:", "", *per_modality, ""]
    lines += [image_text_to_text_line(rows), ""]
    lines += not_equal_with_images_lines(rows)
    if elapsed is not None:
        lines += [f"Sweep time: {elapsed:.0f} s", ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        text = row.text or Attempt("text")
        found = blocker(row)
        needs_other = text.stage if text.stage in TEXT_ALONE_NAMED else None
        cells = [
            row.architecture, NO_FORWARD if no_forward(row) else _yes(row.built) + (f" ({row.built_in})" if row.built_in else ""),
            needs_other if needs_other else _yes(text.traced) if row.built else "",
            f"{text.subgraphs}/{text.expected}" if text.traced else "",
            _diff(text.max_diff), _diff(text.reuse_diff), _yes(text.equal) if row.built and not needs_other else "",
            *_modality_cells(row),
            (f"{found[0]}: {_cell_text(found)[:100]}" if found else ""), found[1] if found else "",
            " ".join(f"{rule}x{count}" for rule, count in row.rewrites.items()),
        ]
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |")
    lines += ["", "## Most common blockers of architectures that build (tracer, patcher)", ""]
    for key, number, examples in top_blockers(rows, built=True):
        lines.append(f"- **{key}** ({number}): " + "; ".join(examples))
    lines += ["", "## Most common build failures (config shrinking, inputs the text sample lacks)", ""]
    for key, number, examples in top_blockers(rows, built=False):
        lines.append(f"- **{key}** ({number}): " + "; ".join(examples))
    return "\n".join(lines) + "\n"


def generated_header() -> str:
    """The report says it is generated, by what, when and with which versions (a snapshot: nothing
    checks it for freshness, a new sweep replaces it)."""
    import datetime
    import sys

    import torch
    import transformers

    command = " ".join(["scripts/coverage.py", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("coverage.py") \
        else "patcher.coverage.write_reports"
    device = "CUDA" if torch.cuda.is_available() else "CPU"
    return (f"<!-- Generated by `{command}` on {datetime.date.today().isoformat()} with transformers "
            f"{transformers.__version__}, torch {torch.__version__} ({device}); a snapshot, not checked for "
            "freshness. -->\n")


def write_reports(rows: list[CoverageRow], out: str | Path, elapsed: float | None = None,
                  meta: dict | None = None) -> tuple[Path, Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out / "coverage.md", out / "coverage.json"
    md_path.write_text(generated_header() + markdown(rows, elapsed), encoding="utf-8")
    payload = {"environment": environment_name(), "summary": summary(rows), "elsewhere": elsewhere_line(rows), "overall": overall_line(rows), "kernels": kernels_line(rows), "image_text_to_text": {"line": image_text_to_text_line(rows),
                                                                 **image_text_to_text(rows)},
               "elapsed_s": elapsed, **(meta or {}),
               "top_blockers": [{"blocker": key, "count": number, "examples": examples}
                                for key, number, examples in top_blockers(rows, built=True)],
               "top_build_failures": [{"blocker": key, "count": number, "examples": examples}
                                      for key, number, examples in top_blockers(rows, built=False)],
               "rows": [row.as_dict() for row in rows]}
    json_path.write_text(json.dumps(payload, indent=1, default=str), encoding="utf-8")
    return md_path, json_path
