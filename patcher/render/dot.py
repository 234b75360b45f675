"""DOT text for a partition: the full node-level picture, or one box per subgraph.

Pure Python; graphviz is only needed to turn the text into SVG/PNG (see ``render_partition``).
"""

from __future__ import annotations

import html
from typing import Sequence

from torch import nn

from ..partition import Subgraph
from ..trace.graph_runtime import TracedGraph
from .partition import ATTR, MODULE, OP, OPAQUE, TARGET, PartitionView, attr_label, build_view

from .limits import AUTO_COLLAPSE_NODES, AUTO_COLLAPSE_SUBGRAPHS

# Colours: fill, border.
COLORS = {
    TARGET: ("#ffd27f", "#c77c00"),
    MODULE: ("#cfe3ff", "#3f6fb5"),
    OPAQUE: ("#e4d3f5", "#7d4fb0"),
    OP: ("#ffffff", "#9a9a9a"),
    ATTR: ("#f2f2f2", "#b0b0b0"),
}
CROSS_COLOR = "#c0392b"  # values handed from one subgraph to another
IO_FILL, IO_BORDER = "#d8f0d8", "#3c8c3c"
CLUSTER_FILLS = ("#f7f7f7", "#eef3f8")
FONT = "DejaVu Sans,Helvetica,Arial,sans-serif"

LEGEND_TEXT = {
    TARGET: "sequential target (one per subgraph)",
    MODULE: "module not traced into (ignored or leaf)",
    OPAQUE: "opaque function (ignored / wrapped)",
    OP: "other op",
    ATTR: "parameter / config / module read",
}


def should_collapse(view_or_subgraphs, collapse: str | bool = "auto") -> bool:
    """``collapse``: ``"auto"`` (above ~8 subgraphs or ~300 nodes), ``"yes"``/True or ``"no"``/False."""
    if isinstance(collapse, bool):
        return collapse
    if collapse in ("yes", "always", "on"):
        return True
    if collapse in ("no", "never", "off"):
        return False
    if collapse != "auto":
        raise ValueError(f"collapse must be 'auto', 'yes' or 'no', got {collapse!r}")
    if isinstance(view_or_subgraphs, PartitionView):
        subgraph_count, node_count = len(view_or_subgraphs.subgraphs), view_or_subgraphs.node_count
    else:
        subgraph_count = len(view_or_subgraphs)
        node_count = sum(len(subgraph.graph.nodes) for subgraph in view_or_subgraphs)
    return subgraph_count > AUTO_COLLAPSE_SUBGRAPHS or node_count > AUTO_COLLAPSE_NODES


def to_dot(subgraphs: Sequence[Subgraph], traced: TracedGraph | None = None, *, collapse: str | bool = "auto",
           model: nn.Module | None = None, title: str | None = None) -> str:
    """DOT text of the partition of ``traced`` into ``subgraphs``.

    Full mode: every node, one cluster per subgraph (``cluster_<i>``, labelled ``subgraph i``), the
    values passed between subgraphs as red edges labelled with the value's name (the name in
    ``Subgraph.input_names``). Collapsed mode: one box per subgraph (``sg<i>``) listing its targets,
    modules and opaque functions; edges carry the names of the values handed on. ``model`` (optional)
    adds module class names and argument names (``hidden_states``, ``position_embeddings``).
    """
    view = build_view(subgraphs, traced, model)
    if should_collapse(view, collapse):
        return _collapsed(view, title)
    return _full(view, title)


# -- helpers -----------------------------------------------------------------------------------
def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _h(text: str) -> str:
    return html.escape(str(text), quote=True)


def _attrs(**attributes) -> str:
    parts = []
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, _Html):
            parts.append(f"{key}=<{value}>")
        else:
            parts.append(f"{key}={_q(value)}")
    return "[" + ", ".join(parts) + "]" if parts else ""


class _Html(str):
    """An HTML-like graphviz label (written as <...>)."""


def _node_id(name: str) -> str:
    return f"n_{name}"


def _input_id(name: str) -> str:
    return f"in_{name}"


def _header(title: str | None, lines: list[str]) -> list[str]:
    out = [
        "digraph partition {",
        f'  graph [rankdir=TB, fontname="{FONT}", nodesep=0.25, ranksep=0.35, newrank=true, '
        'labelloc=t, fontsize=18' + (f", label={_q(title)}" if title else "") + "];",
        f'  node [fontname="{FONT}", fontsize=11];',
        f'  edge [fontname="{FONT}", fontsize=9, color="#555555", arrowsize=0.6];',
    ]
    return out + lines


