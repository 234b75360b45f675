"""The zoo: traceable classes are drop-ins for the originals and compute the same numbers."""

import re
import sys
import warnings

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import zoo
from patcher import DEFAULT_IGNORE, UntraceableCodeError, run_subgraphs, trace_graph, trace_subgraphs
from patcher.models import build_model, cast_floating_point, load_config
from patcher.models.traceable import GENERATED_PREFIX
from patcher.verify import EXACT, assert_equivalent, run_eagerly, tolerance
from zoo._entries import ENTRIES, recipe

def traceable_class(entry):
    return getattr(zoo, recipe(entry).traceable_class)


def ignore_for(entry):
    return DEFAULT_IGNORE + tuple(recipe(entry).default_ignore)


def targets_for(entry, multimodal):
    # Mllama's cross-attention layers only run with an image: cut at them too when there is one.
    return list(recipe(entry).targets(multimodal))


_MODELS: dict = {}


def models(entry, device="cpu"):
    """(original, traceable) tiny models with the same weights."""
    key = (entry, device)
    if key not in _MODELS:
        spec = recipe(entry)
        original = spec.tiny_model().to(device)
        traceable = spec.tiny_model(model_class=traceable_class(entry)).to(device)
        traceable.load_state_dict(original.state_dict())
        _MODELS[key] = original, traceable
    return _MODELS[key]


_TRACED: dict = {}


def traced(entry, multimodal, device="cpu"):
    """Trace once per entry, mode and device, on a fixed sample; the tests vary the inputs."""
    key = (entry, multimodal, device)
    if key not in _TRACED:
        _, traceable = models(entry, device)
        sample = recipe(entry).build_sample(traceable.config, batch_size=2, seq_len=5, num_images=1, left_padding=1,
                                            multimodal=multimodal, device=device)
        targets = targets_for(entry, multimodal)
        _TRACED[key] = (trace_subgraphs(traceable, sample, targets, ignore=ignore_for(entry)),
                        trace_graph(traceable, sample, targets, ignore=ignore_for(entry)))
    return _TRACED[key]


@st.composite
def zoo_inputs(draw, entry):
    batch_size = draw(st.integers(1, 2))
    seq_len = draw(st.integers(2, 8))
    left_padding = draw(st.integers(0, seq_len - 2))
    num_images = draw(st.integers(1, 2))
    sizes = recipe(entry).example_image_sizes(recipe(entry).tiny_config())
    image_size = [draw(st.sampled_from(sizes)) for _ in range(num_images)]
    seed = draw(st.integers(0, 2**16))
    return dict(batch_size=batch_size, seq_len=seq_len, left_padding=left_padding, num_images=num_images,
                image_size=image_size, generator=torch.Generator().manual_seed(seed))


