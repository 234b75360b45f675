"""llm-compressor's ``oneshot`` on tracezoo's tracer (``patcher.integrations.llmcompressor``).

Skipped unless ``llmcompressor`` is installed; it lives in a separate environment
(``bash scripts/setup_llmcompressor.sh``, then ``.venv-llmc/bin/python -m pytest
tests/test_llmcompressor.py``), because llmcompressor 0.14 requires transformers <= 5.17 and the
main environment runs 5.23. CI runs the cases not marked ``slow`` there.

For every case (every zoo entry's class, vision-language classes outside the zoo made traceable by
``load_traceable``, two text classes made traceable the same way, and plain transformers'
``LlamaForCausalLM``), ``oneshot`` runs GPTQ (W4A16 and W8A8) with the sequential
pipeline inside ``tracezoo_tracing()`` on calibration batches of two image layouts, and:

- every Linear of the sequential targets is quantized (a scale, and GPTQ changed the weight);
- the inputs every target received while it was calibrated equal an eager reference: the final
  model (every layer quantized) run eagerly with quantization disabled, as the pipeline runs it,
  gives layer i the outputs of the quantized layers 0..i-1, which is what the chain must have fed
  it (bit-equal: the chain calls the same modules with the same kernels);
- where llm-compressor's own tracer also works on the same model and batches, the quantized
  weights are bit-identical to its result; where it does not, ``LLMC_TRACER`` says why (it fails,
  or it runs and calibrates on inputs that differ from eager).

Batches that do not fit the graph are refused before any weight changes (``test_mismatched_*``).

Device-clean: on a machine with an accelerator, ``oneshot`` leaves the model offloaded
(compressed-tensors' ``OffloadCache``: stored where it was, every parameter handed out as a copy on
the accelerator, every module's inputs moved there). So the eager reference runs on the device the
model's parameters come out on, and a snapshot taken before ``oneshot`` is compared on the device of
the value it is compared with (a copy between devices is exact).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import re
import warnings

import pytest
import torch

pytest.importorskip("llmcompressor")

from llmcompressor import oneshot  # noqa: E402
from llmcompressor.modifiers.quantization import GPTQModifier  # noqa: E402
from llmcompressor.utils.helpers import DisableQuantization, calibration_forward_context  # noqa: E402

import zoo  # noqa: E402
from patcher import InputMismatchError, MissingInputError, load_traceable  # noqa: E402
from patcher.models import wake_zero_parameters  # noqa: E402
from patcher.integrations.llmcompressor import tracezoo_tracing  # noqa: E402
from zoo._entries import ENTRIES, recipe  # noqa: E402

#: Zoo entry -> its traceable class's export name, as its recipe declares it.
ZOO_CLASSES = {entry: recipe(entry).traceable_class for entry in ENTRIES}

#: Vision-language classes outside the zoo, each with what its image inputs add.
OUTSIDE_ZOO = {
    "LlavaNextForConditionalGeneration": "any-resolution tiles + image_sizes",
    "LlavaOnevisionForConditionalGeneration": "any-resolution, image sizes read by len()",
    "Idefics3ForConditionalGeneration": "pixel_attention_mask, a per-image feature list",
    "Idefics2ForConditionalGeneration": "perceiver resampler, pixel_attention_mask",
    "SmolVLMForConditionalGeneration": "Idefics3's layout, another text model",
    "Qwen3VLForConditionalGeneration": "patch grid, deepstack features",
    "Glm4vForConditionalGeneration": "patch grid with start/end markers",
    "PaliGemmaForConditionalGeneration": "fixed size, token_type_ids",
    "Mistral3ForConditionalGeneration": "Pixtral tower, image_sizes",
    "Lfm2VlForConditionalGeneration": "SigLIP2 NaFlex: spatial_shapes + patch mask",
    "InternVLForConditionalGeneration": "fixed size, pixel shuffle",
    "GotOcr2ForConditionalGeneration": "SAM tower",
    "AyaVisionForConditionalGeneration": "pixel shuffle projector",
}

_LOST_FX_WRAP = (
    "llm-compressor's autowrap_forward (pipelines/sequential/ast_helpers.py) recompiles {forward} in a copy of "
    "its module's globals, where torch.fx.wrap's patching never reaches, so its tracer steps into tracezoo's "
    "forwarder and meets the branch it hides ({line}): TraceError, control flow on a traced value")
_MASK_DROPPED = (
    "llm-compressor's graph hands every text layer ({text}) attention_mask=None where eager hands the causal "
    "mask, so layer 1 is calibrated on inputs {off} off; the quantized weights differ from tracezoo's, whose "
    "inputs equal eager")
#: Cases where llm-compressor's own tracer, on the same model and batches, does not give a chain
#: to compare weights with: ``case -> (how, why)``; ``fails``: ``oneshot`` raises; ``wrong``: it runs,
#: and the inputs it calibrates a layer on differ from eager (measured). From real runs; strict.
LLMC_TRACER: dict[str, tuple[str, str]] = {
    "qwen2_vl": ("fails", _LOST_FX_WRAP.format(forward="Qwen2VLTextModel.forward", line="modeling_qwen2_vl.py:820")),
    "qwen2_5_vl": ("fails", _LOST_FX_WRAP.format(forward="Qwen2_5_VLTextModel.forward",
                                                 line="modeling_qwen2_5_vl.py:839")),
    "Qwen3VLForConditionalGeneration": ("fails", _LOST_FX_WRAP.format(forward="Qwen3VLTextModel.forward",
                                                                      line="modeling_qwen3_vl.py")),
    "Glm4vForConditionalGeneration": ("fails", _LOST_FX_WRAP.format(forward="Glm4vTextModel.forward",
                                                                    line="modeling_glm4v.py:869")),
    "PaliGemmaForConditionalGeneration": ("fails", _LOST_FX_WRAP.format(
        forward="GemmaModel.forward", line="the create_causal_mask call, modeling_gemma.py:413")),
    "Mistral3ForConditionalGeneration": ("wrong", _MASK_DROPPED.format(text="Mistral", off="0.08")),
    "Idefics2ForConditionalGeneration": ("wrong", _MASK_DROPPED.format(text="Mistral", off="0.09")),
}

#: Cases run in CI (the rest are marked slow).
CI_CASES = ("llava", "qwen2_vl", "PaliGemmaForConditionalGeneration", "transformers:LlamaForCausalLM")


def _zoo_case(entry: str):
    spec = recipe(entry)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ZooRegeneratedWarning: llmcompressor's transformers is older
        cls = getattr(zoo, ZOO_CLASSES[entry])
    model = spec.tiny_model(model_class=cls)
    batches = [spec.build_sample(model.config, batch_size=2, seq_len=5, num_images=1, left_padding=1),
               spec.build_sample(model.config, batch_size=1, seq_len=9, num_images=2, left_padding=0,
                                 generator=torch.Generator().manual_seed(1))]
    return model, batches, list(spec.targets(multimodal=True))


def _outside_zoo_case(name: str):
    """The coverage sweep's tiny model, patched by ``load_traceable``, and its two image layouts."""
    from patcher.coverage.check import _build
    from patcher.coverage.modalities import IMAGES
    from patcher.coverage.discover import find_layers, trace_targets
    from patcher.coverage.shrink import shrink_config
    from patcher.models import build_model, resolve_model_class

    cls = resolve_model_class(name)
    config = shrink_config(cls.config_class)
    meta = build_model(cls, config, device="meta")
    classes, layer_list = find_layers(meta)
    targets = trace_targets(meta, classes, layer_list)
    model = _build(load_traceable(cls, targets=classes), config, seed=0)
    return model, IMAGES.samples(config, model, 0), targets


