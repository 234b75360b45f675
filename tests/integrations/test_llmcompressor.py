"""llm-compressor's ``oneshot`` on tracezoo's tracer (``patcher.integrations.llmcompressor``).

Skipped unless ``llmcompressor`` is installed; it lives in a separate environment
(``bash scripts/setup_llmcompressor.sh``, then ``.venv-llmc/bin/python -m pytest
tests/integrations/test_llmcompressor.py``), because llmcompressor 0.14 requires transformers <= 5.17 and the
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

MoE models (``test_moe_*``): for every architecture llm-compressor linearizes, ``load_traceable``'s
class gets the same experts linearized the same way and the same expert Linears quantized as the
plain class on llm-compressor's own path, bit-identically where both calibrate on eager's inputs;
the lookups keyed on a class (the experts registry, Cohere2-MoE's routers) and on a class name
(AWQ, SmoothQuant) find tracezoo's classes.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import inspect
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch

pytest.importorskip("llmcompressor")

from llmcompressor import oneshot  # noqa: E402
from llmcompressor.args import DatasetArguments  # noqa: E402
from llmcompressor.modeling.moe.conversion_mappings import ARCH_TO_IMPORT_PATHS  # noqa: E402
from llmcompressor.modeling.moe.linear_experts import LinearExperts2D  # noqa: E402
from llmcompressor.modifiers.quantization import GPTQModifier  # noqa: E402
from llmcompressor.utils.helpers import DisableQuantization, calibration_forward_context  # noqa: E402

import zoo  # noqa: E402
from patcher import InputMismatchError, UntraceableCodeError, load_traceable  # noqa: E402
from patcher.samples.builders import text_sample  # noqa: E402
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
    from patcher.samples.images.modality import IMAGES
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


def run_oneshot(model, batches, targets, modifier, tmp_path, tracezoo: bool = True, **oneshot_args):
    """``oneshot`` on ``batches``; returns ``tracezoo_tracing()``'s session (its ``paths``), if any."""
    # oneshot re-reads the config from model.config.name_or_path, and wants a processor once a
    # dataset is given (a DataLoader of ready batches needs none).
    model.config.save_pretrained(tmp_path)
    model.config._name_or_path = str(tmp_path)
    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    with tracezoo_tracing() if tracezoo else undo_tracer_patches(model) as session:
        oneshot(model=model, dataset=loader, processor=object(), pipeline="sequential",
                sequential_targets=targets, recipe=modifier, num_calibration_samples=len(batches), **oneshot_args)
    return session


def _is_target(name: str, module, targets) -> bool:
    """A sequential target: by class name, or by a ``re:`` pattern on the module's name."""
    return any(re.fullmatch(target[3:], name) if target.startswith("re:") else type(module).__name__ == target
               for target in targets)


class TargetInputs:
    """Forward pre-hooks on every sequential target: the tensors of each call, in order."""

    def __init__(self, model, targets):
        self.layers = [(name, module) for name, module in model.named_modules() if _is_target(name, module, targets)]
        self.seen: dict[str, list] = {name: [] for name, _ in self.layers}

    @contextlib.contextmanager
    def recording(self):
        def hook(name):
            def record(module, args, kwargs):
                tensors = _tensors(args, kwargs)
                # llm-compressor's tracer calls the targets on meta tensors to learn their output
                # shapes: no calibration call
                if not any(isinstance(leaf, torch.Tensor) and leaf.is_meta for leaf in tensors):
                    self.seen[name].append(tensors)
            return record

        handles = [module.register_forward_pre_hook(hook(name), with_kwargs=True) for name, module in self.layers]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


def _tensors(args, kwargs) -> list:
    return _leaves((args, kwargs))


def _leaves(value) -> list:
    """The values in ``value``, tensors copied: into every mapping too, not only those pytree knows
    (Gemma 4 hands its layers a mapping they fill, so a reference to it would show what later
    layers stored)."""
    if isinstance(value, torch.Tensor):
        return [value.detach().clone()]
    if isinstance(value, Mapping):
        return [leaf for key in value for leaf in _leaves(value[key])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


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


def assert_calibrated_on_eager(model, targets, batches, inputs: TargetInputs, context=contextlib.nullcontext) -> None:
    """What each target was calibrated on equals eager on the quantized model (layers 0..i-1
    quantized), run with quantization disabled as the pipeline runs it, in ``context`` (the one
    the pipeline calibrated in beyond its own)."""
    # The pipeline calls each target on every batch to calibrate it, then again to propagate.
    for name, seen in inputs.seen.items():
        assert len(seen) == 2 * len(batches), f"{name}: {len(seen)} calls for {len(batches)} batches"
    reference = TargetInputs(model, targets)
    # use_cache=False as in the graph: some text models (Idefics3's) read it from a sub-config that
    # calibration_forward_context leaves on, and would hand their layers a cache they never read
    no_cache = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    # on the device the chain ran on, so every kernel is the one the chain's layers ran
    device = model_device(model)
    with reference.recording(), calibration_forward_context(model), DisableQuantization(model), context():
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

    assert_calibrated_on_eager(model, targets, batches, inputs)

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


def _first_difference(calls: list, eager_calls: list, tensors_only: bool = False) -> str | None:
    """Where the inputs of one target's calls first differ from eager's, and by how much;
    ``tensors_only``: a flag given another value (``None`` where eager has ``False``) does not count."""
    for index, (call, eager) in enumerate(zip(calls, eager_calls, strict=True)):
        if len(call) != len(eager):
            return f"batch {index}: {len(call)} inputs, eager {len(eager)}"
        for position, (got, want) in enumerate(zip(call, eager)):
            if isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor) and got.shape == want.shape:
                if not _equal(got, want):
                    off = (got.double() - want.double().to(got.device)).abs().max().item()
                    return f"batch {index}, input {position} off by {off:.2g}"
            elif isinstance(got, torch.Tensor) or isinstance(want, torch.Tensor) or (got != want and not tensors_only):
                return f"batch {index}, input {position}: {_kind(got)} where eager has {_kind(want)}"
    return None


def _kind(value) -> str:
    return f"a tensor {tuple(value.shape)}" if isinstance(value, torch.Tensor) else repr(value)


def _unchanged(model, before) -> None:
    """Every parameter the model had before ``oneshot`` is as it was (the quantization config adds
    scale parameters at initialisation, before calibration: those are new, not changed)."""
    now = dict(model.named_parameters())
    for name, value in before.items():
        assert _equal(now[name], value), f"{name} changed"


def _refused(model, batches, targets, tmp_path, error, names, **oneshot_args):
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    with pytest.raises(error) as caught:
        run_oneshot(model, batches, targets, gptq("W8A8", target_linears(model, targets)), tmp_path, **oneshot_args)
    for name in names:
        assert repr(name) in str(caught.value), caught.value
    assert "calibration batch 1" in str(caught.value), caught.value
    _unchanged(model, before)
    return caught.value


def _calibrated_on_both_paths(model, batches, targets, tmp_path) -> None:
    """``oneshot`` on ``batches`` of two kinds: each on subgraphs traced for its kind, every layer
    calibrated on eager's inputs for every batch."""
    inputs = TargetInputs(model, targets)
    with inputs.recording():
        session = run_oneshot(model, batches, targets, gptq("W8A8", target_linears(model, targets)), tmp_path)
    assert len(session.paths.paths) == 2, session.paths.kinds()
    assert_calibrated_on_eager(model, targets, batches, inputs)


def test_unpadded_and_padded_batches_each_calibrated_on_eager(tmp_path):
    """Traced on a batch without attention_mask (the first batch), a later padded batch ran unmasked
    (logits off by 0.11 on Llama), then was refused; it runs on subgraphs traced with its mask."""
    model, batches, targets = _text_case("LlamaForCausalLM", "LlamaConfig")
    first = {"input_ids": batches[0]["input_ids"]}
    _calibrated_on_both_paths(model, [first, batches[0]], targets, tmp_path)


def test_image_batch_after_a_text_batch_calibrated_on_eager(tmp_path):
    """Traced text-only, a batch with an image ran without it (0.65 on LLaVA), then was refused; it
    runs on subgraphs traced with images."""
    model, batches, targets = _zoo_case("llava")
    text = {key: batches[0][key] for key in ("input_ids", "attention_mask")}
    text["input_ids"] = torch.where(text["input_ids"] == model.config.image_token_id, 1, text["input_ids"])
    _calibrated_on_both_paths(model, [text, batches[0]], targets, tmp_path)