def check_equal(entry, multimodal, inputs, device="cpu", within=EXACT):
    original, traceable = models(entry, device)
    subgraphs, graph = traced(entry, multimodal, device)
    sample = recipe(entry).build_sample(original.config, multimodal=multimodal, device=device, **inputs)
    with torch.no_grad():
        expected = run_eagerly(original, sample).logits
        assert_equivalent(run_subgraphs(traceable, subgraphs, sample)["logits"], expected, within, "subgraph logits")
        assert_equivalent(graph.forward(traceable, **sample)["logits"], expected, within, "graph logits")


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("multimodal", [False, True], ids=["text", "multimodal"])
def test_traced_graph_and_subgraphs_equal_the_original(entry, multimodal):
    @given(inputs=zoo_inputs(entry))
    def check(inputs):
        check_equal(entry, multimodal, inputs)

    check()


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_original_fails_to_trace_multimodal_and_traceable_passes(entry):
    spec = recipe(entry)
    original, traceable = models(entry)
    sample = spec.build_sample(original.config, batch_size=1, seq_len=4, num_images=1)
    expected = 1 + sum(type(module).__name__ in spec.default_targets for module in original.modules())
    if spec.original_traces:  # the recipe says why; the zoo class must then trace the same way
        assert len(trace_subgraphs(original, sample, spec.default_targets, ignore=DEFAULT_IGNORE)) == expected
    else:
        with pytest.raises(UntraceableCodeError):
            trace_subgraphs(original, sample, spec.default_targets, ignore=DEFAULT_IGNORE)
    assert len(trace_subgraphs(traceable, sample, spec.default_targets, ignore=DEFAULT_IGNORE)) == expected


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_drop_in_checkpoints_load_both_ways(entry, tmp_path):
    original, traceable = models(entry)
    traceable_class = type(traceable)
    assert type(traceable.config) is type(original.config)
    assert [name for name, _ in traceable.named_modules()] == [name for name, _ in original.named_modules()]
    original.save_pretrained(tmp_path / "original")
    loaded = traceable_class.from_pretrained(tmp_path / "original")
    traceable.save_pretrained(tmp_path / "traceable")
    back = type(original).from_pretrained(tmp_path / "traceable")
    for model in (loaded, back):
        state = model.state_dict()
        assert state.keys() == original.state_dict().keys()
        for key, value in original.state_dict().items():
            torch.testing.assert_close(state[key], value, rtol=0, atol=0)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_sub_models_of_the_entrys_own_modeling_file_are_its_generated_classes(entry):
    # Gemma 3 builds its text model with AutoModel.from_config, which looks the class up in
    # transformers' registry: the entry's rewrites of Gemma3TextModel would never run.
    # The generated module for the installed transformers (committed, or regenerated for another one,
    # which leaves other classes alone) says which classes it rewrote: the names it binds to its own.
    from zoo._loader import committed_manifest, load_entry

    source_module, generated = committed_manifest(entry)["source_module"], load_entry(entry)
    _, traceable = models(entry)
    held = {type(module) for module in traceable.modules() if type(module).__module__ == source_module}
    rewritten_but_held = sorted(cls.__name__ for cls in held if getattr(generated, cls.__name__, cls) is not cls)
    assert not rewritten_but_held, f"{entry}: transformers' own {rewritten_but_held}, which the entry rewrote"


def real_trace_rows():
    """``(entry, config name, targets, text count, multimodal count)`` from the recipes' real
    configs: the counts ``patcher trace`` gives with the recipe's targets. A recipe with
    ``multimodal_targets`` (Mllama's cross-attention layers) gets a row for its default targets
    too, which give the text count with or without an image (the layers they cut at always run)."""
    for entry in sorted(ENTRIES):
        spec = recipe(entry)
        for real in spec.real_configs:
            if spec.multimodal_targets:
                yield entry, real.name, list(spec.default_targets), real.text_subgraphs, real.text_subgraphs
            yield entry, real.name, list(spec.targets(multimodal=True)), real.text_subgraphs, real.multimodal_subgraphs


REAL = list(real_trace_rows())


def test_every_entry_has_a_real_config_and_a_traceable_class():
    assert {row[0] for row in REAL} == set(ENTRIES)
    for entry in ENTRIES:
        assert recipe(entry).traceable_class in zoo.__all__
        assert traceable_class(entry).__name__ == recipe(entry).model_class


@pytest.mark.parametrize("entry, config_name, targets, text_count, multimodal_count", REAL)
def test_real_configs_on_meta(entry, config_name, targets, text_count, multimodal_count):
    config = load_config(config_name)
    model = build_model(traceable_class(entry), config, device="meta")
    for multimodal, expected in ((False, text_count), (True, multimodal_count)):
        sample = recipe(entry).build_sample(config, device="meta", multimodal=multimodal)
        assert len(trace_subgraphs(model, sample, targets, ignore=ignore_for(entry))) == expected


def test_zoo_files_are_fresh():
    from zoo._loader import committed_manifest, installed_transformers_version
    from zoo.check import stale_files

    committed = committed_manifest(sorted(ENTRIES)[0])["transformers_version"]
    if committed != installed_transformers_version():
        pytest.skip(f"the committed zoo files are generated for transformers {committed}; this transformers "
                    f"({installed_transformers_version()}) has no committed files: tests/zoo/test_recipe.py::"
                    "test_zoo_regenerates_for_the_installed_transformers is its check")
    stale = stale_files(list(ENTRIES))
    assert not stale, f"stale zoo files: {[str(file.path) for file in stale]}; run `bash scripts/check_zoo --fix`"


