"""attempt_trace and `patcher trace`: success, failure and the ways to name a model."""

import io
import os
import subprocess
import sys

import pytest
import transformers

from patcher import attempt_trace
from tiny_models import tiny_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tiny_qwen2_vl_config():
    return transformers.Qwen2VLConfig(
        text_config=dict(vocab_size=160, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
                         rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=1, embed_dim=16, hidden_size=32, num_heads=2, patch_size=2, spatial_merge_size=2,
                           temporal_patch_size=2),
        image_token_id=150, video_token_id=151, vision_start_token_id=152,
    )


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "patcher", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def test_attempt_trace_bundled_config_prints_success_and_table():
    out = io.StringIO()
    subgraphs = attempt_trace("LlamaForCausalLM", "Meta-Llama-3-8B", out=out)
    text = out.getvalue()
    assert len(subgraphs) == 33
    assert text.rstrip().endswith("Successfully traced model into 33 subgraphs!")
    assert "model.layers.31" in text and "subgraph  targets" in text


def test_attempt_trace_from_a_saved_directory_and_a_config_file(tmp_path):
    model = tiny_model("MixtralForCausalLM")
    model.save_pretrained(tmp_path)
    for model_id in (str(tmp_path), str(tmp_path / "config.json")):
        out = io.StringIO()
        subgraphs = attempt_trace("MixtralForCausalLM", model_id, out=out)
        assert len(subgraphs) == model.config.num_hidden_layers + 1, out.getvalue()


def test_attempt_trace_failure_names_the_construct(tmp_path):
    tiny_qwen2_vl_config().save_pretrained(tmp_path)
    out = io.StringIO()
    assert attempt_trace("Qwen2VLForConditionalGeneration", str(tmp_path), out=out) is None
    text = out.getvalue()
    assert "Failed to trace Qwen2VLForConditionalGeneration" in text
    assert "modeling_qwen2_vl.py:" in text
    assert "if position_ids.ndim == 3 and position_ids.shape[0] == 4:" in text
    assert "control flow on a shape" in text and "TZ105" in text


def test_cli_trace_success():
    result = run_cli("trace", "LlamaForCausalLM", "Meta-Llama-3-8B", "--targets-per-subgraph", "4")
    assert result.returncode == 0, result.stderr
    assert "Successfully traced model into 9 subgraphs!" in result.stdout


def test_cli_trace_failure_exit_status(tmp_path):
    tiny_qwen2_vl_config().save_pretrained(tmp_path)
    result = run_cli("trace", "Qwen2VLForConditionalGeneration", str(tmp_path))
    assert result.returncode == 1
    assert "untraceable construct" in result.stdout


def test_cli_bad_arguments():
    result = run_cli("trace", "NoSuchModel", "Meta-Llama-3-8B")
    assert result.returncode == 2
    assert "unknown model class 'NoSuchModel'" in result.stderr
    result = run_cli("trace", "LlamaForCausalLM", "no-such-config-anywhere")
    assert result.returncode == 2
    assert "not a bundled config (" in result.stderr and "Meta-Llama-3-8B" in result.stderr


@pytest.mark.parametrize("args", [["--help"], ["trace", "--help"]])
def test_help_teaches(args):
    result = run_cli(*args)
    assert result.returncode == 0
    assert "trace" in result.stdout
    if args[0] == "trace":
        assert "examples:" in result.stdout and "Meta-Llama-3-8B" in result.stdout


def test_unknown_config_name_without_org_is_refused_at_once_with_a_suggestion(monkeypatch):
    from patcher import models

    def no_hub(*args, **kwargs):
        raise AssertionError("a name without org/ is no hub id: the hub must not be asked")

    import transformers

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_hub)
    with pytest.raises(ValueError, match=r"did you mean 'Qwen2-VL-2B-Instruct'\?.*save the model's config.json as"):
        models.load_config("Qwen2-VL-2B-Instruc")


def test_text_only_trace_of_a_vision_language_model_says_the_image_path_was_not_traced():
    out = io.StringIO()
    assert attempt_trace("LlavaForConditionalGeneration", "llava-1.5-7b-hf", out=out) is not None
    text = out.getvalue()
    assert "Successfully traced model into 33 subgraphs!" in text
    assert "image path (vision tower, projector, image-token merge) was not traced" in text
    assert "--multimodal" in text
    out = io.StringIO()
    attempt_trace("LlavaForConditionalGeneration", "llava-1.5-7b-hf", multimodal_data=True, out=out)
    assert "was not traced" not in out.getvalue()
    out = io.StringIO()
    attempt_trace("LlamaForCausalLM", "Meta-Llama-3-8B", out=out)
    assert "was not traced" not in out.getvalue()


def test_cli_unused_input_that_the_model_uses_is_refused():
    result = run_cli("trace", "LlamaForCausalLM", "Meta-Llama-3-8B", "--unused-input", "input_ids")
    assert result.returncode == 1, result.stderr
    assert "remove it from unused_inputs" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_attempt_trace_old_argument_order_still_works_with_a_deprecation_warning():
    out = io.StringIO()
    with pytest.warns(DeprecationWarning, match="pass the class first"):
        subgraphs = attempt_trace("Meta-Llama-3-8B", "LlamaForCausalLM", out=out)
    assert len(subgraphs) == 33


