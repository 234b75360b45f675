"""patcher.render: DOT text of a partition, pictures through graphviz, and `patcher graph`."""

from __future__ import annotations

import argparse
import re
import shutil

import pytest
import torch

import patcher
from patcher.models.attempt import default_targets
from patcher.render import GraphvizNotFoundError, render_partition, should_collapse, to_dot
from patcher.render.cli import add_graph_parser
from tiny_models import tiny_model

HAS_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="graphviz `dot` is not installed (apt-get install graphviz)")

EDGE = re.compile(r'^\s*"?([\w.]+)"?\s*->\s*"?([\w.]+)"?\s*(\[.*\])?;?\s*$')
NODE = re.compile(r'^\s*"?([\w.]+)"?\s*\[')
LABEL = re.compile(r'label="((?:[^"\\]|\\.)*)"')


def parse_dot(text: str):
    """clusters {index: set of node ids}, nodes {id: attribute text}, edges [(src, dst, label or None)]."""
    clusters: dict[int, set[str]] = {}
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, str | None]] = []
    current = None
    for line in text.splitlines():
        opened = re.match(r"\s*subgraph cluster_(\d+) \{", line)
        if opened:
            current = int(opened.group(1))
            clusters[current] = set()
            continue
        if current is not None and line.strip() == "}":
            current = None
            continue
        edge = EDGE.match(line)
        if edge:
            label = LABEL.search(edge.group(3) or "")
            edges.append((edge.group(1), edge.group(2), label.group(1) if label else None))
            continue
        node = NODE.match(line)
        if node and node.group(1) not in ("graph", "node", "edge"):
            nodes[node.group(1)] = line
            if current is not None:
                clusters[current].add(node.group(1))
    return clusters, nodes, edges


@pytest.fixture(scope="module")
def tiny_llama():
    model = tiny_model("LlamaForCausalLM", num_hidden_layers=2)
    sample = {"input_ids": torch.randint(0, 96, (1, 5)), "attention_mask": torch.ones(1, 5, dtype=torch.long)}
    traced = patcher.trace_graph(model, sample, default_targets(model), patcher.DEFAULT_IGNORE)
    return model, traced, patcher.partition_graph(traced, model)


@pytest.fixture(scope="module")
def qwen2_vl_meta():
    import zoo
    from patcher.models import build_model, load_config
    from patcher.samples import sample_input
    from zoo._entries import recipe

    config = load_config("Qwen2-VL-2B-Instruct")
    model = build_model(zoo.TraceableQwen2VLForConditionalGeneration, config, "meta")
    sample = sample_input(config, multimodal=True, device="meta")
    spec = recipe("qwen2_vl")
    traced = patcher.trace_graph(model, sample, list(spec.default_targets),
                                 list(patcher.DEFAULT_IGNORE) + list(spec.default_ignore))
    return model, traced, patcher.partition_graph(traced, model)


def test_full_picture_has_a_cluster_per_subgraph_with_its_targets_inside(tiny_llama):
    model, traced, subgraphs = tiny_llama
    text = to_dot(subgraphs, traced, model=model, collapse="no")
    clusters, nodes, edges = parse_dot(text)
    assert sorted(clusters) == [subgraph.index for subgraph in subgraphs] == [0, 1, 2]
    for subgraph in subgraphs:
        assert f'label="subgraph {subgraph.index}' in text
        for target in subgraph.targets:
            (node,) = [n for n in subgraph.graph.nodes if n.op == "call_module" and n.target == target]
            assert f"n_{node.name}" in clusters[subgraph.index], (target, clusters)
            assert "LlamaDecoderLayer" in nodes[f"n_{node.name}"]  # class names come from the model
        # every computation node of the subgraph is drawn in its cluster, and nowhere else
        computed = {f"n_{n.name}" for n in subgraph.graph.nodes if n.op.startswith("call_")}
        assert computed <= clusters[subgraph.index]
    assert "create_causal_mask()" in text  # opaque functions are labelled with their name


def test_crossing_edges_are_labelled_with_the_subgraph_input_names(tiny_llama):
    model, traced, subgraphs = tiny_llama
    clusters, _, edges = parse_dot(to_dot(subgraphs, traced, model=model, collapse="no"))
    home = {node: index for index, members in clusters.items() for node in members}
    for subgraph in subgraphs:
        crossing = [(src, label) for src, dst, label in edges
                    if home.get(dst) == subgraph.index and home.get(src) != subgraph.index]
        labels = {label.split("\\n")[0] for _, label in crossing if label}
        assert labels == set(subgraph.input_names), subgraph.index
        for src, label in crossing:  # each comes from the value's producer (or the model input)
            if label:
                name = label.split("\\n")[0]
                assert src in (f"n_{name}", f"in_{name}")
    # placeholders (model inputs) sit outside every cluster, the output below
    assert {"in_input_ids", "in_attention_mask", "out_logits"}.isdisjoint(home)
    # argument names are given when the model is known
    assert any(label and "(hidden_states)" in label for *_, label in edges)
    assert any(label and "(position_embeddings)" in label for *_, label in edges)


def test_dot_without_traced_graph_or_model_is_the_same_partition(tiny_llama):
    _, _, subgraphs = tiny_llama
    clusters, nodes, _ = parse_dot(to_dot(subgraphs, collapse="no"))
    assert len(clusters) == 3 and {"in_input_ids", "in_attention_mask"} <= set(nodes)