def test_image_layout_without_its_patch_mask_calibrated_on_eager(tmp_path):
    """Idefics3 images without the patch mask the first batch had (eager makes one): refused before,
    each layout on its own subgraphs now."""
    model, batches, targets = _outside_zoo_case("Idefics3ForConditionalGeneration")
    assert "pixel_attention_mask" in batches[0]
    other = {key: value for key, value in batches[1].items() if key != "pixel_attention_mask"}
    _calibrated_on_both_paths(model, [batches[0], other], targets, tmp_path)


def _mixed_rows(case: str, model) -> list[dict]:
    """Dataset rows of ``case``'s model, with an image and text-only alternately, of several lengths,
    each as a processor gives one (a batch of one, as lists): a text row lacks the image columns
    (``datasets`` holds None there)."""
    from patcher.samples import multimodal_sample

    spec = recipe(case) if case in ZOO_CLASSES else None
    rows = []
    for seed in range(6):
        generator = torch.Generator().manual_seed(seed)
        size = dict(batch_size=1, seq_len=4 + seed, generator=generator)
        if seed % 2 == 0:
            row = spec.build_sample(model.config, num_images=1, **size) if spec else \
                multimodal_sample(model.config, model=model, **size)
        else:
            row = spec.build_sample(model.config, multimodal=False, **size) if spec else \
                text_sample(model.config, **size)
            row["input_ids"] = torch.where(row["input_ids"] == model.config.image_token_id, 1, row["input_ids"])
        rows.append({key: value.tolist() for key, value in row.items()})
    return rows


def _collate_one_row(drawn: list):
    """llm-compressor's examples' collator for vision-language rows (one row per batch, the
    processor's batch of one), skipping the columns a row lacks; notes each batch it makes."""
    def collate(features):
        assert len(features) == 1
        batch = {key: torch.tensor(value) for key, value in features[0].items() if value is not None}
        drawn.append(batch)
        return batch
    return collate


MIXED_CASES = ("qwen2_vl", "PaliGemmaForConditionalGeneration")


@pytest.mark.parametrize("case", MIXED_CASES)
def test_dataset_of_image_and_text_rows_calibrated_on_eager_for_both_kinds(case, tmp_path):
    """A ``datasets.Dataset`` of rows with an image and text-only rows, through the dataloader
    ``oneshot`` builds (shuffled, one row per batch). The first batch's kind was traced, and every
    batch of the other kind refused (MissingInputError: 'mm_token_type_ids', 'pixel_values',
    'image_grid_thw'). Each kind runs on subgraphs traced on its first batch, once, with the same
    targets, and every layer is calibrated on every batch of both kinds, on inputs equal to eager's
    (``run_eagerly`` on the quantized model, quantization off, as the pipeline calibrates), exactly."""
    from datasets import Dataset

    from patcher.verify import run_eagerly

    model, _, targets = CASES[case]()
    dataset = Dataset.from_list(_mixed_rows(case, model))
    assert dataset[1]["pixel_values"] is None and dataset[0]["pixel_values"] is not None
    model.config.save_pretrained(tmp_path)
    model.config._name_or_path = str(tmp_path)
    linears = target_linears(model, targets)
    drawn: list[dict] = []
    inputs = TargetInputs(model, targets)
    torch.manual_seed(0)  # the sampler's order
    with inputs.recording(), tracezoo_tracing() as session:
        oneshot(model=model, dataset=dataset, processor=object(), pipeline="sequential", sequential_targets=targets,
                recipe=gptq("W8A8", linears), num_calibration_samples=len(dataset), batch_size=1,
                data_collator=_collate_one_row(drawn))
    # the pipeline drew the first batch to trace on, then every batch for its cache, in calibration order
    batches = drawn[1:]
    assert len(batches) == len(dataset)
    kinds = ["pixel_values" in batch for batch in batches]
    assert sorted(kinds) == [False] * 3 + [True] * 3
    assert len(session.paths.paths) == 2 and sorted("pixel_values" in kind for kind in session.paths.kinds()) == \
        [False, True]
    for name in linears:
        assert hasattr(model.get_submodule(name), "weight_scale"), f"{name} was not quantized"

    reference = TargetInputs(model, targets)
    with reference.recording(), calibration_forward_context(model), DisableQuantization(model):
        for batch in batches:
            run_eagerly(model, _on(batch, model_device(model)))
    for name, seen in inputs.seen.items():
        assert len(seen) == 2 * len(batches), f"{name}: {len(seen)} calls for {len(batches)} batches"
        for index, (chain, eager) in enumerate(zip(seen[:len(batches)], reference.seen[name], strict=True)):
            assert len(chain) == len(eager), f"{name}, batch {index}: {len(chain)} inputs, eager {len(eager)}"
            for position, (got, want) in enumerate(zip(chain, eager)):
                if isinstance(want, torch.Tensor):
                    torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda m: (
                        f"{name}, batch {index} ({'image' if kinds[index] else 'text'}), input {position}: {m}"))
                else:
                    assert got == want, (name, index, position)


def test_batch_mixing_rows_of_two_kinds_is_refused_naming_its_rows(tmp_path):
    """One batch runs on one kind's subgraphs. Rows of two kinds in one batch (batch_size=2 over a
    dataset of image and text-only rows) would lose the inputs of one kind in the collator (the default
    keeps the inputs of the first row: an image row after a text row lost its image) or fail in it:
    refused before any weight changes, naming each such batch's dataset rows and their kinds, and
    what to do."""
    from datasets import Dataset

    from patcher.integrations.llmcompressor import MixedBatchError

    spec = recipe("llava")
    model, _, targets = _zoo_case("llava")
    rows = []
    for seed in range(8):
        row = spec.build_sample(model.config, batch_size=1, seq_len=5, num_images=1,
                                generator=torch.Generator().manual_seed(seed))
        row = {key: value[0].tolist() for key, value in row.items()}  # a row, as the default collator stacks them
        if seed % 2:  # text-only: no image, no image tokens
            row = {"input_ids": [1 if token == model.config.image_token_id else token for token in row["input_ids"]],
                   "attention_mask": row["attention_mask"], "pixel_values": None}
        rows.append(row)
    with_image = {index for index, row in enumerate(rows) if row["pixel_values"] is not None}
    dataset = Dataset.from_list(rows)
    model.config.save_pretrained(tmp_path)
    model.config._name_or_path = str(tmp_path)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}

    def refused(seed: int) -> str:
        torch.manual_seed(seed)  # the sampler's order
        with pytest.raises(MixedBatchError) as caught, tracezoo_tracing():
            oneshot(model=model, dataset=dataset, processor=object(), pipeline="sequential", sequential_targets=targets,
                    recipe=gptq("W8A8", target_linears(model, targets)), num_calibration_samples=len(rows),
                    batch_size=2)
        _unchanged(model, before)
        return str(caught.value)

    # the first batch drawn, which the pipeline traces on, before its cache checks any: rows unknown
    message = refused(1)
    assert message.startswith("the first calibration batch (the pipeline traces the model on it) mixes rows of 2 "
                              "kinds (its row "), message
    # later batches, as the cache takes them: every mixed batch named by its dataset rows
    message = refused(0)
    first = tuple(map(int, re.match(r"calibration batch \d+ \(dataset rows (\d+), (\d+)\) mixes rows of 2 kinds",
                                    message).groups()))
    image, text = sorted(first, key=lambda row: row not in with_image)
    assert image in with_image and text not in with_image, message
    assert (f"(row {image}: 'input_ids', 'attention_mask', 'pixel_values'; row {text}: 'input_ids', "
            "'attention_mask')") in message, message
    assert "batch_size=1, or a DataLoader (oneshot's dataset= takes one) whose batch_sampler batches the rows of each " \
           "kind apart" in message, message
    # the rows of every mixed batch, in pairs: each of both kinds; the batches of one kind went through
    summary = re.search(r"(\d) of 4 calibration batches are refused: dataset rows ([\d, ]+)$", message)
    named = [int(row) for row in summary.group(2).split(", ")]
    pairs = [tuple(named[start:start + 2]) for start in range(0, len(named), 2)]
    assert int(summary.group(1)) == len(pairs) < 4 and pairs[0] == first, message
    assert all(len({row in with_image for row in pair}) == 2 for pair in pairs), message


