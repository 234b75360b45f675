"""Classes the rewrite leaves alone stay the source module's own classes (``rewrite/originals.py``).

A generated module used to define a copy of every class, and registries keyed on the class object
missed the copies without a word: llm-compressor found none of Llama 4's experts in a model built
from ``load_traceable``'s class, and quantized 0 of its 48 expert Linears. Each case of the toy
module below is one reason a class must stay a copy, or may not.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from patcher.rewrite import patch_source
from patcher.rewrite.originals import source_class, unchanged_classes
from patcher.models.traceable import load_traceable

TOY = textwrap.dedent('''
    import logging

    import torch
    from torch import nn
    from transformers import AutoModel

    logger = logging.getLogger(__name__)
    SCALE = 2.0
    _SEEN = {}
    REGISTERED = []


    def branchy(x):
        if x.sum() > 0:
            return x
        return -x


    def scaled(x):
        return x * SCALE


    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, x):
            logger.debug("plain")
            return scaled(self.proj(x))


    class Child(Plain):
        pass


    class Rewritten(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                x = x + 1
            return x


    class CallsRewritten(nn.Module):
        def forward(self, x):
            return branchy(x)


    class BuildsRewritten(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Rewritten()

        def forward(self, x):
            return self.inner(x)


    class SharesState(nn.Module):
        def forward(self, x):
            _SEEN["last"] = x
            return x


    class Dynamic(nn.Module):
        def forward(self, x):
            return globals()["scaled"](x)


    class Registered(nn.Module):
        def forward(self, x):
            return x


    REGISTERED.append(Registered)


    class UsesAuto(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.sub = AutoModel.from_config(config)


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.plain = Child()
            self.calls = CallsRewritten()
            self.builds = BuildsRewritten()
            self.shares = SharesState()
            self.dynamic = Dynamic()
            self.registered = Registered()

        def forward(self, x):
            x = self.plain(x)
            x = self.calls(x) + self.builds(x)
            return self.registered(self.dynamic(self.shares(x)))
''')

#: Toy class -> why it must stay a copy.
COPIES = {
    "Rewritten": "the rewrite changes it",
    "CallsRewritten": "it calls a function the rewrite changes (the original would call the unrewritten one)",
    "BuildsRewritten": "it builds a class the rewrite changes",
    "SharesState": "it writes a dict each module makes for itself",
    "Dynamic": "it finds a function through globals()",
    "Registered": "the module hands it to a call when it runs (REGISTERED.append)",
    "UsesAuto": "load_traceable redirects the Auto class it builds a sub-model with",
    "Model": "load_traceable returns it, with the patch result on it",
}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    name = f"tz_originals_toy_{tmp_path.name}"
    (tmp_path / f"{name}.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module
    sys.modules.pop(name, None)


def test_unchanged_classes_are_the_originals_and_the_rest_copies(toy, tmp_path):
    traceable = load_traceable(toy.Model, cache_dir=tmp_path / "cache")
    generated = sys.modules[traceable.__module__]
    assert traceable.__tracezoo_patch__.manifest["original_classes"] == ["Plain", "Child"]
    # Plain reads a function, a constant and a logger the rewrite leaves alone; Child reads Plain
    assert generated.Plain is toy.Plain and generated.Child is toy.Child
    for name, why in COPIES.items():
        copy = getattr(generated, name)
        assert copy is not getattr(toy, name) and copy.__module__ == generated.__name__, f"{name}: {why}"
        assert source_class(copy) is getattr(toy, name)
    assert f"from {toy.__name__} import Plain  # unchanged by the patcher" in Path(generated.__file__).read_text()

    model = traceable().eval()
    original = toy.Model().eval()
    original.load_state_dict(model.state_dict())
    assert type(model.plain) is toy.Child
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), rtol=0, atol=0)


def test_only_the_caller_knows_what_it_rebinds(toy):
    """Without ``treat_as_changed``, nothing in the file says that ``AutoModel`` is rebound."""
    after = patch_source(TOY).code
    assert unchanged_classes(TOY, after) == ["Plain", "Child", "UsesAuto"]
    assert unchanged_classes(TOY, after, treat_as_changed=["AutoModel"]) == ["Plain", "Child"]
    assert source_class(toy.Plain) is None and source_class(int) is None


def test_a_generated_file_patched_again_keeps_its_copies(toy):
    """Its classes are copies of the source module's: importing the source's would undo the rewrite."""
    first = patch_source(TOY, module_name=toy.__name__, original_classes=True)
    assert first.manifest["original_classes"] == ["Plain", "Child", "UsesAuto"]
    again = patch_source(first.code, module_name=toy.__name__, original_classes=True)
    assert again.code == first.code and again.manifest["original_classes"] == []
    # off, or without a module to import from, nothing is imported
    assert patch_source(TOY, module_name=toy.__name__).manifest["original_classes"] == []
    assert patch_source(TOY, original_classes=True).manifest["original_classes"] == []


def test_llama4_experts_are_transformers_own():
    """The issue: llm-compressor registers Llama 4's experts by the class object."""
    import transformers
    from transformers.models.llama4 import modeling_llama4

    traceable = load_traceable(transformers.Llama4ForConditionalGeneration)
    generated = sys.modules[traceable.__module__]
    for name in ("Llama4TextExperts", "Llama4TextMoe", "Llama4Router", "Llama4TextMLP"):
        assert getattr(generated, name) is getattr(modeling_llama4, name), name
    # the decoder layer builds the rewritten attention, so it is a copy
    assert generated.Llama4TextDecoderLayer is not modeling_llama4.Llama4TextDecoderLayer
    assert source_class(generated.Llama4TextDecoderLayer) is modeling_llama4.Llama4TextDecoderLayer


def test_llama4_with_original_experts_traces_exactly():
    """The text model, its MoE blocks transformers' own classes: the chain equals eager."""
    import transformers

    from patcher import run_subgraphs, trace_subgraphs
    from patcher.coverage.shrink import shrink_config
    from patcher.models import random_model
    from patcher.verify import run_eagerly

    config = shrink_config(transformers.Llama4TextConfig)
    model = random_model(load_traceable(transformers.Llama4ForCausalLM), config, seed=0)
    assert any(type(module) is transformers.models.llama4.modeling_llama4.Llama4TextExperts
               for module in model.modules())
    sample = {"input_ids": torch.randint(0, config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))}
    subgraphs = trace_subgraphs(model, sample, ["Llama4TextDecoderLayer"])
    other = {"input_ids": torch.randint(0, config.vocab_size, (1, 5), generator=torch.Generator().manual_seed(1))}
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, other)["logits"], run_eagerly(model, other).logits,
                                   rtol=0, atol=0)