def _text_case(class_name: str, config_class: str, plain: bool = False):
    """A tiny text model; ``plain``: the transformers class itself, which tracezoo traces as it is."""
    import transformers

    config = getattr(transformers, config_class)(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    cls = getattr(transformers, class_name) if plain else load_traceable(class_name)
    model = cls._from_config(config)
    wake_zero_parameters(model, 0)
    model.eval()
    generator = torch.Generator().manual_seed(0)
    batches = []
    for batch, length, padding in ((2, 7, 2), (3, 5, 0)):
        attention_mask = torch.ones(batch, length, dtype=torch.long)
        attention_mask[0, :padding] = 0
        batches.append({"input_ids": torch.randint(0, 64, (batch, length), generator=generator),
                        "attention_mask": attention_mask})
    return model, batches, [class_name.replace("ForCausalLM", "DecoderLayer")]


CASES = {
    **{entry: (lambda entry=entry: _zoo_case(entry)) for entry in ZOO_CLASSES},
    **{name: (lambda name=name: _outside_zoo_case(name)) for name in OUTSIDE_ZOO},
    "load_traceable:LlamaForCausalLM": lambda: _text_case("LlamaForCausalLM", "LlamaConfig"),
    "load_traceable:Qwen2ForCausalLM": lambda: _text_case("Qwen2ForCausalLM", "Qwen2Config"),
    "transformers:LlamaForCausalLM": lambda: _text_case("LlamaForCausalLM", "LlamaConfig", plain=True),
}


def _case_params():
    return [pytest.param(case, marks=() if case in CI_CASES else pytest.mark.slow) for case in CASES]


def target_linears(model, targets) -> list[str]:
    layers = [name for name, module in model.named_modules() if type(module).__name__ in targets]
    return [name for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and any(name.startswith(layer + ".") for layer in layers)]


def gptq(scheme: str, linears: list[str]) -> GPTQModifier:
    """GPTQ on exactly the Linears of the sequential targets.

    ``W4A16`` is 4-bit symmetric integer weights in groups along the input (llm-compressor's preset
    uses groups of 128; the tiny models' widths are smaller, so groups of 8 here); ``W8A8`` is the
    preset (8-bit channel-wise weights, 8-bit dynamic per-token activations)."""
    targets = ["re:" + "|".join(re.escape(name) for name in linears)]
    if scheme == "W8A8":
        return GPTQModifier(targets=targets, scheme="W8A8")
    return GPTQModifier(config_groups={"w4a16_groups_of_8": {
        "targets": targets,
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 8}}})