def test_rows_of_two_kinds_collated_for_another_pipeline_raise_when_read():
    """Inside ``tracezoo_tracing()`` the collator ``oneshot`` makes hands on rows of several kinds
    uncollated, for the sequential pipeline's cache to name them; a pipeline that reads the batch
    without checking it (``model(**batch)``) gets the same error, not a collated batch that lost the
    image of its second row."""
    import llmcompressor.datasets.utils as datasets_utils  # format_calibration_data's lookup, at call time

    from patcher.integrations.llmcompressor import MixedBatchError

    text = {"input_ids": [1, 2, 3], "attention_mask": [1, 1, 1], "pixel_values": None}
    image = {"input_ids": [4, 5, 6], "attention_mask": [1, 1, 1], "pixel_values": [[0.5, 0.25]]}
    arguments = DatasetArguments(batch_size=2)
    assert "pixel_values" not in datasets_utils._make_collate_fn(arguments, None)([dict(text), dict(image)])  # lost
    with tracezoo_tracing():
        batch = datasets_utils._make_collate_fn(arguments, None)([dict(text), dict(image)])
    with pytest.raises(MixedBatchError, match=r"a calibration batch mixes rows of 2 kinds \(its row 0: 'input_ids', "
                                              r"'attention_mask'; its row 1: 'input_ids', 'attention_mask', "
                                              r"'pixel_values'\)"):
        dict(**batch)


def test_vision_blocks_as_targets_on_image_and_text_batches_are_refused(tmp_path):
    """With a vision tower's blocks as sequential targets, the subgraphs of image batches run the
    blocks, those of text-only batches do not: subgraph i of the two kinds would calibrate other
    layers in one step of the pipeline. Refused before any weight changes, naming the targets and
    what to do."""
    from patcher.integrations.llmcompressor import PathMismatchError

    model, batches, _ = _zoo_case("qwen2_vl")
    spec = recipe("qwen2_vl")
    targets = [*spec.vision_targets, *spec.default_targets]
    text = spec.build_sample(model.config, batch_size=1, seq_len=6, multimodal=False)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    with pytest.raises(PathMismatchError) as caught:
        run_oneshot(model, [batches[0], text], targets, gptq("W8A8", target_linears(model, spec.default_targets)),
                    tmp_path)
    _unchanged(model, before)
    message = str(caught.value)
    assert message.startswith("calibration batch 1 (dataset row 1) has inputs 'input_ids', 'attention_mask', another "
                              "kind than the batches before it"), message
    assert "sequential targets 'model.visual.blocks.0', 'model.visual.blocks.1' run for batches with 'input_ids', " \
           "'attention_mask', 'mm_token_type_ids', 'pixel_values', 'image_grid_thw' only" in message, message
    assert "Leave the targets one kind does not run out of sequential_targets" in message, message


def test_tracing_ignore_entry_matching_nothing_is_refused(tmp_path):
    """A ``tracing_ignore`` entry that keeps nothing opaque (a misspelt function name) was accepted
    without a word; it is refused before anything is calibrated, naming the entry and the closest
    real name. llm-compressor's own default entries, which name other models' helpers, still pass."""
    from llmcompressor.args import DatasetArguments

    from patcher import IgnoreMatchError

    model, batches, targets = _text_case("LlamaForCausalLM", "LlamaConfig")
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    ignore = [*DatasetArguments().tracing_ignore, "LlamaRMSNorm", "create_causal_mak"]
    with pytest.raises(IgnoreMatchError, match=r"ignore entry 'create_causal_mak' matches no module class, function "
                                               r"or method of LlamaForCausalLM, so it keeps nothing opaque; did you "
                                               r"mean 'create_causal_mask'\?") as caught:
        run_oneshot(model, batches, targets, gptq("W8A8", target_linears(model, targets)), tmp_path,
                    tracing_ignore=ignore)
    assert caught.value.entries == ["create_causal_mak"]
    _unchanged(model, before)


def test_recipe_ignore_entry_matching_nothing_is_warned_about(tmp_path):
    """A modifier's ``ignore`` entry that matches no module (``lm_headd``) ignored nothing, and
    ``lm_head`` was quantized without a word: a warning names the entry, the closest module and that
    this run quantizes it. An entry that matches is not warned about."""
    model, batches, targets = _text_case("LlamaForCausalLM", "LlamaConfig")
    ignored = "model.layers.0.mlp.down_proj"
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        run_oneshot(model, batches, targets, GPTQModifier(targets="Linear", scheme="W8A8", ignore=["lm_headd", ignored]),
                    tmp_path)
    found = [warning for warning in warned if "ignore entry" in str(warning.message)]
    assert [str(warning.message) for warning in found] == [
        "GPTQModifier's ignore entry 'lm_headd' matches no module of LlamaForCausalLM, so it ignores nothing; did you "
        "mean 'lm_head'? ('lm_head' is quantized by this run). Entries match a whole module name, a 're:' regex from "
        "the start of the name, or a module class name"]
    from patcher.integrations.llmcompressor import RecipeIgnoreWarning

    assert found[0].category is RecipeIgnoreWarning
    assert hasattr(model.lm_head, "weight_scale") and not hasattr(model.get_submodule(ignored), "weight_scale")


def test_plain_class_needing_the_rewrite_is_pointed_at_load_traceable(tmp_path):
    """transformers' own Qwen2-VL inside ``oneshot``, not made traceable: the error names the line of
    the installed modeling file, and its fix is the class ``load_traceable`` makes, or the zoo's
    drop-in, not TZ105's rewrite of the line (which would mean editing the installed transformers)."""
    import transformers

    model, batches, targets = _zoo_case("qwen2_vl")
    plain = transformers.Qwen2VLForConditionalGeneration._from_config(model.config).eval()
    with pytest.raises(UntraceableCodeError) as caught:
        run_oneshot(plain, batches, targets, gptq("W8A8", target_linears(plain, targets)), tmp_path)
    message = str(caught.value)
    assert re.search(r"at transformers/models/qwen2_vl/modeling_qwen2_vl\.py:\d+ in forward\(\)", message), message
    assert ("fix: load the model with load_traceable(Qwen2VLForConditionalGeneration) (from patcher import "
            "load_traceable; load_traceable(Qwen2VLForConditionalGeneration).from_pretrained(path) loads the same "
            "checkpoints) or the zoo's drop-in TraceableQwen2VLForConditionalGeneration (from zoo import "
            "TraceableQwen2VLForConditionalGeneration): both rewrite this line (patcher rule TZ105)") in message
    assert "wrap the statement" not in message


def test_moved_value_none_when_running_is_decided_from_the_sample(tmp_path):
    """``load_traceable``'s Qwen2-Audio with audio: its merge of the audio features branches on a
    traced value (``legacy_processing``), so the moved code runs as one opaque call, and the
    ``labels`` it hands back (given None, set on the other branch only) was a traced value while
    tracing; ``if labels is not None:`` then built a loss, and the trace failed there. The tracer
    now works out from the sample that ``labels`` is None (patcher.trace.none_decisions): oneshot
    calibrates every layer."""
    import transformers

    from patcher.coverage.check import _build
    from patcher.coverage.discover import find_layers, trace_targets
    from patcher.samples.audio.modality import audio_samples
    from patcher.coverage.shrink import shrink_config
    from patcher.models import build_model

    cls = transformers.Qwen2AudioForConditionalGeneration
    config = shrink_config(cls.config_class)
    classes, layer_list = find_layers(build_model(cls, config, device="meta"))
    model = _build(load_traceable(cls, targets=classes), config, seed=0)
    batches = audio_samples(config, model, 0)
    targets = trace_targets(model, classes, layer_list)
    linears = target_linears(model, targets)
    before = {name: module.weight.detach().clone() for name, module in model.named_modules() if name in linears}
    run_oneshot(model, batches, targets, gptq("W8A8", linears), tmp_path)
    changed = [name for name, weight in before.items() if not torch.equal(model.get_submodule(name).weight, weight)]
    assert changed, "no target linear was calibrated"


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


