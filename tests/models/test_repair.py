"""Trace-guided repair: failures only tracing can find are mapped back to the source and rewritten."""

import contextlib
import importlib
import os
import sys

import pytest
import torch

from patcher import run_subgraphs, trace_subgraphs
from patcher.registry.locations import Location
from patcher.models.traceable import load_traceable, repair
from patcher.trace import UntraceableCodeError, trace_graph

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures"))
import toy_modeling  # noqa: E402


@contextlib.contextmanager
def user_module(directory, name: str, source: str):
    """``source`` written to ``directory/name.py`` and imported as a user's own modeling file (its
    ``tests_fixture_toy`` import is the toy fixture); unimported and off the path afterwards."""
    (directory / f"{name}.py").write_text(source)
    sys.modules["tests_fixture_toy"] = toy_modeling
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(directory))
        sys.modules.pop(name, None)


def test_repair_rewrites_what_only_tracing_finds(tmp_path):
    config = toy_modeling.ToyConfig()
    sample = {"hidden": torch.randn(2, 4)}
    # Static rules leave `if self.threshold > 0:` alone (a condition on an attribute) ...
    plain = load_traceable(toy_modeling.ToyModel, targets=["ToyLayer"], cache_dir=tmp_path)
    assert plain.__tracezoo_patch__.rewrites == []
    # ... tracing finds it, and repair rewrites exactly that statement.
    result = repair(toy_modeling.ToyModel, config, sample, ["ToyLayer"], ignore=[], cache_dir=tmp_path)
    assert result.traced, result.report()
    line = next(number for number, text in enumerate(open(toy_modeling.__file__), 1)
                if text.strip() == "if self.threshold > 0:")
    assert result.locations == [Location(line, wanted="TZ101")]
    assert [step.construct.symptom.rule for step in result.steps] == ["TZ101"]
    rewrites = result.model_class.__tracezoo_patch__.manifest["rewrites"]
    assert [(rewrite["rule"], rewrite["lines"][0]) for rewrite in rewrites] == [("TZ101", line)]

    # The repaired graph decides the branch when it runs: right for both values of the buffer.
    torch.manual_seed(0)
    original = toy_modeling.ToyModel(config)
    repaired = result.model_class(config)
    repaired.load_state_dict(original.state_dict())
    subgraphs = trace_subgraphs(repaired, sample, ["ToyLayer"], ignore=[])
    assert len(subgraphs) == config.num_layers + 1
    for threshold in (0.0, 1.0):
        original.threshold.fill_(threshold)
        repaired.threshold.fill_(threshold)
        for hidden in (torch.randn(3, 4), torch.randn(1, 4)):
            with torch.no_grad():
                torch.testing.assert_close(run_subgraphs(repaired, subgraphs, {"hidden": hidden})["hidden"],
                                           original(hidden)["hidden"], rtol=0, atol=0)


def test_repair_rewrites_a_class_the_generated_module_imports(tmp_path):
    """``Stack`` looks traceable to the static rules, so the generated module imports it from the
    source (``rewrite/originals.py``), and tracing through it fails in the *source* file: repair
    rewrites that line of ``Stack``, which then is a copy."""
    with user_module(tmp_path, "stacked_modeling", (
        "import torch\n"
        "from torch import nn\n"
        "from tests_fixture_toy import ToyLayer, ToyModel\n"
        "\n\n"
        "class Stack(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        super().__init__()\n"
        "        self.layers = nn.ModuleList([ToyLayer(config.width) for _ in range(config.num_layers)])\n"
        "        self.register_buffer('threshold', torch.tensor(0.0))\n"
        "\n"
        "    def forward(self, hidden):\n"
        "        if self.threshold > 0:\n"
        "            hidden = hidden * 2\n"
        "        for layer in self.layers:\n"
        "            hidden = layer(hidden)\n"
        "        return hidden\n"
        "\n\n"
        "class StackedModel(ToyModel):\n"
        "    def __init__(self, config):\n"
        "        super().__init__(config)\n"
        "        self.stack = Stack(config)\n"
        "\n"
        "    def forward(self, hidden):\n"
        "        return {'hidden': self.stack(hidden)}\n"
    )) as stacked_modeling:
        plain = load_traceable(stacked_modeling.StackedModel, targets=["ToyLayer"], cache_dir=tmp_path / "cache")
        assert sys.modules[plain.__module__].Stack is stacked_modeling.Stack
        result = repair(stacked_modeling.StackedModel, toy_modeling.ToyConfig(), {"hidden": torch.randn(2, 4)},
                        ["ToyLayer"], ignore=[], cache_dir=tmp_path / "cache")
    assert result.traced, result.report()
    assert result.locations == [Location(13, wanted="TZ101")]  # `if self.threshold > 0:` in Stack.forward
    assert sys.modules[result.model_class.__module__].Stack is not stacked_modeling.Stack