def run_oneshot(model, batches, targets, modifier, tmp_path, tracezoo: bool = True) -> None:
    # oneshot re-reads the config from model.config.name_or_path, and wants a processor once a
    # dataset is given (a DataLoader of ready batches needs none).
    model.config.save_pretrained(tmp_path)
    model.config._name_or_path = str(tmp_path)
    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    with tracezoo_tracing() if tracezoo else undo_tracer_patches(model):
        oneshot(model=model, dataset=loader, processor=object(), pipeline="sequential",
                sequential_targets=targets, recipe=modifier, num_calibration_samples=len(batches))


class TargetInputs:
    """Forward pre-hooks on every sequential target: the tensors of each call, in order."""

    def __init__(self, model, targets):
        self.layers = [(name, module) for name, module in model.named_modules() if type(module).__name__ in targets]
        self.seen: dict[str, list] = {name: [] for name, _ in self.layers}

    @contextlib.contextmanager
    def recording(self):
        def hook(name):
            def record(module, args, kwargs):
                self.seen[name].append(_tensors(args, kwargs))
            return record

        handles = [module.register_forward_pre_hook(hook(name), with_kwargs=True) for name, module in self.layers]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


def _tensors(args, kwargs) -> list:
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    return [leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]


def _equal(value: torch.Tensor, snapshot: torch.Tensor) -> bool:
    """Bit-equal, on ``value``'s device: a parameter of an offloaded model comes out on the
    accelerator, its snapshot from before ``oneshot`` is where the model was then."""
    return torch.equal(value, snapshot.to(value.device))