def _value_label(view: PartitionView, value: str, consumer: int) -> str:
    roles = [role for role in view.roles(value, consumer) if role != value]
    return value + (f"\n({', '.join(roles[:2])})" if roles else "")


def _legend(collapsed: bool) -> list[str]:
    rows = []
    categories = [TARGET, MODULE, OPAQUE] + ([] if collapsed else [OP, ATTR])
    for category in categories:
        fill, border = COLORS[category]
        rows.append(f'<tr><td bgcolor="{fill}" color="{border}" border="1" width="18"></td>'
                    f'<td align="left">{_h(LEGEND_TEXT[category])}</td></tr>')
    rows.append(f'<tr><td bgcolor="{IO_FILL}" color="{IO_BORDER}" border="1"></td>'
                '<td align="left">model input / output</td></tr>')
    rows.append(f'<tr><td><font color="{CROSS_COLOR}"><b>&#8594;</b></font></td>'
                f'<td align="left"><font color="{CROSS_COLOR}">value handed to a later subgraph (labelled)</font>'
                '</td></tr>')
    if collapsed:
        rows.append('<tr><td><font color="#888888">&#8594;</font></td>'
                    '<td align="left"><font color="#888888">shared values: one note, read by the subgraphs it names</font></td></tr>')
    label = _Html('<table border="0" cellborder="0" cellspacing="3" cellpadding="2">'
                  '<tr><td colspan="2"><b>legend</b></td></tr>' + "".join(rows) + "</table>")
    return [f"  legend {_attrs(shape='box', style='rounded', color='#bbbbbb', fontsize=10, label=label)};"]


# -- full mode ---------------------------------------------------------------------------------
def _node_line(info) -> str:
    fill, border = COLORS[info.category]
    if info.category == TARGET:
        label = _Html(f"<b>{_h(info.label)}</b>" + (f'<br/><font point-size="9">{_h(info.detail)}</font>'
                                                       if info.detail else ""))
        return f"    {_q(_node_id(info.name))} " + _attrs(shape="box", style="filled,rounded,bold", fillcolor=fill,
                                                          color=border, penwidth=2, label=label, fontsize=13)
    if info.category == MODULE:
        label = _Html(_h(info.label) + (f'<br/><font point-size="8">{_h(info.detail)}</font>' if info.detail else ""))
        return f"    {_q(_node_id(info.name))} " + _attrs(shape="box", style="filled", fillcolor=fill, color=border,
                                                          label=label, margin="0.12,0.06")
    if info.category == OPAQUE:
        return f"    {_q(_node_id(info.name))} " + _attrs(shape="component", style="filled", fillcolor=fill,
                                                          color=border, label=info.label)
    return f"    {_q(_node_id(info.name))} " + _attrs(shape="box", style="rounded", color=border, label=info.label,
                                                      fontsize=8, height=0.2, margin="0.05,0.02")