def test_repair_wraps_a_python_list_indexed_by_a_traced_value(tmp_path):
    """A Python list indexed by a value of the input's shape (no module container, which the tracer
    decides from the sample): the error's fix, `patcher repair`, wraps the line, equal to eager on
    every shape."""
    with user_module(tmp_path, "scaled_modeling", (
        "import torch\n"
        "from torch import nn\n"
        "from tests_fixture_toy import ToyConfig, ToyLayer, ToyModel\n"
        "\n\n"
        "class ScaledModel(ToyModel):\n"
        "    def forward(self, hidden):\n"
        "        for layer in self.layers:\n"
        "            hidden = layer(hidden)\n"
        "        scales = [1.0, 2.0, 3.0]\n"
        "        hidden = hidden * scales[hidden.shape[0] - 1]\n"
        "        return {'hidden': hidden}\n"
    )) as scaled_modeling:
        config, sample = toy_modeling.ToyConfig(), {"hidden": torch.randn(2, 4)}
        plain = load_traceable(scaled_modeling.ScaledModel, targets=["ToyLayer"], cache_dir=tmp_path / "cache")
        with pytest.raises(UntraceableCodeError, match=r"(?s)where Python needs an int.*scaled_modeling_\w+\.py:\d+ .*"
                                                       r"scales\[hidden.shape\[0\] - 1\].*`patcher repair` rewrites"):
            trace_graph(plain(config), sample, ["ToyLayer"], [])
        result = repair(scaled_modeling.ScaledModel, config, sample, ["ToyLayer"], ignore=[],
                        cache_dir=tmp_path / "cache")
    assert result.traced, result.report()
    assert result.locations == [Location(11, wanted="TZ103")]
    torch.manual_seed(0)
    original = scaled_modeling.ScaledModel(config)
    repaired = result.model_class(config)
    repaired.load_state_dict(original.state_dict())
    subgraphs = trace_subgraphs(repaired, sample, ["ToyLayer"], ignore=[])
    for hidden in (sample["hidden"], torch.randn(3, 4), torch.randn(1, 4)):
        with torch.no_grad():
            assert torch.equal(run_subgraphs(repaired, subgraphs, {"hidden": hidden})["hidden"],
                               original(hidden)["hidden"])


def test_load_traceable_keeps_names_and_loads_the_same_checkpoint(tmp_path):
    config = toy_modeling.ToyConfig()
    traceable = load_traceable(toy_modeling.ToyModel, cache_dir=tmp_path)
    assert traceable.__name__ == "ToyModel" and traceable is not toy_modeling.ToyModel
    original = toy_modeling.ToyModel(config)
    original.save_pretrained(tmp_path / "checkpoint")
    loaded = traceable.from_pretrained(tmp_path / "checkpoint")
    for key, value in original.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[key], value, rtol=0, atol=0)


def test_repair_reports_what_it_cannot_fix(tmp_path):
    """A construct no rule fixes: the report names file, line, code, kind and the guide section."""
    with user_module(tmp_path, "stubborn_modeling", (
        "import torch\n"
        "from torch import nn\n"
        "from tests_fixture_toy import ToyConfig, ToyLayer, ToyModel\n"
        "\n\n"
        "class StubbornModel(ToyModel):\n"
        "    def forward(self, hidden):\n"
        "        while self.threshold < hidden.sum():\n"
        "            return {'hidden': hidden}\n"
        "        for layer in self.layers:\n"
        "            hidden = layer(hidden)\n"
        "        return {'hidden': hidden}\n"
    )) as stubborn_modeling:
        result = repair(stubborn_modeling.StubbornModel, toy_modeling.ToyConfig(), {"hidden": torch.randn(2, 4)},
                        ["ToyLayer"], ignore=[], cache_dir=tmp_path / "cache")
    assert not result.traced
    report = result.report()
    assert "blocker(s) remain" in report
    assert "while self.threshold < hidden.sum():" in report
    assert "stubborn_modeling.py:8" in report  # the static blocker
    assert f"in the original source: {tmp_path / 'stubborn_modeling.py'}:8" in report
    assert "GUIDE.md#" in report


def _written_file_traces(path, class_name, config, multimodal) -> bool:
    """Trace the written file as `patcher trace FILE.py:Class` loads it (independently of repair)."""
    from patcher.models.attempt import prepare_trace
    from patcher.trace import TracingError, trace_graph

    setup = prepare_trace(f"{path}:{class_name}", str(config), multimodal_data=multimodal)
    try:
        trace_graph(setup.model, setup.sample, setup.targets, setup.ignore)
    except TracingError:
        return False
    return True


@pytest.mark.parametrize("config_name,class_name", [
    # its language model and vision tower are built with AutoModel.from_config: patched in memory
    # (load_traceable redirects the Auto classes), transformers' originals in the written file
    ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
    ("LlamaConfig", "LlamaForCausalLM"),
])
def test_repair_output_verdict_is_what_the_written_file_does(config_name, class_name, tmp_path, capsys):
    import transformers

    from patcher.cli import main
    from patcher.coverage.shrink import shrink_config

    multimodal = "VL" in class_name
    shrink_config(getattr(transformers, config_name)).save_pretrained(tmp_path / "config")
    argv = ["repair", class_name, str(tmp_path / "config"), "-o", str(tmp_path / "out")]
    status = main(argv + (["--multimodal"] if multimodal else []))
    out = capsys.readouterr().out
    written = next((tmp_path / "out").glob("modeling_*.py"))
    traces = _written_file_traces(written, class_name, tmp_path / "config", multimodal)
    assert status == (0 if traces else 1), out
    assert ("checked: the written file traces" in out) == traces, out
    assert "the model traces" not in out, out  # the verdict is about the file, never the in-memory class
    if not traces:
        assert "the written file does NOT trace" in out and "AutoModel.from_config" in out, out
