"""``patcher plan``: the bytes predicted from meta shapes equal the bytes of the real run.

Tiny models run the chain on CPU for real; each subgraph's inputs, outputs and the weights it
reads (recorded with a TorchFunctionMode, independently of the plan's module list) are
measured and must equal the plan byte for byte.
"""

import copy
import json
import math
import weakref

import pytest
import torch
import transformers
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from patcher import trace_subgraphs
from patcher.cli import main
from patcher.plan import plan_memory
from patcher.plan.memory import tensor_bytes
from tests.tiny_models import decoder_layer, tiny_model


class ReadWeights(TorchFunctionMode):
    """Records which of the model's parameters and buffers the code reads."""

    def __init__(self, model):
        super().__init__()
        self.weights = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
        self.read = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        for value in tree_flatten((args, kwargs or {}))[0]:
            if isinstance(value, torch.Tensor) and id(value) in self.weights:
                self.read[id(value)] = value
        return func(*args, **(kwargs or {}))


def measure(model, subgraphs, sample):
    """Per subgraph: (input bytes, output bytes, parameters read) of a real CPU run."""
    intermediates, measured = dict(sample), []
    with torch.no_grad():
        for subgraph in subgraphs:
            step = {name: intermediates[name] for name in subgraph.input_names if name in intermediates}
            with ReadWeights(model) as mode:
                outputs = subgraph._run(model, step)  # no run-time checks: they read weights too
            weights = {i: t for i, t in mode.read.items() if isinstance(t, torch.nn.Parameter)}
            measured.append((tensor_bytes(list(step.values())), tensor_bytes(list(outputs.values())), weights))
            for name in subgraph.consumed_names:
                intermediates.pop(name, None)
            intermediates.update(outputs)
    return measured


def check_exact(model, targets, sample, samples, ignore=None):
    subgraphs = trace_subgraphs(model, sample, targets, ignore)
    meta_model = copy.deepcopy(model).to("meta")
    meta_model.tie_weights()  # moving to meta makes new Parameters, one per module
    plan = plan_memory(meta_model, subgraphs, sample, samples=samples, algorithm="gptq")
    batches = math.ceil(samples / next(iter(sample.values())).shape[0])
    assert plan.batches == batches
    for predicted, (inputs, outputs, weights) in zip(plan.subgraphs, measure(model, subgraphs, sample), strict=True):
        assert (predicted.input_bytes_per_batch, predicted.output_bytes_per_batch) == (inputs, outputs)
        assert (predicted.input_bytes, predicted.output_bytes) == (inputs * batches, outputs * batches)
        # parameters: exactly those the real run reads; buffers: every buffer of the modules it calls
        # (what offloading moves to the device), a superset of those read (rotary original_inv_freq)
        read = sum(t.numel() * t.element_size() for t in weights.values())
        assert predicted.parameter_total - predicted.buffer_bytes == read, predicted.index
    return plan


