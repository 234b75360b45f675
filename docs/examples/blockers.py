"""Show one untraceable construct: the tracer's error, the patcher's rewrite, and the proof.

    python docs/examples/blockers.py KIND      # KIND: branch, assert, loop, starred, shape, call

Each kind is a tiny model whose forward holds one construct torch.fx cannot trace. The script
traces it (printing the error verbatim), patches the source with the patcher, prints what
changed, traces the patched model and checks it against the original on inputs of another shape.
GUIDE.md shows this script's real output.
"""

import argparse
import difflib
import importlib.util
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

from patcher import UntraceableCodeError, run_subgraphs, trace_subgraphs
from patcher.rewrite import patch_source

HEADER = """\
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x)


"""

MODELS = {
    "branch": """\
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        if x.sum() > 0:
            x = x * 2
        for layer in self.layers:
            x = layer(x)
        return x
""",
    "assert": """\
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        assert (x.abs() < 1e4).all(), f"input too large: {x.abs().max()}"
        for layer in self.layers:
            x = layer(x)
        return x
""",
    "loop": """\
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x, lengths):
        pooled = torch.stack([x[: int(n)].mean(0) for n in lengths.tolist()])
        for layer in self.layers:
            pooled = layer(pooled)
        return pooled
""",
    "starred": """\
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        batch, *rest = x.shape
        for layer in self.layers:
            x = layer(x)
        return x.reshape(batch, -1)
""",
    "shape": """\
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x, mask):
        if mask.shape[1] != x.shape[1]:
            mask = mask[:, : x.shape[1]]
        x = x * mask[..., None]
        for layer in self.layers:
            x = layer(x)
        return x
""",
    "call": """\
def build_mask(x):
    if (x > 0).any():
        return (x > 0).float()
    return torch.ones_like(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x):
        x = x * build_mask(x)
        for layer in self.layers:
            x = layer(x)
        return x
""",
}

# Samples: (traced sample, a sample of another shape to reuse the graph on)
SAMPLES = {
    "loop": lambda rows: {"x": torch.randn(rows, 4), "lengths": torch.tensor([1, rows])},
    "shape": lambda rows: {"x": torch.randn(2, rows, 4), "mask": torch.ones(2, rows + 1)},
}
IGNORE = {"call": ["build_mask"]}


def load(source: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, path


def sample(kind: str, rows: int) -> dict:
    return SAMPLES[kind](rows) if kind in SAMPLES else {"x": torch.randn(rows, 4)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=sorted(MODELS))
    kind = parser.parse_args(argv).kind
    source = HEADER + MODELS[kind]
    original, path = load(source, f"example_{kind}")
    torch.manual_seed(0)
    model = original.Model().eval()
    print("1. tracing the original:")
    try:
        trace_subgraphs(model, sample(kind, 3), ["Layer"], ignore=[])
        print("   traced (nothing to fix)")
    except UntraceableCodeError as error:
        text = error.construct.describe().replace(str(path), f"example_{kind}.py")
        print(textwrap.indent(text, "   "))
    result = patch_source(source, module_name=f"example_{kind}", targets=["Layer"], ignore=IGNORE.get(kind, []))
    print("2. what the patcher changed:")
    body = result.code.split("\n\n", 1)[1]  # drop the generated-file header
    diff = difflib.unified_diff(source.splitlines(), body.splitlines(), lineterm="", n=1)
    print(textwrap.indent("\n".join(list(diff)[2:]), "   "))
    patched, _ = load(result.code, f"example_{kind}_traceable")
    traceable = patched.Model().eval()
    traceable.load_state_dict(model.state_dict())
    subgraphs = trace_subgraphs(traceable, sample(kind, 3), ["Layer"], ignore=[])
    print(f"3. the patched model traces into {len(subgraphs)} subgraphs")
    for rows in (5, 2):
        inputs = sample(kind, rows)
        with torch.no_grad():
            torch.testing.assert_close(run_subgraphs(traceable, subgraphs, inputs)["output"], model(**inputs),
                                       rtol=0, atol=0)
    print("   and equals the original on inputs of other shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