def _full(view: PartitionView, title: str | None) -> str:
    lines: list[str] = []
    # model inputs at the top
    for name in view.model_inputs:
        lines.append(f"  {_q(_input_id(name))} " + _attrs(shape="ellipse", style="filled", fillcolor=IO_FILL,
                                                         color=IO_BORDER, label=name))
    if view.model_inputs:
        lines.append("  {rank=source; " + " ".join(_q(_input_id(n)) for n in view.model_inputs) + "}")

    edges: list[str] = []
    for subgraph in view.subgraphs:
        index = subgraph.index
        members = view.nodes_of(index)
        heading = f"subgraph {index}"
        if subgraph.targets:
            heading += ": " + ", ".join(subgraph.targets[:3]) + (" …" if len(subgraph.targets) > 3 else "")
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f"    graph {_attrs(label=heading, style='rounded,filled', fillcolor=CLUSTER_FILLS[index % 2], color='#888888', fontsize=14, labeljust='l')};")
        attrs_here: dict[str, str] = {}
        if not members:  # graphviz drops empty clusters; keep the box visible
            lines.append(f"    {_q(f'empty_{index}')} " + _attrs(shape="plaintext", label="(no nodes)", fontsize=9))
        for info in members:
            lines.append(_node_line(info))
            for target in info.attrs:
                attr_id = attrs_here.setdefault(target, f"a{index}_{len(attrs_here)}")
                edges.append(f"  {_q(attr_id)} -> {_q(_node_id(info.name))} [color=\"#bbbbbb\", arrowsize=0.4];")
        for target, attr_id in attrs_here.items():
            fill, border = COLORS[ATTR]
            lines.append(f"    {_q(attr_id)} " + _attrs(shape="note", style="filled", fillcolor=fill, color=border,
                                                       fontsize=8, fontcolor="#666666", height=0.2,
                                                       label=attr_label(target)))
        lines.append("  }")

        labelled: set[str] = set()
        for info in members:
            for value, _ in info.inputs:
                source = view.producer.get(value)
                if source == index:
                    edges.append(f"  {_q(_node_id(value))} -> {_q(_node_id(info.name))};")
                    continue
                source_id = _node_id(value) if source is not None else _input_id(value)
                label = None
                if value not in labelled:
                    labelled.add(value)
                    label = _value_label(view, value, index)
                edges.append(f"  {_q(source_id)} -> {_q(_node_id(info.name))} "
                             + _attrs(color=CROSS_COLOR, fontcolor=CROSS_COLOR, penwidth=1.6, label=label,
                                      **{"class": "crossing"}) + ";")

    # model outputs at the bottom
    if view.model_outputs:
        for key, values in view.model_outputs:
            out_id = f"out_{key}"
            lines.append(f"  {_q(out_id)} " + _attrs(shape="ellipse", style="filled", fillcolor=IO_FILL,
                                                    color=IO_BORDER, label=key))
            for value in values:
                source_id = _node_id(value) if value in view.producer else _input_id(value)
                edges.append(f"  {_q(source_id)} -> {_q(out_id)} " + _attrs(color=IO_BORDER) + ";")
        lines.append("  {rank=sink; " + " ".join(_q(f"out_{k}") for k, _ in view.model_outputs) + "}")
    lines += _legend(collapsed=False)
    return "\n".join(_header(title, lines + edges) + ["}", ""])


# -- collapsed mode ----------------------------------------------------------------------------
MAX_LISTED = 6
SHARED_MIN_READERS = 3


def _listing(items: list[str], limit: int = MAX_LISTED) -> list[str]:
    if len(items) <= limit:
        return items
    return items[: limit - 1] + [f"… and {len(items) - limit + 1} more"]


def _box_label(view: PartitionView, subgraph: Subgraph, shared_in: int = 0) -> _Html:
    members = view.nodes_of(subgraph.index)
    note = f"{len(members)} node" + ("s" if len(members) != 1 else "")
    if shared_in:
        note += f", + {shared_in} shared value" + ("s" if shared_in != 1 else "")
    rows = [f'<tr><td align="left"><b>subgraph {subgraph.index}</b>'
            f'<font point-size="9" color="#666666">   {_h(note)}</font></td></tr>']
    fill, _ = COLORS[TARGET]
    targets = [info for info in members if info.category == TARGET]
    shown = [f"{info.label}" + (f" ({info.detail})" if info.detail else "") for info in targets]
    for text in _listing(shown, 4):
        rows.append(f'<tr><td align="left" bgcolor="{fill}"><b>{_h(text)}</b></td></tr>')
    modules = [info.label for info in members if info.category == MODULE]
    fill, _ = COLORS[MODULE]
    for text in _listing(modules):
        rows.append(f'<tr><td align="left" bgcolor="{fill}"><font point-size="10">{_h(text)}</font></td></tr>')
    opaque = []
    for info in members:
        if info.category == OPAQUE and info.label not in opaque:
            opaque.append(info.label)
    fill, _ = COLORS[OPAQUE]
    for text in _listing(opaque):
        rows.append(f'<tr><td align="left" bgcolor="{fill}"><font point-size="10">{_h(text)}</font></td></tr>')
    ops = sum(1 for info in members if info.category == OP)
    if ops:
        rows.append(f'<tr><td align="left"><font point-size="9" color="#666666">+ {ops} other op{"s" if ops != 1 else ""}</font></td></tr>')
    return _Html('<table border="0" cellborder="0" cellspacing="1" cellpadding="2">' + "".join(rows) + "</table>")


def _values_label(view: PartitionView, values: list[str], consumer: int | None, limit: int = 4) -> str:
    def one(value: str) -> str:
        if consumer is None:
            return value
        roles = [role for role in view.roles(value, consumer) if role != value]
        return value + (f" ({roles[0]})" if roles else "")

    if len(values) <= limit:
        return "\n".join(one(value) for value in values)
    return f"{len(values)} values:\n" + "\n".join(one(value) for value in values[: limit - 1]) + "\n…"