def test_the_default_sample_leaves_out_an_input_the_forward_cannot_take(tmp_path):
    # xLSTM's forward has no attention_mask (its **kwargs pass it to nothing): the default sample
    # gave it one, and the tracer refused the tool's own sample instead of naming the real blocker.
    from patcher.models.attempt import prepare_trace
    from patcher import trace_subgraphs
    from patcher.trace import SampleInputError

    config = transformers.xLSTMConfig(vocab_size=64, hidden_size=16, embedding_dim=16, num_heads=2,
                                      num_hidden_layers=2, num_blocks=2)
    config.to_json_file(tmp_path / "config.json")
    setup = prepare_trace("xLSTMForCausalLM", str(tmp_path / "config.json"))
    assert "attention_mask" not in setup.sample and "input_ids" in setup.sample
    llama = prepare_trace("LlamaForCausalLM", "Meta-Llama-3-8B")
    assert "attention_mask" in llama.sample  # a model that takes it keeps it
    with pytest.raises(SampleInputError, match="'attention_mask', which xLSTMForCausalLM.forward does not name"):
        trace_subgraphs(setup.model, {**setup.sample, "attention_mask": setup.sample["input_ids"]},
                        sequential_targets=setup.targets)


def test_modality_video_traces_the_model_with_a_video_per_row():
    from patcher.models import load_config

    result = run_cli("trace", "TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct", "--modality", "video")
    assert result.returncode == 0, result.stdout + result.stderr
    layers = load_config("Qwen2-VL-2B-Instruct").text_config.num_hidden_layers
    assert f"Successfully traced model into {layers + 1} subgraphs!" in result.stdout
    assert "was not traced" not in result.stdout


def test_modality_images_is_the_multimodal_sample_and_video_feeds_the_video_input():
    import torch

    from patcher.models.attempt import prepare_trace
    from patcher.samples.modalities import named

    args = ("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct")
    multimodal = prepare_trace(*args, multimodal_data=True).sample
    images = prepare_trace(*args, modality=named("images")).sample
    assert multimodal.keys() == images.keys() and "pixel_values" in images
    for name, value in multimodal.items():
        other = images[name]
        assert (value.shape, value.dtype, value.device) == (other.shape, other.dtype, other.device), name
        if value.device.type != "meta":
            assert torch.equal(value, other), name
    video = prepare_trace(*args, modality=named("video")).sample
    assert "pixel_values_videos" in video and "pixel_values" not in video


def test_modality_choices_are_the_declared_modalities_and_exclude_multimodal():
    from pathlib import Path

    import patcher.samples
    from patcher.models.arguments import declared_modality_names

    folders = sorted(path.parent.name for path in Path(patcher.samples.__file__).parent.glob("*/modality.py"))
    assert declared_modality_names() == folders and {"images", "video", "audio"} <= set(folders)
    help_text = " ".join(run_cli("trace", "--help").stdout.split())
    assert f"({', '.join(folders)}; patcher/samples/NAME/modality.py)" in help_text
    assert "Qwen2-VL-2B-Instruct --modality video" in help_text
    both = run_cli("trace", "LlamaForCausalLM", "Meta-Llama-3-8B", "--multimodal", "--modality", "video")
    assert both.returncode == 2 and "not allowed with argument --multimodal" in both.stderr, both.stderr
    unknown = run_cli("trace", "LlamaForCausalLM", "Meta-Llama-3-8B", "--modality", "smell")
    assert unknown.returncode == 2 and "invalid choice: 'smell'" in unknown.stderr, unknown.stderr


@pytest.mark.parametrize("name, traced", [("WhisperForConditionalGeneration", True),
                                          ("Qwen2AudioForConditionalGeneration", False)])
def test_modality_audio_counts_on_meta_or_says_why_it_cannot(tmp_path, name, traced):
    # Whisper's clip runs its encoder on meta; Qwen2-Audio places its audio tokens by running the
    # whole forward, whose token merge reads values meta tensors lack
    from patcher.coverage.shrink import shrink_config
    from patcher.models import resolve_model_class
    from patcher.samples.audio import fill_audio_ids

    cls = resolve_model_class(name)
    config = shrink_config(cls.config_class)
    fill_audio_ids(config, cls)
    config.save_pretrained(tmp_path)
    result = run_cli("trace", name, str(tmp_path), "--modality", "audio")
    if traced:
        assert result.returncode == 0 and "Successfully traced model into" in result.stdout, result.stdout + result.stderr
    else:
        assert result.returncode == 2, result.stdout + result.stderr
        assert "the audio sample could not be built with the model on the meta device" in result.stderr
        assert "pass it to patcher.trace_subgraphs" in result.stderr and "Traceback" not in result.stderr