def test_awq_with_loss_mask_equals_llmcompressors_own_run(tmp_path, monkeypatch):
    """AWQ with ``use_loss_mask=True`` reads each batch's ``loss_mask`` from the pipeline's cache; the
    model never takes it. The first batch, which the pipeline traces on, has it too: tracezoo was
    handed it and refused the sample (``SampleInputError``: 'loss_mask', which the forward does not
    name). Traced without it, AWQ searches its scales on the masked tokens only, bit-identically to
    llm-compressor's own run, and the mask changes the result (it was not dropped)."""
    from llmcompressor.modifiers.transform.awq import AWQModifier
    from llmcompressor.pipelines.cache import IntermediatesCache

    # AWQ pins the cached layer inputs in page-locked memory, which needs an accelerator; pinning
    # changes no value, so without one it is left out
    monkeypatch.setattr(IntermediatesCache, "pin_memory", lambda self, *args, **kwargs: None)
    model, batches, targets = _text_case("LlamaForCausalLM", "LlamaConfig")
    for batch in batches:  # the first three tokens of every row are left out of AWQ's loss
        batch["loss_mask"] = torch.ones_like(batch["input_ids"])
        batch["loss_mask"][:, :3] = 0
    theirs, unmasked = copy.deepcopy(model), copy.deepcopy(model)
    linears = target_linears(model, targets)

    def recipe():
        return [AWQModifier(offload_device=None), gptq("W4A16", linears)]

    run_oneshot(model, batches, targets, recipe(), tmp_path / "tracezoo", use_loss_mask=True)
    run_oneshot(theirs, batches, targets, recipe(), tmp_path / "llmc", tracezoo=False, use_loss_mask=True)
    run_oneshot(unmasked, batches, targets, recipe(), tmp_path / "unmasked")
    weights, unmasked_weights = theirs.state_dict(), unmasked.state_dict()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[key], rtol=0, atol=0, msg=lambda m: f"{key}: {m}")
    assert any(not torch.equal(value, unmasked_weights[key]) for key, value in weights.items()), \
        "the loss mask changed nothing: AWQ did not read it"


#: transformers' own class of each case whose traceable class llm-compressor's own tracer cannot
#: trace (``LLMC_TRACER``: "fails"), on the same weights and batches, through both tracers:
#: ``case -> (llm-compressor's own tracer, tracezoo's, what goes wrong)``. ``identical``: it runs,
#: every layer calibrated on eager's inputs, and the weights are bit-identical to tracezoo's on the
#: traceable class; ``wrong``: it runs, and layers are calibrated on other inputs than eager's (the
#: weights differ); ``refused``: the class needs the rewrite (``UntraceableCodeError`` naming
#: ``load_traceable``). The "fails" is about tracezoo's classes only. Measured; strict.
PLAIN_CLASS: dict[str, tuple[str, str, str]] = {
    "qwen2_vl": ("identical", "refused", ""),
    "qwen2_5_vl": ("identical", "refused", ""),
    "Qwen3VLForConditionalGeneration": ("identical", "refused", ""),
    "Glm4vForConditionalGeneration": ("wrong", "refused", "its graph hands layer 0 attention_mask=None where eager "
                                      "hands the causal mask; layer 1 calibrated on inputs 4.4 off"),
    "PaliGemmaForConditionalGeneration": ("wrong", "identical", "its graph hands layer 0 another attention mask than "
                                          "eager's (positions eager masks are attended to); layer 1 calibrated on "
                                          "inputs 0.031 off"),
}
_PLAIN_CELLS = {
    "identical": "traces; weights bit-identical to tracezoo's on the traceable class",
    "wrong": "traces, calibrates wrong: {why}",
    "refused": "does not trace: needs the rewrite (the error names `load_traceable`{zoo})",
}


def plain_class_rows(case: str) -> list[str]:
    """GUIDE.md's rows for ``case`` (the table under "The plain classes"): transformers' own class,
    then the traceable one, each through llm-compressor's own tracer and tracezoo's."""
    traceable = ZOO_CLASSES.get(case)
    name = traceable.removeprefix("Traceable") if traceable else case
    llmc, ours, why = PLAIN_CLASS[case]
    zoo = f" and the zoo's `{traceable}`" if traceable else ""
    cell = {kind: text.format(why=why, zoo=zoo) for kind, text in _PLAIN_CELLS.items()}
    label = f"`{traceable}` (zoo)" if traceable else f"`load_traceable({name})`"
    return [f"| `{name}` (transformers' own) | {cell[llmc]} | {cell[ours]} |",
            f"| {label} | does not trace (1) | traces; every layer calibrated on eager's inputs |"]


def test_guide_table_of_plain_classes_is_the_measured_one():
    """GUIDE.md said llm-compressor's own tracer fails on Qwen2-VL and Qwen2.5-VL; it fails on the
    zoo's classes only. Its table of plain and traceable classes is the one measured
    (``test_plain_class_through_both_tracers``)."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "GUIDE.md").read_text(encoding="utf-8")
    missing = [row for case in PLAIN_CLASS for row in plain_class_rows(case) if row not in guide]
    assert not missing, "GUIDE.md lacks the measured rows:\n" + "\n".join(missing)
    assert all(LLMC_TRACER[case][0] == "fails" for case in PLAIN_CLASS)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(PLAIN_CLASS))
def test_plain_class_through_both_tracers(case, tmp_path):
    """transformers' own class with the traceable class's weights, through llm-compressor's own
    tracer and tracezoo's, against the traceable class through tracezoo (every layer calibrated on
    eager's inputs): as ``PLAIN_CLASS`` says."""
    import transformers

    model, batches, targets = CASES[case]()
    plain = getattr(transformers, type(model).__name__)._from_config(model.config).eval()
    plain.load_state_dict(model.state_dict())
    through_tracezoo = copy.deepcopy(plain)
    linears = target_linears(model, targets)
    ours = TargetInputs(model, targets)
    with ours.recording():
        run_oneshot(model, batches, targets, gptq("W8A8", linears), tmp_path / "traceable")
    assert_calibrated_on_eager(model, targets, batches, ours)
    reference = model.state_dict()

    def check(result, how):
        weights, inputs = result
        differ = [key for key, value in weights.state_dict().items() if not torch.equal(value, reference[key])]
        off = [name for name in ours.seen if _first_difference(inputs.seen[name][:len(batches)],
                                                               ours.seen[name][:len(batches)])]
        if how == "identical":
            assert not differ and not off, (differ, off)
        else:
            assert differ and off, f"{case}: calibrated on eager's inputs now: not wrong any more"

    llmc, ours_how, _ = PLAIN_CLASS[case]
    theirs = TargetInputs(plain, targets)
    with theirs.recording():
        run_oneshot(plain, batches, targets, gptq("W8A8", linears), tmp_path / "llmc", tracezoo=False)
    check((plain, theirs), llmc)
    if ours_how == "refused":
        with pytest.raises(UntraceableCodeError, match=r"fix: load the model with load_traceable\("):
            run_oneshot(through_tracezoo, batches, targets, gptq("W8A8", linears), tmp_path / "plain-tracezoo")
        return
    inputs = TargetInputs(through_tracezoo, targets)
    with inputs.recording():
        run_oneshot(through_tracezoo, batches, targets, gptq("W8A8", linears), tmp_path / "plain-tracezoo")
    check((through_tracezoo, inputs), ours_how)