def test_other_transformers_version_regenerates_once(monkeypatch, tmp_path):
    from zoo import _loader

    monkeypatch.setenv("TRACEZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(_loader, "installed_transformers_version", lambda: "5.99.0")
    monkeypatch.setattr(_loader, "_LOADED", {})
    # a module generated earlier in this process from the same code would be reused from wherever it
    # was written (another transformers than the pin regenerates on `import zoo`): a fresh import
    for name in [name for name in sys.modules if name.startswith(f"{GENERATED_PREFIX}modeling_llava_")]:
        monkeypatch.delitem(sys.modules, name)
    committed = _loader.committed_manifest("llava")["transformers_version"]
    with pytest.warns(_loader.ZooRegeneratedWarning, match=f"generated for transformers {committed} but 5.99.0") as said:
        module = _loader.load_entry("llava")
    assert str(_loader.regeneration_dir("llava", "5.99.0")) in str(said[0].message)  # and where it went
    assert _loader.regeneration_dir("llava", "5.99.0").is_relative_to(tmp_path)
    # regenerated, not the committed module (an identical earlier generation may be reused)
    assert module.__name__.startswith("_tracezoo_generated_modeling_llava")
    assert module.LlavaForConditionalGeneration.__name__ == "LlavaForConditionalGeneration"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _loader.load_entry("llava") is module  # said once


def test_failed_regeneration_names_the_rewrites_that_no_longer_apply(monkeypatch, tmp_path):
    from zoo import _generate, _loader

    monkeypatch.setenv("TRACEZOO_CACHE", str(tmp_path))
    monkeypatch.setattr(_loader, "installed_transformers_version", lambda: "5.99.0")
    monkeypatch.setattr(_loader, "_LOADED", {})
    real_generate = _generate.generate

    def generate_without_rewrites(entry):
        generated = real_generate(entry)
        generated.result.manifest["rewrites"] = []  # as if the source had changed under every rewrite
        generated.result.code = "raise SyntaxError('renamed upstream')\n"
        return generated

    monkeypatch.setattr(_generate, "generate", generate_without_rewrites)
    with pytest.raises(_loader.ZooRegenerationError) as info:
        _loader.load_entry("llava")
    message = str(info.value)
    assert "Rewrites that no longer apply" in message
    # each stale rewrite is named with the original line it came from
    assert re.search(r"_check_n_image_tokens \(transformers/models/llava/modeling_llava\.py:\d+", message), message


# -- GPU: the same proofs on CUDA when one is present (skipped otherwise) -----------------------
# The chain calls the same modules as eager: patcher.verify.TOLERANCES' "same kernels" row (fp32 exact).
GPU_DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.gpu
@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("multimodal", [False, True], ids=["text", "multimodal"])
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=["fp32", "bf16", "fp16"])
def test_equal_on_gpu(entry, multimodal, dtype):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    spec = recipe(entry)
    original = spec.tiny_model(dtype=dtype).to("cuda")
    traceable = spec.tiny_model(dtype=dtype, model_class=traceable_class(entry)).to("cuda")
    traceable.load_state_dict(original.state_dict())
    targets = targets_for(entry, multimodal)
    # Traced on the meta device, run on the GPU: nothing device-specific may be baked in. The dtype
    # must match: model code reading `self.dtype` (a Python value) bakes it into the graph.
    meta_model = cast_floating_point(build_model(type(traceable), traceable.config, device="meta"), dtype)
    meta_sample = spec.build_sample(traceable.config, batch_size=2, seq_len=5, multimodal=multimodal, device="meta")
    subgraphs = trace_subgraphs(meta_model, meta_sample, targets, ignore=ignore_for(entry))
    for inputs in (dict(batch_size=2, seq_len=5, left_padding=1), dict(batch_size=1, seq_len=8, num_images=2)):
        sample = spec.build_sample(original.config, multimodal=multimodal, device="cuda", dtype=dtype, **inputs)
        with torch.no_grad():
            assert_equivalent(run_subgraphs(traceable, subgraphs, sample)["logits"], run_eagerly(original, sample).logits,
                              tolerance(dtype, "same kernels"), "subgraph logits")