def model_device(model) -> torch.device:
    """Where the model computes: after ``oneshot`` on an accelerator, the onload device (the
    parameters it hands out are there), else where the parameters are."""
    return next(model.parameters()).device


def _on(batch: dict, device: torch.device) -> dict:
    return {key: value.to(device) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


@contextlib.contextmanager
def undo_tracer_patches(model):
    """llm-compressor's ``HFTracer.patch_for_tracing`` (transformers_helpers.py) restores the torch
    functions and cache classes it patches only when tracing succeeds (no ``try/finally`` around its
    ``yield``): after a failed trace every later eager forward in the process raises. Put them back,
    so one failing case cannot fail the next."""
    from llmcompressor.pipelines.sequential.transformers_helpers import HFTracer

    torch_saved = {name: getattr(torch, name) for name in HFTracer._TORCH_METHODS_TO_PATCH}
    namespaces = {id(g): g for g in (getattr(m.forward, "__globals__", None) for m in model.modules()) if g}
    saved = {key: dict(namespace) for key, namespace in namespaces.items()}
    try:
        yield
    finally:
        for name, value in torch_saved.items():
            setattr(torch, name, value)
        for key, namespace in namespaces.items():
            for name, value in saved[key].items():
                if namespace.get(name) is not value and isinstance(value, type):
                    namespace[name] = value


@pytest.mark.parametrize("scheme", ["W4A16", "W8A8"])
@pytest.mark.parametrize("case", _case_params())
def test_oneshot_gptq_through_tracezoo(case, scheme, tmp_path):
    model, batches, targets = CASES[case]()
    linears = target_linears(model, targets)
    assert linears, f"no Linear inside {targets}"
    original = copy.deepcopy(model)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}

    inputs = TargetInputs(model, targets)
    with inputs.recording():
        run_oneshot(model, batches, targets, gptq(scheme, linears), tmp_path / "tracezoo")

    # every targeted Linear is quantized, and GPTQ changed it
    for name in linears:
        module = model.get_submodule(name)
        assert hasattr(module, "weight_scale"), f"{name} was not quantized"
        assert not _equal(module.weight, before[f"{name}.weight"]), f"{name}: GPTQ left the weight unchanged"

    # what each target was calibrated on = eager on the quantized model (layers 0..i-1 quantized)
    # The pipeline calls each target on every batch to calibrate it, then again to propagate.
    for name, seen in inputs.seen.items():
        assert len(seen) == 2 * len(batches), f"{name}: {len(seen)} calls for {len(batches)} batches"
    reference = TargetInputs(model, targets)
    # use_cache=False as in the graph: some text models (Idefics3's) read it from a sub-config that
    # calibration_forward_context leaves on, and would hand their layers a cache they never read
    no_cache = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    # on the device the chain ran on, so every kernel is the one the chain's layers ran
    device = model_device(model)
    with reference.recording(), calibration_forward_context(model), DisableQuantization(model):
        for batch in batches:
            model(**_on(batch, device), **no_cache)
    for name, seen in inputs.seen.items():
        calibrated = seen[:len(batches)]
        for index, (chain, eager) in enumerate(zip(calibrated, reference.seen[name], strict=True)):
            assert len(chain) == len(eager), f"{name}, batch {index}: {len(chain)} inputs, eager {len(eager)}"
            for position, (got, want) in enumerate(zip(chain, eager)):
                if isinstance(want, torch.Tensor):
                    torch.testing.assert_close(got, want, rtol=0, atol=0,
                                               msg=lambda m: f"{name}, batch {index}, input {position}: {m}")
                else:
                    assert got == want, (name, index, position)

    # llm-compressor's own tracer on the same model and batches: bit-identical weights
    how = LLMC_TRACER.get(case, ("works", ""))[0]
    if how == "fails":
        with pytest.raises(RuntimeError, match="symbolically traced variables cannot be used as inputs to control flow"):
            run_oneshot(original, batches, targets, gptq(scheme, linears), tmp_path / "llmc", tracezoo=False)
        return
    theirs = TargetInputs(original, targets)
    with theirs.recording():
        run_oneshot(original, batches, targets, gptq(scheme, linears), tmp_path / "llmc", tracezoo=False)
    if how == "wrong":
        assert not all(_same(theirs.seen[name][:len(batches)], inputs.seen[name][:len(batches)])
                       for name in inputs.seen), "llm-compressor calibrated on eager's inputs: not wrong any more"
        return
    weights = original.state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[key], rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