def test_guide_example_runs(tmp_path, monkeypatch):
    """GUIDE.md's example of the integration, as written (the main environment's doc test skips it)."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "GUIDE.md").read_text(encoding="utf-8")
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


# -- MoE experts ------------------------------------------------------------------------------
#
# ``oneshot`` linearizes fused MoE experts before calibrating (``get_non_linearized_moes``, then
# ``linearize_moe``: one Linear per expert and projection). It finds them by class: Llama 4's and
# GPT-OSS's experts by the class object, in ``LinearExperts2D._registry`` (``modeling/moe/llama4.py``,
# ``gpt_oss.py``), every other by its ``@use_experts_implementation`` decorator. A class that
# missed the registry was not linearized (Llama 4: 0 of 48 expert Linears quantized, no error) or
# linearized by the generic path (GPT-OSS: its interleaved gate/up columns split into halves).

#: Every MoE architecture llm-compressor 0.14.0.1 has a linearization for: its own modules
#: (llama4, gpt_oss) and the generic one for the architectures it lists.
MOE_ARCHITECTURES = sorted(ARCH_TO_IMPORT_PATHS)
#: Run in CI: the two whose experts llm-compressor registers by class object.
MOE_CI = ("llama4", "gpt_oss")
#: Config fields a tiny config needs for experts at all (``shrink_config`` keeps Gemma 4's default:
#: no MoE block).
MOE_CONFIG = {"gemma4": {"text_config": {"enable_moe_block": True, "num_experts": 4, "top_k_experts": 2,
                                         "moe_intermediate_size": 32}}}
#: The class a model type is tested with, where it is not the causal LM: llm-compressor's Llama 4
#: linearization reads ``config.text_config`` (``modeling/moe/llama4.py:27``), which only the
#: multimodal class's config has.
MOE_CLASS = {"llama4": "Llama4ForConditionalGeneration"}
#: Architectures whose layers llm-compressor's own tracer calibrates on inputs other than eager's
#: (measured; the weights then differ from tracezoo's, whose inputs equal eager's): model type -> why.
MOE_LLMC_TRACER_WRONG = {model_type: _MASK_DROPPED.format(text=text, off=off) for model_type, text, off in (
    ("mixtral", "Mixtral", "0.053"), ("phimoe", "PhiMoE", "0.065"), ("qwen3_moe", "Qwen3-MoE", "0.089"))}
MOE_LLMC_TRACER_WRONG["gemma4"] = (
    "Gemma4TextModel.forward makes `shared_kv_states = UserDict()` (modeling_gemma4.py:1686) for its layers to fill "
    "and read; llm-compressor's graph keeps the one made while tracing as a constant, which its tracer's own calls "
    "of the layers (on meta) and every earlier batch filled, so layer 0 gets 9 inputs where eager hands it an empty "
    "dict (8). The tiny config shares no KV, so no layer reads another batch's keys here; tracezoo's chain hands "
    "each batch its own (test_kv_sharing_layers_calibrated_on_their_own_batch)")
#: Architectures whose calibration through tracezoo fails for a reason that is not their experts
#: (measured, llmcompressor 0.14.0.1, transformers 5.17.0): model type -> (exception, why). Strict.
#: None now: Jamba's, NemotronH's and Glm5Next's mixers raised UnboundLocalError (transformers 5.17
#: binds `conv_state` only under `if use_precomputed_states:`) until the hoisting fix that passes such
#: a name as `locals().get(name)` (commit 3497354); they have quantized as llm-compressor's own path since.
MOE_TRACEZOO_FAILS: dict[str, tuple[type[BaseException], str]] = {}
#: Architectures whose layers tracezoo's chain hands other inputs than eager (measured): model type
#: -> why. Strict: the check that each layer was calibrated on eager's inputs must fail as said. None
#: now (Gemma 4 was, before its `shared_kv_states` became each batch's own: GUIDE.md, "Silent wrong results").
MOE_CHAIN_DIFFERS: dict[str, str] = {}
#: The expert Linears linearization makes (``ExpertMLPWithGate`` / ``WithoutGate``).
EXPERT_LINEARS = r"re:.*\.experts\.\d+\.(gate|up|down)_proj$"


def _moe_class(model_type: str):
    import transformers
    from transformers.models.auto import modeling_auto

    if model_type in MOE_CLASS:
        return getattr(transformers, MOE_CLASS[model_type])
    for mapping in (modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
                    modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES):
        if model_type in mapping:
            return getattr(transformers, mapping[model_type])
    raise LookupError(f"no model class for {model_type}")


def _moe_case(model_type: str):
    """The plain transformers model (tiny, random) and ``load_traceable``'s with the same weights,
    their sequential targets and two text batches (left padding in the first)."""
    from patcher.coverage.discover import find_layers, trace_targets
    from patcher.coverage.shrink import shrink_config
    from patcher.samples.sweep import coverage_text_sample
    from patcher.models import build_model, random_model

    cls = _moe_class(model_type)
    config = shrink_config(cls.config_class)
    for field, values in MOE_CONFIG.get(model_type, {}).items():
        for name, value in values.items():
            setattr(getattr(config, field), name, value)
    classes, layer_list = find_layers(build_model(cls, config, device="meta"))
    plain = random_model(cls, config, seed=0)
    traceable = random_model(load_traceable(cls, targets=classes), config, seed=0)
    traceable.load_state_dict(plain.state_dict())
    batches = [coverage_text_sample(config, batch_size=2, seq_len=7, left_padding=2, seed=0),
               coverage_text_sample(config, batch_size=3, seq_len=5, seed=1)]
    return plain, traceable, trace_targets(plain, classes, layer_list), batches


#: Attention projections of the text layers, quantized with the experts: as in a real recipe,
#: GPTQ has modules to quantize whether or not the experts are found, so experts it misses go
#: unnoticed by ``oneshot`` (Llama 4 before the fix: 0 of 48, no error) and only this test says so.
ATTENTION_LINEARS = r"re:^(?!.*vision).*self_attn\.(q|k|v|o)_proj$"


def _expert_gptq() -> GPTQModifier:
    """GPTQ, 4-bit channel-wise weights (the tiny widths, down to 4, fit no group size), on the expert Linears (they exist once ``oneshot`` has
    linearized the experts) and the text layers' attention projections; the tiny vision towers of
    the VL classes never run on text and are left alone."""
    return GPTQModifier(config_groups={"experts": {
        "targets": [EXPERT_LINEARS, ATTENTION_LINEARS],
        "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "channel"}}})


def _quantized(model) -> list[str]:
    return sorted(name for name, module in model.named_modules() if hasattr(module, "weight_scale"))


def _experts(names: list[str]) -> list[str]:
    return [name for name in names if re.fullmatch(EXPERT_LINEARS[3:], name)]


def _linearization(experts) -> tuple:
    """How a linearized experts module was made: its registered class (Llama 4's, GPT-OSS's), or for
    the generic one, made per fused class, its base and the flags it read off the decorator."""
    kind = type(experts)
    if kind.__name__ != "LinearExperts2D":
        return (kind,)
    return (kind.__bases__, kind.is_concatenated, kind.is_transposed, kind.has_bias, kind.has_gate,
            kind._apply_gate.__qualname__)


def _moe_params():
    return [pytest.param(arch, marks=() if arch in MOE_CI else pytest.mark.slow) for arch in MOE_ARCHITECTURES]


@pytest.mark.parametrize("model_type", _moe_params())
def test_moe_experts_quantized_as_by_llmcompressors_own_path(model_type, tmp_path):
    """``load_traceable``'s class through ``tracezoo_tracing()`` and the plain class through
    llm-compressor's own tracer: the same experts linearized the same way and the same expert
    Linears quantized; every layer calibrated on eager's inputs; where llm-compressor's own tracer
    calibrates on eager's inputs too, bit-identical weights and quantization parameters."""
    from llmcompressor.modeling.moe.context import moe_calibration_context

    plain, traceable, targets, batches = _moe_case(model_type)
    if model_type in MOE_TRACEZOO_FAILS:
        with pytest.raises(MOE_TRACEZOO_FAILS[model_type][0]):
            run_oneshot(traceable, batches, targets, _expert_gptq(), tmp_path / "tracezoo")
        return
    ours, theirs = TargetInputs(traceable, targets), TargetInputs(plain, targets)
    with ours.recording():
        run_oneshot(traceable, batches, targets, _expert_gptq(), tmp_path / "tracezoo")
    with theirs.recording():
        run_oneshot(plain, batches, targets, _expert_gptq(), tmp_path / "llmc", tracezoo=False)

    quantized = _quantized(plain)
    assert _experts(quantized), f"{model_type}: llm-compressor's own path quantized no experts: {quantized}"
    assert _experts(_quantized(traceable)) == _experts(quantized), (
        f"{model_type}: tracezoo quantized {len(_experts(_quantized(traceable)))} of the {len(_experts(quantized))} "
        "expert Linears llm-compressor's own path quantizes")
    assert _quantized(traceable) == quantized
    for name, module in plain.named_modules():
        if isinstance(module, LinearExperts2D):
            assert _linearization(traceable.get_submodule(name)) == _linearization(module), \
                f"{name}: linearized another way"

    # oneshot calibrates MoE models with every expert seeing every token (moe_calibrate_all_experts)
    if model_type in MOE_CHAIN_DIFFERS:
        with pytest.raises(AssertionError, match=r"batch 1: \d+ inputs, eager \d+"):
            assert_calibrated_on_eager(traceable, targets, batches, ours, context=moe_calibration_context)
        return
    assert_calibrated_on_eager(traceable, targets, batches, ours, context=moe_calibration_context)
    differences = [f"{name}: {difference}" for name in ours.seen if (difference := _first_difference(
        theirs.seen[name][:len(batches)], ours.seen[name][:len(batches)], tensors_only=True))]
    if model_type in MOE_LLMC_TRACER_WRONG:
        assert differences, f"{model_type}: llm-compressor's own path calibrates on eager's inputs now"
        return
    assert not differences, (f"{model_type}: llm-compressor's own tracer calibrated on other inputs than eager's "
                             "(add it to MOE_LLMC_TRACER_WRONG with this): " + "; ".join(differences))
    weights = traceable.state_dict()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