def test_collapsed_qwen2_vl_has_one_box_per_subgraph(qwen2_vl_meta):
    model, traced, subgraphs = qwen2_vl_meta
    assert len(subgraphs) == 29 and should_collapse(subgraphs, "auto")
    text = to_dot(subgraphs, traced, model=model)  # auto: collapsed
    clusters, nodes, edges = parse_dot(text)
    boxes = sorted(int(node[2:]) for node in nodes if re.fullmatch(r"sg\d+", node))
    assert boxes == list(range(29)) and not clusters
    assert "model.language_model.layers.27 (Qwen2VLDecoderLayer)" in text
    labels = " ".join(label for *_, label in edges if label) + " ".join(nodes.values())
    for role in ("hidden_states", "position_embeddings", "attention_mask", "position_ids"):
        assert f"({role})" in labels
    # the mask, rotary embeddings and position ids go through one "shared" note, not 26 edges
    assert "read by subgraphs 2–27" in text
    assert len([edge for edge in edges if edge[1].startswith("sg")]) < 2 * len(subgraphs)
    assert "(no nodes)" not in text


def test_collapse_modes(tiny_llama, qwen2_vl_meta):
    _, _, small = tiny_llama
    _, _, large = qwen2_vl_meta
    assert not should_collapse(small, "auto") and should_collapse(small, "yes") and should_collapse(small, True)
    assert should_collapse(large, "auto") and not should_collapse(large, "no")
    assert len(parse_dot(to_dot(large, collapse="no"))[0]) == 29  # full mode draws every cluster
    with pytest.raises(ValueError, match="collapse"):
        should_collapse(small, "sometimes")


def test_dot_file_needs_no_graphviz_and_svg_says_how_to_install_it(tiny_llama, tmp_path, monkeypatch):
    model, traced, subgraphs = tiny_llama
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("TRACEZOO_DOT", raising=False)
    path = render_partition(subgraphs, traced, tmp_path / "p.dot", model=model)
    assert path.read_text().startswith("digraph partition {")
    assert render_partition(subgraphs, tmp_path / "q.dot").is_file()  # path as the second argument
    with pytest.raises(GraphvizNotFoundError, match="apt-get install -y graphviz"):
        render_partition(subgraphs, traced, tmp_path / "p.svg")
    with pytest.raises(ValueError, match=".svg, .png"):
        render_partition(subgraphs, traced, tmp_path / "p.jpeg")


@needs_dot
def test_render_svg_and_png(tiny_llama, qwen2_vl_meta, tmp_path):
    model, traced, subgraphs = tiny_llama
    svg = render_partition(subgraphs, traced, tmp_path / "tiny.svg", model=model, title="tiny").read_text()
    assert "<svg" in svg and "subgraph 0: model.layers.0" in svg and "model_layers_0" in svg
    model, traced, subgraphs = qwen2_vl_meta
    png = render_partition(subgraphs, traced, tmp_path / "qwen.png", model=model).read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) < 1_000_000


def run_graph_cli(argv):
    parser = argparse.ArgumentParser(prog="patcher")
    add_graph_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_cli_writes_the_picture(tmp_path, capsys):
    tiny_model("LlamaForCausalLM", num_hidden_layers=2).config.save_pretrained(tmp_path / "tiny")
    out = tmp_path / "tiny.dot"
    assert run_graph_cli(["graph", "LlamaForCausalLM", str(tmp_path / "tiny"), "-o", str(out)]) == 0
    clusters, _, _ = parse_dot(out.read_text())
    assert len(clusters) == 3
    assert "Wrote" in capsys.readouterr().out
    if HAS_DOT:
        svg = tmp_path / "tiny.svg"
        assert run_graph_cli(["graph", "LlamaForCausalLM", str(tmp_path / "tiny"), "--collapse", "yes",
                              "-o", str(svg)]) == 0
        assert "<svg" in svg.read_text()


def test_cli_errors(tmp_path, capsys):
    assert run_graph_cli(["graph", "LlamaForCausalLM", "Meta-Llama-3-8B", "-o", str(tmp_path / "x.bmp")]) == 2
    assert "use .svg, .png, .pdf or .dot" in capsys.readouterr().err
    assert run_graph_cli(["graph", "NoSuchModel", "Meta-Llama-3-8B", "-o", str(tmp_path / "x.dot")]) == 2
    # a swallowed target: tracing fails, nothing is written
    code = run_graph_cli(["graph", "LlamaForCausalLM", "Meta-Llama-3-8B", "--ignore", "re:model\\.layers\\.1",
                          "-o", str(tmp_path / "y.dot")])
    assert code == 1 and not (tmp_path / "y.dot").exists()


def test_cli_help_has_examples():
    parser = argparse.ArgumentParser(prog="patcher")
    sub = add_graph_parser(parser.add_subparsers(dest="command"))
    text = sub.format_help()
    assert "examples:" in text and "patcher graph LlamaForCausalLM" in text and "--collapse" in text


def test_patcher_graph_command_is_wired(tmp_path):
    from patcher import cli

    parser = cli.build_parser()
    commands = [action.choices for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    assert any("graph" in choices for choices in commands), "`patcher graph` is not wired into patcher/cli.py"
    out = tmp_path / "llama3.dot"
    assert cli.main(["graph", "LlamaForCausalLM", "Meta-Llama-3-8B", "-o", str(out)]) == 0
    assert len(re.findall(r"^  sg\d+ \[", out.read_text(), flags=re.M)) == 33