def _same(calls: list, others: list) -> bool:
    for call, other in zip(calls, others, strict=True):
        for a, b in zip(call, other, strict=True):
            if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
                return False
            if isinstance(a, torch.Tensor) and (a.shape != b.shape or not _equal(a, b)):
                return False
    return True


def _unchanged(model, before) -> None:
    """Every parameter the model had before ``oneshot`` is as it was (the quantization config adds
    scale parameters at initialisation, before calibration: those are new, not changed)."""
    now = dict(model.named_parameters())
    for name, value in before.items():
        assert _equal(now[name], value), f"{name} changed"


def _refused(model, batches, targets, tmp_path, error, names):
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    with pytest.raises(error) as caught:
        run_oneshot(model, batches, targets, gptq("W8A8", target_linears(model, targets)), tmp_path)
    for name in names:
        assert repr(name) in str(caught.value), caught.value
    assert "calibration batch 1" in str(caught.value), caught.value
    _unchanged(model, before)


def test_mismatched_padded_mask_is_refused_before_weights_change(tmp_path):
    """Traced on a batch without attention_mask (the first batch), a later padded batch would run
    unmasked (logits off by 0.11 on Llama): refused, naming the input, nothing quantized."""
    model, batches, targets = _text_case("LlamaForCausalLM", "LlamaConfig")
    first = {"input_ids": batches[0]["input_ids"]}
    _refused(model, [first, batches[0]], targets, tmp_path, InputMismatchError, ["attention_mask"])


def test_mismatched_image_on_text_graph_is_refused_before_weights_change(tmp_path):
    """Traced text-only, a batch with an image would run without it (0.65 on LLaVA): refused."""
    model, batches, targets = _zoo_case("llava")
    text = {key: batches[0][key] for key in ("input_ids", "attention_mask")}
    text["input_ids"] = torch.where(text["input_ids"] == model.config.image_token_id, 1, text["input_ids"])
    _refused(model, [text, batches[0]], targets, tmp_path, InputMismatchError, ["pixel_values"])


def test_mismatched_image_layout_is_refused_before_weights_change(tmp_path):
    """A batch of another image layout, without the patch mask the graph was traced with: refused."""
    model, batches, targets = _outside_zoo_case("Idefics3ForConditionalGeneration")
    assert "pixel_attention_mask" in batches[0]
    other = {key: value for key, value in batches[1].items() if key != "pixel_attention_mask"}
    _refused(model, [batches[0], other], targets, tmp_path, MissingInputError, ["pixel_attention_mask"])


def _pipeline_loop(model, subgraphs, cache) -> None:
    """The sequential pipeline's propagation: each subgraph on every batch, given what the cache's
    ``iter`` (``fetch``: a value whose name is ``in`` the subgraph's ``input_names``) picks."""
    for subgraph in subgraphs:
        for index, inputs in enumerate(cache.iter(subgraph.input_names)):
            outputs = subgraph.forward(model, **inputs)
            cache.update(index, outputs)
            cache.delete(index, subgraph.consumed_names)