def _kv_sharing_gemma4():
    """A tiny Gemma 4 whose last two layers read the keys and values the first two store, and three
    batches of one shape (another batch's keys fit, so only the numbers can tell)."""
    import transformers
    from patcher.coverage.shrink import shrink_config
    from patcher.samples.sweep import coverage_text_sample
    from patcher.models import random_model

    config = shrink_config(transformers.Gemma4TextConfig)
    config.num_hidden_layers = 4
    config.layer_types = ["sliding_attention", "full_attention"] * 2
    config.num_kv_shared_layers = 2
    model = random_model(load_traceable(transformers.Gemma4ForCausalLM), config, seed=0)
    batches = [coverage_text_sample(config, batch_size=2, seq_len=7, seed=seed) for seed in range(3)]
    return model, batches, ["Gemma4TextDecoderLayer"]


def test_kv_sharing_layers_calibrated_on_their_own_batch(tmp_path):
    """Gemma 4's layers share keys and values through `shared_kv_states`, a UserDict its forward
    makes: the pipeline runs each layer over every batch before the next layer, so a dict kept as a
    constant of the graph handed a sharing layer the keys of the last batch (GUIDE.md, "Silent wrong
    results"). Each layer, the sharing ones included, is calibrated on its own batch's inputs, and
    the cache offloads the dict's tensors like any other intermediate (no warning that it cannot)."""
    model, batches, targets = _kv_sharing_gemma4()
    attention = [layer.self_attn for layer in model.model.layers]
    assert [module.is_kv_shared_layer for module in attention] == [False, False, True, True]
    assert all(module.store_full_length_kv for module in attention[:2])
    inputs = TargetInputs(model, targets)
    with inputs.recording(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_oneshot(model, batches, targets, gptq("W4A16", target_linears(model, targets)), tmp_path)
    assert not [str(warning.message) for warning in caught if "Offloading not implemented" in str(warning.message)]
    assert_calibrated_on_eager(model, targets, batches, inputs)


def test_llama4_experts_found_without_tracezoo_tracing():
    """llm-compressor's own look-up, outside ``tracezoo_tracing()`` (``linearize_moe`` called by
    hand, ``load_quantizable_moe``'s fallback): the experts of ``load_traceable``'s Llama 4 are
    transformers' ``Llama4TextExperts``, the very class it registered."""
    from llmcompressor.modeling.moe.linearize import get_non_linearized_moes, linearize_moe

    plain, traceable, _, _ = _moe_case("llama4")
    found = [name for name, _ in get_non_linearized_moes(plain)]
    assert found and [name for name, _ in get_non_linearized_moes(traceable)] == found
    linearize_moe(plain)
    linearize_moe(traceable)
    for name in found:
        assert type(traceable.get_submodule(name)) is type(plain.get_submodule(name))
    weights = traceable.state_dict()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


def test_rewritten_experts_found_only_inside_tracezoo_tracing():
    """GPT-OSS's experts loop is rewritten, so its class is a copy: inside ``tracezoo_tracing()``
    the registry finds it under the class it was made from, and is itself again on exit."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
    from llmcompressor.modeling.moe.gpt_oss import GptOssLinearExperts

    _, traceable, _, _ = _moe_case("gpt_oss")
    copy = type(traceable.model.layers[0].mlp.experts)
    assert copy is not GptOssExperts and copy.__name__ == "GptOssExperts"
    before = LinearExperts2D.__dict__["get_registration"]
    assert LinearExperts2D.get_registration(copy) is None
    with tracezoo_tracing():
        assert LinearExperts2D.get_registration(copy) is GptOssLinearExperts
        assert LinearExperts2D.get_registration(GptOssExperts) is GptOssLinearExperts
        assert LinearExperts2D.get_registration(torch.nn.Linear) is None
    assert LinearExperts2D.__dict__["get_registration"] is before
    assert LinearExperts2D.get_registration(copy) is None


def test_cohere2_moe_spinquant_preparation_finds_the_routers():
    """``prepare_cohere2_moe_for_spinquant`` finds the routers by ``isinstance(router,
    Cohere2MoeTopKRouter)`` (``modeling/moe/cohere2_moe.py:130``): ``load_traceable``'s routers are
    that class, so both models are prepared alike."""
    from llmcompressor.modeling.moe.cohere2_moe import LinearRouter, prepare_cohere2_moe_for_spinquant

    import transformers
    from patcher.coverage.shrink import shrink_config
    from patcher.models import random_model

    config = shrink_config(transformers.Cohere2MoeConfig)
    config.rms_norm_eps = 1e-6  # SpinQuant needs RMSNorm, not the default LayerNorm (the function asserts it)
    plain = random_model(transformers.Cohere2MoeForCausalLM, config, seed=0)
    traceable = random_model(load_traceable(transformers.Cohere2MoeForCausalLM), config, seed=0)
    traceable.load_state_dict(plain.state_dict())
    prepare_cohere2_moe_for_spinquant(plain)
    prepare_cohere2_moe_for_spinquant(traceable)
    routers = [name for name, module in plain.named_modules() if isinstance(module, LinearRouter)]
    assert routers and [name for name, module in traceable.named_modules() if isinstance(module, LinearRouter)] == routers
    weights = traceable.state_dict()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


def _smoothing_recipe(kind: str) -> list:
    """AWQ (scales searched per layer against the quantization that follows) or SmoothQuant, each
    followed by GPTQ on the experts and attention, with the mappings llm-compressor keeps for the
    model's class name."""
    if kind == "AWQ":
        from llmcompressor.modifiers.transform.awq import AWQModifier

        # no offloading of the cached layer inputs: pinning them needs an accelerator
        return [AWQModifier(offload_device=None), _expert_gptq()]
    from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier

    return [SmoothQuantModifier(smoothing_strength=0.8), _expert_gptq()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["AWQ", "SmoothQuant"])
def test_moe_smoothing_mappings_found_by_class_name(kind, tmp_path, monkeypatch):
    """AWQ's and SmoothQuant's mappings are kept per class *name* (``AWQ_MAPPING_REGISTRY``,
    ``MAPPINGS_REGISTRY``; ``Qwen2MoeForCausalLM``'s AWQ mapping balances the router and every
    expert's gate/up projections against ``post_attention_layernorm``, its SmoothQuant mapping the
    attention against ``input_layernorm``): ``load_traceable``'s class, of the same name, gets them
    and is smoothed and quantized bit-identically to the plain class on llm-compressor's own path."""
    from llmcompressor.modifiers.transform.awq.mappings import AWQ_MAPPING_REGISTRY
    from llmcompressor.modifiers.transform.smoothquant.utils import MAPPINGS_REGISTRY

    from llmcompressor.pipelines.cache import IntermediatesCache

    # AWQ pins the cached layer inputs in page-locked memory for faster copies to an accelerator,
    # which needs one; pinning changes no value, so on a machine without one it is left out
    monkeypatch.setattr(IntermediatesCache, "pin_memory", lambda self, *args, **kwargs: None)
    plain, traceable, targets, batches = _moe_case("qwen2_moe")
    registry = AWQ_MAPPING_REGISTRY if kind == "AWQ" else MAPPINGS_REGISTRY
    assert type(traceable).__name__ in registry and type(traceable) is not type(plain)
    smoothed = "post_attention_layernorm" if kind == "AWQ" else "input_layernorm"
    norms = {name: module.weight.detach().clone() for name, module in plain.named_modules()
             if name.endswith(smoothed)}
    run_oneshot(traceable, batches, targets, _smoothing_recipe(kind), tmp_path / "tracezoo")
    run_oneshot(plain, batches, targets, _smoothing_recipe(kind), tmp_path / "llmc", tracezoo=False)
    # the mapping found by the class name smoothed its norms (AWQ may find no scaling best for one)
    changed = [name for name, before in norms.items() if not _equal(traceable.get_submodule(name).weight, before)]
    assert changed, f"{kind} smoothed none of {list(norms)}"
    assert _experts(_quantized(traceable)) == _experts(_quantized(plain)) != []
    weights = traceable.state_dict()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


def test_an_experts_registry_of_another_shape_is_refused(monkeypatch):
    """A release whose registry lookup is not the classmethod this extends: an error naming it on
    entry, not copies silently linearized the generic way; the pipeline is left as it was."""
    from patcher.integrations.llmcompressor import IntegrationError, PIPELINE_MODULE

    pipeline = importlib.import_module(PIPELINE_MODULE)
    before = pipeline.trace_subgraphs
    monkeypatch.setattr(LinearExperts2D, "get_registration", staticmethod(lambda key, default=None: default))
    with pytest.raises(IntegrationError, match=r"LinearExperts2D\.get_registration is not the classmethod"):
        with tracezoo_tracing():
            pass
    assert pipeline.trace_subgraphs is before


# --- Distributed oneshot: torchrun ranks on the CPU (gloo) -------------------------------------------------------------
#
# Each run is tests/integrations/llmcompressor_ranks.py in its own processes: `torchrun --standalone --nproc_per_node 2` (a free
# port, so a run beside another cannot collide), or plain python for the single-process run it is held to. The
# model is a tiny checkpoint written with save_pretrained and loaded by every rank, in memory or through
# compressed-tensors' load_offloaded_model(device_map="auto_offload") with the weights on disk.

RANKS_SCRIPT = Path(__file__).with_name("llmcompressor_ranks.py")
#: Seconds one run of the ranks may take before it counts as hung (a rank waiting for another that left).
RANKS_TIMEOUT = 300


def _llama_checkpoint(folder: Path) -> dict:
    """A tiny LlamaForCausalLM (3 layers) and six text batches: 0-3 with an attention mask (0 and 2
    left-padded), 4 and 5 without one."""
    model, _, targets = _text_case("LlamaForCausalLM", "LlamaConfig", plain=True)
    model.save_pretrained(folder)
    generator = torch.Generator().manual_seed(0)
    batches = []
    for size, length, padding in ((2, 7, 2), (3, 5, 0), (2, 6, 1), (1, 8, 0), (2, 5, 0), (1, 6, 0)):
        batch = {"input_ids": torch.randint(0, 64, (size, length), generator=generator)}
        if len(batches) < 4:
            batch["attention_mask"] = torch.ones(size, length, dtype=torch.long)
            batch["attention_mask"][0, :padding] = 0
        batches.append(batch)
    torch.save(batches, folder / "batches.pt")
    return {"checkpoint": str(folder), "model_class": "transformers:LlamaForCausalLM",
            "batches": str(folder / "batches.pt"), "recipe_targets": "re:.*_proj", "sequential_targets": targets}


def _qwen2_vl_checkpoint(folder: Path) -> dict:
    """The zoo's tiny Qwen2-VL (2 text layers, a vision tower), four batches with images, of two
    layouts (one or two images a row, another size, left padding), and two text-only batches."""
    spec = recipe("qwen2_vl")
    model, _, targets = _zoo_case("qwen2_vl")
    model.save_pretrained(folder)
    batches = [spec.build_sample(model.config, batch_size=size, seq_len=length, num_images=images,
                                 left_padding=padding, generator=torch.Generator().manual_seed(seed))
               for seed, (size, length, images, padding) in enumerate(((2, 5, 1, 1), (1, 9, 2, 0), (1, 6, 1, 0),
                                                                       (2, 7, 1, 0)))]
    for seed, (size, length) in enumerate(((2, 6), (1, 8)), start=4):  # 4 and 5: text-only, no image tokens
        text = spec.build_sample(model.config, multimodal=False, batch_size=size, seq_len=length,
                                 generator=torch.Generator().manual_seed(seed))
        text["input_ids"] = torch.where(text["input_ids"] == model.config.image_token_id, 1, text["input_ids"])
        batches.append(text)
    torch.save(batches, folder / "batches.pt")
    return {"checkpoint": str(folder), "model_class": f"zoo:{ZOO_CLASSES['qwen2_vl']}",
            "batches": str(folder / "batches.pt"), "recipe_targets": "re:.*language_model.*_proj",
            "sequential_targets": targets}


RANK_CASES = {"llama": _llama_checkpoint, "qwen2_vl": _qwen2_vl_checkpoint}


@pytest.fixture(scope="module")
def rank_inputs(tmp_path_factory):
    """``case -> (spec, single-process weights)``: each checkpoint written and calibrated in one
    process once, for every test of the module that needs it."""
    specs: dict = {}
    made: dict = {}

    def inputs(case: str, single: bool = True):
        """``single=False``: the spec only (None for the weights), for a test that compares nothing."""
        if case not in specs:
            folder = tmp_path_factory.mktemp(case)
            specs[case] = folder, {**RANK_CASES[case](folder / "checkpoint"), "rank_batches": [[0], [1]]}
        folder, spec = specs[case]
        if not single:
            return spec, made.get(case)
        if case not in made:
            reports = run_ranks(spec, folder / "single", ranks=None)
            assert "error" not in reports[0], reports[0].get("traceback")
            made[case] = torch.load(folder / "single" / "weights.pt")
        return spec, made[case]

    return inputs


def run_ranks(spec: dict, out: Path, ranks: int | None = 2) -> list[dict]:
    """Run tests/integrations/llmcompressor_ranks.py on ``ranks`` torchrun ranks (None: one plain process);
    every rank's report, by rank."""
    import json
    import subprocess
    import sys

    from child_env import child_env

    out.mkdir(parents=True)
    spec = {**spec, "out": str(out), "offload_folder": str(out / "offload")}
    (out / "spec.json").write_text(json.dumps(spec))
    launcher = [] if ranks is None else ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    done = subprocess.run([sys.executable, *launcher, str(RANKS_SCRIPT), str(out / "spec.json")], env=child_env(),
                          capture_output=True, text=True, timeout=RANKS_TIMEOUT)
    reports = sorted(out.glob("report-*.json"))
    assert done.returncode == 0 and len(reports) == (ranks or 1), \
        f"exit status {done.returncode}, {len(reports)} reports:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return [json.loads(report.read_text()) for report in reports]


def _batch_fingerprint(batch: dict) -> str:
    from llmcompressor_ranks import _fingerprint

    return _fingerprint(batch)


@pytest.mark.parametrize("case, load", [
    pytest.param("llama", "memory", id="llama-memory", marks=pytest.mark.slow),
    pytest.param("llama", "offload", id="llama-offload"),
    pytest.param("qwen2_vl", "memory", id="qwen2_vl-memory", marks=pytest.mark.slow),
    pytest.param("qwen2_vl", "offload", id="qwen2_vl-offload", marks=pytest.mark.slow),
])
def test_two_ranks_quantize_as_one_process(case, load, rank_inputs, tmp_path):
    """GPTQ W8A8 on two ranks, one batch each, equals one process on the two: every weight, scale
    and zero point bit-identical. One batch a rank, so that the Hessians are the same sums: one
    process adds the batches' contributions one after another, the ranks each sum their own and the
    reduction adds those, which with more batches a rank rounds differently in the last bits (and
    may move a weight by one quantization step; GUIDE.md, "Distributed oneshot").

    Rank 1 writes its quantized weights half a second late, as a slower rank would: each rank then
    runs the layer again to hand its outputs on, reading the other rank's modules, and without
    waiting for them it read weights not yet quantized (the next layer calibrated on other inputs,
    and rank 0 saved a last layer with rank 1's uninitialized scales). With the weights on disk,
    a rank's copy of a module another rank quantized, kept from the calibration pass, was stale
    (one weight of the Qwen2-VL's last layer off by a quantization step). Every rank traces on rank
    0's first batch, not its own, and reads no weight while tracing (the disk-offloaded weights stay
    on disk)."""
    spec, single = rank_inputs(case)
    reports = run_ranks({**spec, "load": load, "slow_rank": 1, "slow_seconds": 0.5}, tmp_path / "ranks")
    batches = torch.load(spec["batches"])
    for report in reports:
        assert "error" not in report, report["traceback"]
        assert report["traced_on"] == [_batch_fingerprint(batches[spec["rank_batches"][0][0]])], report["rank"]
        assert report["onloads_while_tracing"] == {}, report["rank"]
        if load == "offload":
            assert report["disk_offloaded_parameters"] > 0, "nothing was offloaded to disk"
    weights = torch.load(tmp_path / "ranks" / "weights.pt")
    assert weights.keys() == single.keys()
    for key, value in single.items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize("rank_1", [
    pytest.param([3, 2], id="first-batch-of-rank-1"),
    pytest.param([2, 3], id="second-batch-of-rank-1", marks=pytest.mark.slow),
])
def test_a_batch_one_rank_refuses_stops_every_rank(rank_1, rank_inputs, tmp_path):
    """Rank 1's batch 3 with logits_to_keep=2, where the graph was traced (on rank 0's first batch,
    of the same kind: a mask) with logits_to_keep=1, a constant of the trace: refused on both ranks,
    before any weight changes,
    and both errors name rank 1 and the batch. A rank that refused alone left the other waiting in
    the first reduction of a layer until the process group timed out."""
    spec, _ = rank_inputs("llama", single=False)
    batches = [{**batch, "logits_to_keep": 2 if index == 3 else 1} for index, batch in
               enumerate(torch.load(spec["batches"]))]
    torch.save(batches, tmp_path / "batches.pt")
    reports = run_ranks({**spec, "batches": str(tmp_path / "batches.pt"), "rank_batches": [[0, 1], rank_1]},
                        tmp_path / "ranks")
    refused = rank_1.index(3)
    for report in reports:
        assert report.get("error_type") == "InputMismatchError", report.get("traceback", report)
        assert f"rank 1 of 2, calibration batch {refused} (dataset row {refused}): logits_to_keep is 2, but the " \
               "graph was traced with logits_to_keep=1" in report["error"], report["error"]
        assert report["unchanged"], f"rank {report['rank']} changed weights before refusing"
    assert "rank 1 of 2 refused calibration batches, so no rank calibrates (this rank's batches fit: rank 0)" \
        in reports[0]["error"]


@pytest.mark.slow
def test_a_dataset_split_across_ranks_calibrates_each_ranks_rows(rank_inputs, tmp_path):
    """The same datasets.Dataset on both ranks: llm-compressor splits it, row 0 for rank 0 and row 1
    for rank 1, and the quantized model equals one process's on both rows. llm-compressor 0.14.0.1
    built each rank's sampler on its share but read the whole dataset with it, so both ranks
    calibrated on row 0 (with 8 rows: rows 0-3, and 4-7 on none) and the weights differed. Two rows,
    one a rank, for the reason of test_two_ranks_quantize_as_one_process."""
    from datasets import Dataset

    spec, _ = rank_inputs("llama", single=False)
    generator = torch.Generator().manual_seed(3)
    lengths = [7, 5]  # each row its own batch (llm-compressor's batch size 1)
    rows = [torch.randint(0, 64, (length,), generator=generator).tolist() for length in lengths]
    Dataset.from_dict({"input_ids": rows, "attention_mask": [[1] * len(row) for row in rows]}).save_to_disk(
        tmp_path / "rows")
    spec = {**spec, "dataset": str(tmp_path / "rows")}
    single = run_ranks(spec, tmp_path / "single", ranks=None)
    assert "error" not in single[0], single[0]["traceback"]
    for report in run_ranks(spec, tmp_path / "ranks"):
        assert "error" not in report, report["traceback"]
    one, two = (torch.load(tmp_path / run / "weights.pt") for run in ("single", "ranks"))
    for key, value in one.items():
        torch.testing.assert_close(two[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


@pytest.mark.slow
def test_ranks_tracing_other_graphs_are_refused(rank_inputs, tmp_path):
    """Rank 1 given another sequential_targets_per_subgraph than rank 0 traces another partition
    of the same model: both ranks raise RankMismatchError naming the difference and the fix, where
    they would have reduced the Hessians of different modules (or waited for each other forever)."""
    spec, _ = rank_inputs("llama", single=False)
    spec = {**spec, "oneshot_args_by_rank": {"1": {"sequential_targets_per_subgraph": 2}}}
    for report in run_ranks(spec, tmp_path / "ranks"):
        assert report.get("error_type") == "RankMismatchError", report.get("traceback", report)
        assert "rank 1 of 2 traced LlamaForCausalLM into another graph than rank 0 (3 subgraphs, rank 0 4; " \
               "subgraph 0 differs)" in report["error"]
        assert report["unchanged"]


@pytest.mark.slow
def test_a_rank_of_text_only_batches_calibrates_as_one_process(rank_inputs, tmp_path):
    """Batches of two kinds split so that rank 0 has an image batch and rank 1 a text-only one: each
    rank traces the paths of its own batches' kinds (rank 1 never traces the image path, and its
    subgraph 0 calls no vision module), the modifiers are handed the same modules on both ranks, and
    the language model's quantized weights equal one process's on both batches, bit for bit."""
    spec, _ = rank_inputs("qwen2_vl", single=False)
    spec = {**spec, "rank_batches": [[0], [4]]}
    single = run_ranks(spec, tmp_path / "single", ranks=None)
    assert "error" not in single[0], single[0]["traceback"]
    assert single[0]["path_kinds"] == 2, single[0]
    reports = run_ranks(spec, tmp_path / "ranks")
    for report in reports:
        assert "error" not in report, report["traceback"]
    # rank 0: its image batch's path; rank 1: that one too (traced on rank 0's first batch), and its text path
    assert [report["path_kinds"] for report in reports] == [1, 2]
    one, two = (torch.load(tmp_path / run / "weights.pt") for run in ("single", "ranks"))
    assert one.keys() == two.keys()
    for key, value in one.items():
        torch.testing.assert_close(two[key], value, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")


def test_vision_modules_calibrated_on_one_rank_only_are_refused(rank_inputs, tmp_path):
    """The same split, with the vision tower's linears in the recipe: they run for rank 0's image
    batch only, and rank 1, with no Hessian of them, would reduce other modules' Hessians with rank
    0's (or both wait forever). Both ranks raise RankMismatchError naming a vision module, rank 1 and
    the fix, before any weight changes."""
    spec, _ = rank_inputs("qwen2_vl", single=False)
    spec = {**spec, "rank_batches": [[0], [4]], "recipe_targets": "Linear", "recipe_ignore": ["lm_head"]}
    reports = run_ranks(spec, tmp_path / "ranks")
    for report in reports:
        assert report.get("error_type") == "RankMismatchError", report.get("traceback", report)
        assert "subgraph 0 calls" in report["error"] and "visual" in report["error"], report["error"]
        assert "on rank(s) 0 of 2, but none of rank 1's batches runs them" in report["error"], report["error"]
        assert "Fix: give every rank batches of every kind" in report["error"]
        assert report["unchanged"], f"rank {report['rank']} changed weights before refusing"


@pytest.mark.slow
def test_a_path_one_rank_refuses_stops_every_rank(rank_inputs, tmp_path):
    """With the vision tower's blocks as sequential targets, rank 1's text-only batch needs a path
    of its own that runs other targets than rank 0's image path (PathMismatchError, raised on rank 1
    only as it traces that path): both ranks raise it, naming rank 1's batch, before any weight
    changes. Raised on rank 1 alone, rank 0 waited for it until the process group timed out."""
    spec, _ = rank_inputs("qwen2_vl", single=False)
    targets = [*recipe("qwen2_vl").vision_targets, *spec["sequential_targets"]]
    reports = run_ranks({**spec, "rank_batches": [[0], [4]], "sequential_targets": targets}, tmp_path / "ranks")
    for report in reports:
        assert report.get("error_type") == "PathMismatchError", report.get("traceback", report)
        assert "rank 1 of 2, calibration batch 0 (dataset row 0) has inputs 'input_ids', 'attention_mask', another " \
               "kind than the batches before it" in report["error"], report["error"]
        assert report["unchanged"], f"rank {report['rank']} changed weights before refusing"
    assert "rank 1 of 2 refused calibration batches, so no rank calibrates (this rank's batches fit: rank 0)" \
        in reports[0]["error"]


def test_guide_distributed_example_runs(tmp_path):
    """GUIDE.md's torchrun script, as written, on two gloo ranks (the main environment's doc test
    skips it): it quantizes and saves a compressed checkpoint."""
    import json
    import subprocess
    import sys

    from child_env import child_env

    guide = (Path(__file__).resolve().parents[2] / "GUIDE.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    script = next(block for block in blocks if block.startswith("# quantize_ranks.py"))
    (tmp_path / "quantize_ranks.py").write_text(script)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "quantize_ranks.py"], cwd=tmp_path, env=child_env(), capture_output=True, text=True,
                          timeout=RANKS_TIMEOUT)
    assert done.returncode == 0, done.stderr[-6000:]
    config = json.loads((tmp_path / "tiny-llama-W8A8" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