@pytest.mark.parametrize("model_name", ["LlamaForCausalLM", "Qwen2ForCausalLM"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plan_bytes_equal_a_real_run(model_name, dtype):
    model = tiny_model(model_name, dtype=dtype)
    sample = {"input_ids": torch.randint(3, 96, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    plan = check_exact(model, [decoder_layer(model_name)], sample, samples=5)
    assert plan.batches == 3
    assert str(dtype).removeprefix("torch.") in plan.parameter_bytes
    # every tensor of the model, once
    tensors = {id(t): t for t in list(model.parameters()) + list(model.buffers())}.values()
    assert sum(plan.parameter_bytes.values()) == sum(t.numel() * t.element_size() for t in tensors)


def test_tied_weights_count_once_in_the_total():
    model = tiny_model("LlamaForCausalLM", tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    # with an attention mask, as plan_model's samples (without one, the meta run builds a causal
    # mask that eager skips: b x s x s bytes too many)
    sample = {"input_ids": torch.randint(3, 96, (1, 4)), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    plan = check_exact(model, ["LlamaDecoderLayer"], sample, samples=1)
    embedding = 96 * 32 * 4
    assert plan.subgraphs[0].parameter_total >= embedding and plan.subgraphs[-1].parameter_total >= embedding
    tensors = {id(t): t for t in list(model.parameters()) + list(model.buffers())}.values()
    assert sum(plan.parameter_bytes.values()) == sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("config_name, model_name", [
    ("MllamaConfig", "TraceableMllamaForConditionalGeneration"),
    ("Qwen2VLConfig", "TraceableQwen2VLForConditionalGeneration"),  # the vision tower reads the image grid
])
def test_plan_bytes_equal_a_real_run_with_an_image(config_name, model_name):
    import zoo
    from patcher.models.attempt import default_targets, model_tracing_defaults
    from patcher.coverage.shrink import shrink_config
    from patcher.samples import sample_input
    from patcher.trace import DEFAULT_IGNORE

    config = shrink_config(getattr(transformers, config_name))
    torch.manual_seed(0)
    model = getattr(zoo, model_name)(config).eval()
    sample = sample_input(config, multimodal=True)
    ignore = list(DEFAULT_IGNORE) + list(model_tracing_defaults(model).ignore)
    check_exact(model, default_targets(model), sample, samples=3, ignore=ignore)


def test_gptq_hessians_are_in_features_squared_fp32():
    model = tiny_model("LlamaForCausalLM")
    sample = {"input_ids": torch.randint(3, 96, (1, 4))}
    subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"])
    plan = plan_memory(model.to("meta"), subgraphs, sample, algorithm="gptq")
    # q, k, v, o (in 32, 32, 32, 32) and gate, up (32), down (48) per layer; the head has no target
    assert [s.hessian_bytes for s in plan.subgraphs] == [(6 * 32**2 + 48**2) * 4] * 3 + [0]
    assert plan.peak_gpu_bytes == max(s.parameter_total + s.hessian_bytes + s.intermediate_peak_bytes
                                      for s in plan.subgraphs)
    none = plan_memory(model, subgraphs, sample)
    assert all(s.hessian_bytes == 0 for s in none.subgraphs)


def test_cli_plan_json_and_table(capsys):
    assert main(["plan", "LlamaForCausalLM", "Meta-Llama-3-8B", "--seq-len", "2048", "--samples", "512",
                 "--algorithm", "gptq", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["subgraphs"]) == 33 and data["batches"] == 512
    # a decoder layer's input: hidden states + rotary cos/sin (bf16), position ids (int64)
    assert data["subgraphs"][1]["input_bytes_per_batch"] == 2048 * (4096 + 2 * 128) * 2 + 2048 * 8
    # 7 Linears per layer; hidden 4096 (q, k, v, gate, up) and o 4096, down 14336
    assert data["subgraphs"][1]["hessian_bytes"] == (6 * 4096**2 + 14336**2) * 4
    assert main(["plan", "LlamaForCausalLM", "Meta-Llama-3-8B", "--seq-len", "64"]) == 0
    assert "peak GPU (one subgraph on the device, the rest offloaded)" in capsys.readouterr().out


def test_cli_plan_bad_arguments(capsys):
    assert main(["plan", "LlamaForCausalLM", "Meta-Llama-3-8B", "--samples", "0"]) == 2
    assert main(["plan", "LlamaForCausalLM", "no-such-config-xyz"]) == 2


def test_gptq_hessians_count_every_fused_expert():
    # DeepSeek-V3 tiny: 4 routed experts, gate_up (4, 2x16, 32) and down (4, 32, 16), shared expert
    # and dense MLP as nn.Linear; MLA projections as nn.Linear.
    model = tiny_model("DeepseekV3ForCausalLM", dtype=torch.bfloat16)  # float32: test_fp32_fused_experts_plan_and_equal_a_real_run
    sample = {"input_ids": torch.randint(3, 96, (1, 4))}
    subgraphs = trace_subgraphs(model, sample, ["DeepseekV3DecoderLayer"])
    plan = plan_memory(model.to("meta"), subgraphs, sample, algorithm="gptq")
    linears = [m for m in model.model.layers[1].modules() if isinstance(m, torch.nn.Linear)]
    expected = sum(m.in_features**2 * 4 for m in linears) + 4 * (2 * 32**2 + 16**2) * 4
    assert plan.subgraphs[1].hessian_bytes == expected
    assert plan.subgraphs[1].hessian_linears == len(linears) + 4 * 3


def test_cli_plan_exit_1_when_the_model_does_not_trace(capsys):
    # the original Qwen2-VL branches on a shape: plan says why, like patcher trace
    assert main(["plan", "Qwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct", "--seq-len", "32"]) == 1
    assert "untraceable construct" in capsys.readouterr().err


def test_repeated_vision_blocks_run_once_and_count_every_block_s_weights(monkeypatch):
    # The tower runs whole inside an opaque function (get_image_features): its identical blocks on
    # meta give the same shapes, so only the first runs; the others must still count as reading
    # their own weights (check_exact compares every subgraph's parameters with a real run).
    import zoo
    from patcher.models.attempt import default_targets, model_tracing_defaults
    from patcher.coverage.shrink import shrink_config
    from patcher.samples import sample_input
    from patcher.trace import DEFAULT_IGNORE

    config = shrink_config(transformers.Qwen2VLConfig)
    config.vision_config.depth = 3
    torch.manual_seed(0)
    model = zoo.TraceableQwen2VLForConditionalGeneration(config).eval()
    block_class = type(model.model.visual.blocks[0])
    runs = []
    original = block_class.forward

    def counted(self, *args, **kwargs):
        runs.append(next(self.parameters()).device.type)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(block_class, "forward", counted)
    sample = sample_input(config, multimodal=True)
    ignore = list(DEFAULT_IGNORE) + list(model_tracing_defaults(model).ignore)
    check_exact(model, default_targets(model), sample, samples=2, ignore=ignore)
    # the real run (measure) runs all 3 blocks; the meta plan runs only the first
    assert runs.count("meta") == 1 and runs.count("cpu") == 3, runs


def test_a_real_input_s_values_are_part_of_a_layer_s_cache_key():
    # Integer inputs stay real in the plan (image grids, split sizes) and their values may decide
    # output shapes: two calls that differ only in such values must not share a cached result.
    from patcher.plan.module_cache import ModuleCache

    cache, layer = ModuleCache(), torch.nn.Linear(4, 4, device="meta")
    hidden = torch.empty(2, 4, device="meta")
    grid, same_grid, other_grid = torch.tensor([[1, 2, 2]]), torch.tensor([[1, 2, 2]]), torch.tensor([[1, 4, 1]])
    assert cache.key(layer, (hidden, grid), {}) == cache.key(layer, (hidden, same_grid), {})
    assert cache.key(layer, (hidden, grid), {}) != cache.key(layer, (hidden, other_grid), {})
    # large real tensors (a mask built once for every layer) by identity: an equal copy is another key
    mask = torch.zeros(1, 1, 200, 200)
    assert cache.key(layer, (hidden, mask), {}) == cache.key(layer, (hidden, mask), {})
    assert cache.key(layer, (hidden, mask), {}) != cache.key(layer, (hidden, mask.clone()), {})
    # a real layer is never cached
    assert cache.key(torch.nn.Linear(4, 4), (hidden,), {}) is None


# -- configs that failed to plan (issue 22, item 5) ---------------------------------------------


def test_fp32_fused_experts_plan_and_equal_a_real_run():
    # torch's meta kernel of grouped_mm takes bfloat16 only; the CPU kernel (and the real run) takes
    # float32: the plan raised "Expected inputs of BF16 type" where `patcher trace` worked
    model = tiny_model("DeepseekV3ForCausalLM", dtype=torch.float32)
    sample = {"input_ids": torch.randint(3, 96, (1, 4)), "attention_mask": torch.ones(1, 4, dtype=torch.long)}
    plan = check_exact(model, ["DeepseekV3DecoderLayer"], sample, samples=2)
    assert set(plan.parameter_bytes) == {"float32"}


def _config_file(tmp_path, config, architecture):
    data = config.to_dict()
    data["architectures"] = [architecture]
    path = tmp_path / architecture / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("config_name, model_name, extra", [
    ("OlmoeConfig", "OlmoeForCausalLM", {}),
    ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {"moe_intermediate_size": 16, "head_dim": 8}),
])
def test_cli_plan_of_an_fp32_moe_config(config_name, model_name, extra, tmp_path, capsys):
    config = getattr(transformers, config_name)(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                                                num_experts_per_tok=2, vocab_size=96, dtype="float32", **extra)
    path = _config_file(tmp_path, config, model_name)
    assert main(["plan", model_name, path, "--seq-len", "16", "--samples", "2", "--algorithm", "gptq"]) == 0, \
        capsys.readouterr().err
    assert "float32" in capsys.readouterr().out


@pytest.mark.parametrize("config_name, model_name", [
    ("AyaVisionConfig", "AyaVisionForConditionalGeneration"),  # pixel shuffle: the config's count was 4x
    ("Llama4Config", "Llama4ForConditionalGeneration"),
    ("Mistral3Config", "Mistral3ForConditionalGeneration"),  # split sizes from image_sizes moved to meta
])
def test_cli_plan_with_images_of_vision_language_models(config_name, model_name, tmp_path, capsys):
    from patcher.coverage.shrink import shrink_config

    path = _config_file(tmp_path, shrink_config(getattr(transformers, config_name)), model_name)
    status = main(["plan", model_name, path, "--multimodal", "--seq-len", "16", "--samples", "2"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "Memory plan for" in captured.out and "Proxy(" not in captured.out + captured.err


@pytest.mark.parametrize("config_name, model_name", [
    ("AyaVisionConfig", "AyaVisionForConditionalGeneration"),
    ("Llama4Config", "Llama4ForConditionalGeneration"),
    ("VipLlavaConfig", "VipLlavaForConditionalGeneration"),  # image_seq_length 576 of the real model
])
def test_the_cli_sample_has_the_image_tokens_the_model_makes(config_name, model_name, tmp_path):
    # The CLI's sample is built for a model on meta; its image-token count came from the config alone
    # (4 tokens where Aya Vision's pixel shuffle makes 1 feature), and `patcher trace --multimodal`
    # said success on it. It is counted with the model's own vision path, on meta, now.
    from patcher.models.attempt import prepare_trace
    from patcher.coverage.shrink import shrink_config
    from patcher.models import build_model

    config = shrink_config(getattr(transformers, config_name))
    setup = prepare_trace(model_name, _config_file(tmp_path, config, model_name), multimodal_data=True, device="cpu")
    assert setup.notes == []
    torch.manual_seed(0)
    model = build_model(setup.model_class, config, device="cpu").eval()
    with torch.no_grad():
        model(**setup.sample, use_cache=False)  # raised "Image features and image tokens do not match"


def test_trace_says_when_the_image_token_count_is_not_checked(tmp_path, capsys):
    # Gemma 4's vision path needs values meta tensors lack (nonzero): the count is the config's,
    # and the output says it could not be checked instead of implying it was
    from patcher.coverage.shrink import shrink_config

    path = _config_file(tmp_path, shrink_config(transformers.Gemma4Config), "Gemma4ForConditionalGeneration")
    main(["trace", "Gemma4ForConditionalGeneration", path, "--multimodal"])
    assert "could not count them on the meta device" in capsys.readouterr().out


def test_a_failure_on_meta_is_one_line_with_the_model_line_and_the_fix():
    # A sample whose image tokens do not fit the features: the check's message was formatted with
    # proxies while tracing ("tokens: Proxy(sum_1)") and came out as a raw error
    from patcher.coverage.shrink import shrink_config
    from patcher.models import build_model
    from patcher.plan import PlanError
    from patcher.samples import sample_input

    config = shrink_config(transformers.AyaVisionConfig)
    model = build_model(transformers.AyaVisionForConditionalGeneration, config, device="meta")
    sample = sample_input(config, multimodal=True)  # the config's count: 4 tokens for 1 feature
    subgraphs = trace_subgraphs(model, {k: v.to("meta") for k, v in sample.items()}, ["Cohere2DecoderLayer"])
    with pytest.raises(PlanError) as caught:
        plan_memory(model, subgraphs, sample)
    message = str(caught.value)
    assert "\n" not in message and "Proxy(" not in message
    assert "tokens: 4, features: 1" in message
    assert "modeling_aya_vision.py:" in message and "fix: the sample does not fit the model" in message


# -- the activation peak inside a subgraph (issue 22, item 9) -------------------------------------


class LiveTensorBytes(TorchDispatchMode):
    """The test's own record of a real run: bytes of the storages that operations create and that
    some tensor still uses (a view or in-place result of an input allocates nothing), and their peak."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.users = {}  # storage -> [bytes, tensors alive]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        given = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for tensor in tree_flatten(result)[0]:
            if isinstance(tensor, torch.Tensor):
                key = tensor.untyped_storage()._cdata
                if key not in self.users:
                    if key in given:
                        continue
                    self.users[key] = [tensor.untyped_storage().nbytes(), 0]
                    self.live += self.users[key][0]
                    self.peak = max(self.peak, self.live)
                self.users[key][1] += 1
                weakref.finalize(tensor, self.release, key)
        return result

    def release(self, key):
        self.users[key][1] -= 1
        if self.users[key][1] == 0:
            self.live -= self.users.pop(key)[0]


def measured_peaks(model, subgraphs, sample):
    """Per subgraph of a real CPU run: its inputs (held by the caller while it runs) plus the peak of
    what it allocates."""
    intermediates, peaks = dict(sample), []
    with torch.no_grad():
        for subgraph in subgraphs:
            step = {name: intermediates[name] for name in subgraph.input_names if name in intermediates}
            with LiveTensorBytes() as live:
                outputs = subgraph._run(model, step)
            peaks.append(tensor_bytes(list(step.values())) + live.peak)
            for name in subgraph.consumed_names:
                intermediates.pop(name, None)
            intermediates.update(outputs)
            del outputs
    return peaks


@pytest.mark.parametrize("model_name, attention", [
    ("LlamaForCausalLM", "sdpa"),  # fused attention on CPU and GPU: no score matrix
    ("LlamaForCausalLM", "eager"),  # the score matrix, softmax and dropout copies
    ("MixtralForCausalLM", "sdpa"),  # MoE routing and experts
    ("Gemma3ForCausalLM", "sdpa"),  # sliding layers: a boolean mask, made additive inside sdpa
    ("DeepseekV3ForCausalLM", "sdpa"),  # value heads smaller than query heads: sdpa's math path
])
def test_the_activation_peak_is_a_real_run_s_live_tensor_peak(model_name, attention):
    # The plan counted only the graph's own values: 3-6x below a real run for decoder layers (the
    # attention scores, MLP intermediates inside the called layer), 1.4x for the head (its input,
    # which the caller holds, was freed after its last use)
    model = tiny_model(model_name, attn_implementation=attention)
    sample = {"input_ids": torch.randint(3, 96, (2, 64)), "attention_mask": torch.ones(2, 64, dtype=torch.long)}
    subgraphs = trace_subgraphs(model, sample, [decoder_layer(model_name)])
    meta_model = copy.deepcopy(model).to("meta")
    meta_model.tie_weights()
    plan = plan_memory(meta_model, subgraphs, sample)
    for predicted, measured in zip(plan.subgraphs, measured_peaks(model, subgraphs, sample), strict=True):
        # within 5% (equal on these models today)
        assert measured / 1.05 <= predicted.intermediate_peak_bytes <= measured * 1.05, \
            (predicted.index, predicted.intermediate_peak_bytes, measured)


def test_the_activation_peak_with_an_image_is_a_real_run_s():
    import zoo
    from patcher.models.attempt import default_targets, model_tracing_defaults
    from patcher.coverage.shrink import shrink_config
    from patcher.samples import sample_input
    from patcher.trace import DEFAULT_IGNORE

    config = shrink_config(transformers.Qwen2VLConfig)
    torch.manual_seed(0)
    model = zoo.TraceableQwen2VLForConditionalGeneration(config).eval()
    sample = sample_input(config, multimodal=True)
    ignore = list(DEFAULT_IGNORE) + list(model_tracing_defaults(model).ignore)
    subgraphs = trace_subgraphs(model, sample, default_targets(model), ignore)
    meta_model = copy.deepcopy(model).to("meta")
    plan = plan_memory(meta_model, subgraphs, sample)
    for predicted, measured in zip(plan.subgraphs, measured_peaks(model, subgraphs, sample), strict=True):
        assert measured / 1.05 <= predicted.intermediate_peak_bytes <= measured * 1.05, \
            (predicted.index, predicted.intermediate_peak_bytes, measured)


def test_plan_model_takes_the_class_first_and_the_old_order_warns():
    """plan_model, attempt_trace and prepare_trace take (model_class, model_id), the CLI's order."""
    import warnings

    from patcher.plan import plan_model

    new = plan_model("LlamaForCausalLM", "Meta-Llama-3-8B", seq_len=8, samples=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = plan_model("Meta-Llama-3-8B", "LlamaForCausalLM", seq_len=8, samples=2)
    assert any(issubclass(w.category, DeprecationWarning) and "plan_model(model_id, model_class)" in str(w.message)
               for w in caught)
    assert old.to_dict() == new.to_dict()


def test_plan_with_a_declared_modality_plans_the_subgraphs_its_sample_runs():
    # --modality reaches plan_model: a video sample runs the vision tower in subgraph 0, whose
    # parameters the text sample's subgraph 0 never reads
    from patcher.plan.report import plan_model
    from patcher.samples.modalities import named

    args = ("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct")
    text = plan_model(*args, seq_len=64, samples=2)
    video = plan_model(*args, seq_len=64, samples=2, modality=named("video"))
    assert sum(video.subgraphs[0].parameter_bytes.values()) > sum(text.subgraphs[0].parameter_bytes.values())
    assert len(video.subgraphs) == len(text.subgraphs)