def test_llmcompressors_cache_hands_subgraph_0_every_input_of_a_batch():
    """Without the batch check ``tracezoo_tracing()`` adds to the cache, llm-compressor's own
    ``IntermediatesCache`` dropped a padded mask on a graph traced without one (``fetch`` hands a
    subgraph what is ``in`` its ``input_names``), and the layers ran unmasked. Subgraph 0's
    ``input_names`` holds every model-level name: it is handed the mask, and refuses it. The keys the
    pipeline keeps for itself (``loss_mask``) are not handed on."""
    from llmcompressor.pipelines.cache import IntermediatesCache

    from patcher import trace_subgraphs
    from patcher.integrations.llmcompressor import PIPELINE_KEYS, to_pipeline_subgraphs
    from patcher.verify import run_eagerly

    model, batches, targets = _text_case("LlamaForCausalLM", "LlamaConfig")
    first = {"input_ids": batches[0]["input_ids"]}
    subgraphs = to_pipeline_subgraphs(trace_subgraphs(model, first, targets))
    assert not any(key in subgraphs[0].input_names for key in PIPELINE_KEYS)
    with torch.no_grad():
        cache = IntermediatesCache.from_dataloader([{**first, "loss_mask": torch.ones_like(first["input_ids"])}])
        _pipeline_loop(model, subgraphs, cache)
        torch.testing.assert_close(cache.fetch(0, ["logits"])["logits"], run_eagerly(model, first).logits,
                                   rtol=0, atol=0)
        cache = IntermediatesCache.from_dataloader([first, batches[0]])
        with pytest.raises(InputMismatchError, match=r"subgraph 0: input 'attention_mask' given, but the graph was "
                                                     r"traced without it"):
            _pipeline_loop(model, subgraphs, cache)


def test_guide_example_runs(tmp_path, monkeypatch):
    """GUIDE.md's example of the integration, as written (the main environment's doc test skips it)."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "GUIDE.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    example = next(block for block in blocks if "tracezoo_tracing()" in block)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "GUIDE.md (llm-compressor example)", "exec"), {"__name__": "guide_example"})


#: Two cases for the smoothing modifiers, with the text model's module-name prefix their mappings use.
SMOOTHED = {"load_traceable:LlamaForCausalLM": "", "llava": r"language_model\..*"}


@pytest.mark.parametrize("case", list(SMOOTHED))
def test_smoothquant_then_gptq_equals_llmcompressors_own_run(case, tmp_path):
    """SmoothQuant (activation statistics per layer, then rescaled norms and Linears) followed by GPTQ
    W8A8: the sequential pipeline calibrates both on the chain; bit-identical to llm-compressor's own."""
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

    model, batches, targets = CASES[case]()
    original = copy.deepcopy(model)
    linears = target_linears(model, targets)
    prefix = "re:.*" + SMOOTHED[case]

    def recipe():
        mappings = [[[f"{prefix}self_attn.{name}_proj" for name in "qkv"], f"{prefix}input_layernorm"],
                    [[f"{prefix}mlp.{name}_proj" for name in ("gate", "up")], f"{prefix}post_attention_layernorm"]]
        return [SmoothQuantModifier(smoothing_strength=0.8, mappings=mappings), gptq("W8A8", linears)]

    norms = {name: module.weight.detach().clone() for name, module in model.named_modules()
             if name.endswith("input_layernorm") and name.rpartition(".input_layernorm")[0] in
             {layer for layer, m in model.named_modules() if type(m).__name__ in targets}}
    assert norms
    run_oneshot(model, batches, targets, recipe(), tmp_path / "tracezoo")
    for name, before in norms.items():
        assert not _equal(model.get_submodule(name).weight, before), f"{name}: SmoothQuant left it as it was"
    for name in linears:
        assert hasattr(model.get_submodule(name), "weight_scale"), f"{name} was not quantized"
    run_oneshot(original, batches, targets, recipe(), tmp_path / "llmc", tracezoo=False)
    weights = original.state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[key], rtol=0, atol=0, msg=lambda m: f"{key}: {m}")