def _collapsed(view: PartitionView, title: str | None) -> str:
    lines: list[str] = []
    edges: list[str] = []
    source_of = lambda value: view.producer.get(value, -1)  # noqa: E731  (-1: model inputs)

    if view.model_inputs:
        label = "model inputs\n" + "\n".join(view.model_inputs)
        lines.append("  inputs " + _attrs(shape="box", style="filled,rounded", fillcolor=IO_FILL, color=IO_BORDER,
                                          label=label))

    # (producer, consumer) -> values; producer -1 = model inputs
    flows: dict[tuple[int, int], list[str]] = {}
    for subgraph in view.subgraphs:
        for value in subgraph.input_names:
            flows.setdefault((source_of(value), subgraph.index), []).append(value)

    # Values read by many non-adjacent subgraphs (masks, rotary embeddings) go through one
    # "shared" note instead of an edge per reader, each labelled the same.
    shared: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for (source, consumer), values in flows.items():
        if consumer > source + 1:
            shared.setdefault((source, tuple(values)), []).append(consumer)
    shared = {key: readers for key, readers in shared.items() if len(readers) >= SHARED_MIN_READERS}
    in_shared = {(source, consumer) for (source, _), readers in shared.items() for consumer in readers}
    shared_count = {consumer: len(values) for (source, values), readers in shared.items() for consumer in readers}

    for subgraph in view.subgraphs:
        has_target = bool(subgraph.targets)
        border = COLORS[TARGET][1] if has_target else "#888888"
        label = _box_label(view, subgraph, shared_count.get(subgraph.index, 0))
        lines.append(f"  sg{subgraph.index} " + _attrs(shape="box", style="rounded", color=border,
                                                      penwidth=1.5 if has_target else 1, label=label))

    def node_of(source: int) -> str:
        return "inputs" if source < 0 else f"sg{source}"

    for (source, consumer), values in flows.items():
        if (source, consumer) in in_shared:
            continue
        style = dict(color=IO_BORDER, fontcolor=IO_BORDER) if source < 0 else dict(color=CROSS_COLOR,
                                                                                   fontcolor=CROSS_COLOR)
        label = _values_label(view, values, consumer, limit=6 if source < 0 else 4)
        if consumer > source + 1:  # a long edge: its label sits far from both ends
            label += f"\n→ subgraph {consumer}"
        edges.append(f"  {node_of(source)} -> sg{consumer} " + _attrs(label=label, penwidth=1.4, **style) + ";")
    for number, ((source, values), readers) in enumerate(shared.items()):
        note = f"shared{number}"
        ranges = _ranges(readers)
        origin = "model inputs" if source < 0 else f"subgraph {source}"
        label = (f"shared values from {origin}:\n" + _values_label(view, list(values), readers[0], limit=6)
                 + f"\nread by subgraphs {ranges}")
        lines.append(f"  {note} " + _attrs(shape="note", style="filled", fillcolor="#fff4f0", color=CROSS_COLOR,
                                          fontcolor=CROSS_COLOR, fontsize=10, label=label))
        edges.append(f"  {node_of(source)} -> {note} " + _attrs(color=CROSS_COLOR, penwidth=1.4) + ";")
        lines.append(f"  {{rank=same; {note}; sg{readers[0]}}}")
        # One dashed edge to the first reader; the others say "+ N shared values" in their box.
        edges.append(f"  {note} -> sg{readers[0]} " + _attrs(color="#999999", style="dashed", arrowsize=0.5,
                                                               constraint="false") + ";")

    if view.model_outputs:
        label = "model outputs\n" + "\n".join(key for key, _ in view.model_outputs)
        lines.append("  outputs " + _attrs(shape="box", style="filled,rounded", fillcolor=IO_FILL, color=IO_BORDER,
                                           label=label))
        sources: dict[int, list[str]] = {}
        for key, values in view.model_outputs:
            for value in values:
                sources.setdefault(source_of(value), []).append(key)
        for source, keys in sources.items():
            edges.append(f"  {node_of(source)} -> outputs " + _attrs(color=IO_BORDER, fontcolor=IO_BORDER,
                                                                    label=_values_label(view, keys, None)) + ";")
    lines += _legend(collapsed=True)
    return "\n".join(_header(title, lines + edges) + ["}", ""])


def _ranges(numbers: list[int]) -> str:
    numbers = sorted(numbers)
    parts, start, previous = [], numbers[0], numbers[0]
    for number in numbers[1:] + [None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}–{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(parts)
