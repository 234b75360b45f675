"""The coverage rows that did not build in round 1 of issue 30: classes without a forward (the Omni
top-level models), Gemma 4's assistants (a target model's states, a default config that fails its
own validation) and rows built in another environment (timm's VLMs, merged from the floor
environment's sweep)."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from patcher.coverage.check import NO_FORWARD, Attempt, CoverageRow, check_architecture
from patcher.samples.modalities import MIN_INFLUENCE
from patcher.coverage.report import blocker, markdown, overall_line, summary, write_reports
from patcher.coverage.shrink import shrink_config
from versions import require_classes

OMNI_WITHOUT_FORWARD = ["Qwen2_5OmniForConditionalGeneration", "Qwen2_5OmniPreTrainedModelForConditionalGeneration",
                        "Qwen3OmniMoeForConditionalGeneration", "Qwen3OmniMoePreTrainedModelForConditionalGeneration"]


@pytest.mark.parametrize("name", OMNI_WITHOUT_FORWARD)
def test_a_class_without_a_forward_is_reported_as_such_not_as_unbuilt(name):
    require_classes(name)
    row = check_architecture(name)
    assert not row.built and row.stage == NO_FORWARD, (row.stage, row.error)
    assert "has no forward" in row.error and "ThinkerForConditionalGeneration" in row.error, row.error
    assert blocker(row) is None
    table_line = next(line for line in markdown([row]).splitlines() if line.startswith(f"| {name} |"))
    assert table_line.startswith(f"| {name} | {NO_FORWARD} |"), table_line


def test_the_summary_counts_classes_without_a_forward_apart():
    equal = dict(ran=True, traced=True, equal=True, subgraphs=3, expected=3)
    rows = [CoverageRow("A", built=True, text=Attempt("text", **equal)),
            CoverageRow("B", stage=NO_FORWARD, error="B has no forward"),
            CoverageRow("C", stage="size", error="too big")]
    assert summary(rows).startswith("3 architectures: built 1 (33%) (1 without a forward, built 1 of the 2 with one);")
    assert overall_line(rows).startswith("Equal on every input: 1 of 3 (33%) (1 of the 2 with a forward)")
    assert blocker(rows[1]) is None and blocker(rows[2]) is not None


def test_the_gemma4_assistant_default_config_is_made_valid_by_shrinking():
    # its default text config is the E2B target's, with per-layer inputs its validation refuses
    require_classes("Gemma4AssistantForCausalLM")
    try:  # transformers 5.17 on validate it (5.10 did not)
        transformers.Gemma4AssistantConfig()
    except Exception as exc:  # noqa: BLE001
        assert "hidden_size_per_layer_input must be 0" in str(exc), exc
    config = shrink_config(transformers.Gemma4AssistantConfig)
    assert config.text_config.hidden_size_per_layer_input == 0
    assert config.text_config.num_kv_shared_layers == config.text_config.num_hidden_layers
    assert config.backbone_hidden_size == config.text_config.hidden_size


def _all_shared_layers_build(config) -> bool:
    # transformers 5.23's kv_sharing_modes raises when every layer shares (the assistant's layout);
    # 5.24 returns "reuse" for each
    try:
        config.get_text_config().kv_sharing_modes
    except ValueError:
        return False
    except AttributeError:  # before kv_sharing_modes (5.10): sharing read from num_kv_shared_layers
        pass
    return True


@pytest.mark.parametrize("name", ["Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"])
def test_the_assistant_rows_trace_and_equal_eager_exactly(name):
    """Where the assistants build (transformers >= 5.24; CI's newest environment runs this), their
    whole sweep row: the target's states handed over as a dict of tuples, traced per tensor."""
    require_classes(name)
    if not _all_shared_layers_build(shrink_config(getattr(transformers, name).config_class)):
        pytest.skip(f"transformers {transformers.__version__}: Gemma4TextConfig.kv_sharing_modes raises when every "
                    "layer shares its kv, as an assistant's do (fixed in 5.24); CI sweeps these rows there")
    row = check_architecture(name)
    assert row.built, (row.stage, row.error)
    text = row.text
    assert text.equal and text.max_diff == 0 and text.reuse_diff == 0 and text.same_kernels, \
        (text.stage, text.error, text.max_diff, text.reuse_diff)
    assert text.subgraphs == text.expected


@pytest.mark.parametrize("name", ["Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"])
def test_the_assistant_reads_the_target_states_the_sweep_builds(name):
    from patcher.coverage.assistant_samples import assistant_sample, check_states_reach_output, target_model
    from patcher.samples.sweep import coverage_text_sample
    from patcher.models import random_model

    require_classes(name)
    cls = getattr(transformers, name)
    config = shrink_config(cls.config_class)
    if not _all_shared_layers_build(config):
        pytest.skip(f"transformers {transformers.__version__}: Gemma4TextConfig.kv_sharing_modes raises when every "
                    "layer shares its kv, as an assistant's do (fixed in 5.24)")
    try:
        model = random_model(cls, config, 0).eval()
    except AttributeError as exc:
        if "vocab_size" not in str(exc) or hasattr(config, "vocab_size"):
            raise
        pytest.skip(f"transformers {transformers.__version__}: {name}.__init__ reads config.vocab_size, which its "
                    "config class lacks: the class cannot be built from its own config")
    target = target_model(config, 0)
    text = coverage_text_sample(config.get_text_config(), batch_size=2, seq_len=7, left_padding=1)
    sample = assistant_sample(config, text, 0, target=target)
    for kind, (keys, values) in sample["shared_kv_states"].items():
        assert keys.shape[:1] == values.shape[:1] == (2,) and keys.shape[2] == 7, (kind, keys.shape)
    assert sample["inputs_embeds"].shape == (2, 1, 2 * config.backbone_hidden_size)
    assert check_states_reach_output(model, sample, 0, MIN_INFLUENCE) > MIN_INFLUENCE
    # the last hidden state handed over is the target's: another target gives other logits
    other = assistant_sample(config, text, 1)
    with torch.no_grad():
        assert not torch.equal(model(**sample).logits, model(**other).logits)


def test_rows_built_in_another_environment_replace_only_rows_unbuilt_here(tmp_path):
    from patcher.coverage.elsewhere import load_rows, merge_rows

    equal = dict(ran=True, traced=True, equal=True, subgraphs=3, expected=3, max_diff=0.0, reuse_diff=0.0)
    here = [CoverageRow("Timm", stage="size", error="TimmWrapperModel requires the timm library"),
            CoverageRow("Plain", built=True, text=Attempt("text", **equal)),
            CoverageRow("Broken", stage="size", error="no")]
    there = [CoverageRow("Timm", built=True, text=Attempt("text", **equal), multimodal=Attempt("multimodal", **equal)),
             CoverageRow("Plain", built=True, text=Attempt("text", ran=True, traced=True, stage="compare", max_diff=1.0)),
             CoverageRow("Broken", stage="size", error="no there either")]
    write_reports(there, tmp_path)
    rows, environment = load_rows(tmp_path / "coverage.json")
    assert environment == f"transformers {transformers.__version__}, torch {torch.__version__}"
    merged = merge_rows(here, rows, environment)
    assert [row.architecture for row in merged] == ["Timm", "Plain", "Broken"]
    assert merged[0].built and merged[0].built_in == environment and merged[0].multimodal.equal
    assert merged[1] is here[1] and merged[2] is here[2]  # built here, or built nowhere: kept
    text = markdown(merged)
    assert f"| Timm | yes ({environment}) |" in text
    assert f"Built in another environment" in text and f"Timm ({environment})" in text
    assert summary(merged).startswith("3 architectures: built 2 (67%)")
    assert json.loads((tmp_path / "coverage.json").read_text())["rows"][0]["built_in"] is None


def test_a_report_without_its_environment_is_refused(tmp_path):
    from patcher.coverage.elsewhere import load_rows

    path = tmp_path / "coverage.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="no 'environment'"):
        load_rows(path)


def _pi0():
    from patcher.models import random_model

    require_classes("PI0ForConditionalGeneration")
    cls = transformers.PI0ForConditionalGeneration
    config = shrink_config(cls.config_class)
    return cls, config, random_model(cls, config, 0).eval()


def test_the_robot_sample_feeds_every_input_the_policy_reads():
    from patcher.samples.robot.modality import ROBOT, robot_samples

    cls, config, model = _pi0()
    assert ROBOT.takes(cls, config) and not ROBOT.takes(transformers.LlamaForCausalLM, transformers.LlamaConfig())
    first, second = robot_samples(config, model, 0)
    assert first["pixel_values"].shape[:2] == (2, 1) and second["pixel_values"].shape[:2] == (1, 2)
    assert second["pixel_attention_mask"].tolist() == [[True, False]]
    with torch.no_grad():
        reference = model(**first).logits
        assert torch.equal(reference, model(**first).logits)  # nothing drawn inside: noise and timestep given
        for name in ("state", "noise", "timestep", "pixel_values"):
            varied = dict(first)
            varied[name] = first[name] + 0.5
            change = (model(**varied).logits - reference).abs().max().item()
            assert change > MIN_INFLUENCE, (name, change)


def test_a_cache_filled_by_called_modules_and_read_after_them_fails_loudly_and_its_fix_works():
    from patcher.samples.robot.modality import robot_samples, with_other_state
    from patcher.partition import run_subgraphs, trace_subgraphs
    from patcher.trace import DEFAULT_IGNORE
    from patcher.trace.filled_caches import FilledCacheError
    from patcher.models.traceable import load_traceable
    from patcher.models import random_model

    cls, config, model = _pi0()
    traceable = random_model(load_traceable(cls, targets=["GemmaDecoderLayer"]), config, 0).eval()
    traceable.load_state_dict(model.state_dict())
    samples = robot_samples(config, model, 0)
    # the VLM's and the action expert's layers are both GemmaDecoderLayer: as targets, the VLM's fill
    # the cache inside single calls and the traced code reads its (empty) length after them
    with pytest.raises(FilledCacheError, match="model.vlm.language_model.layers.0") as raised:
        trace_subgraphs(traceable, samples[0], ["GemmaDecoderLayer"], DEFAULT_IGNORE)
    assert "traced through" in str(raised.value)
    # the fix it names: the VLM's layers traced through, the expert's layers as targets
    subgraphs = trace_subgraphs(traceable, samples[0], [r"re:model\.dit\.layers\.\d+"], DEFAULT_IGNORE)
    assert len(subgraphs) == config.dit_config.num_hidden_layers + 1
    with torch.no_grad():
        for sample in (*samples, with_other_state(samples[1], 0)):
            expected = model(**sample).logits
            assert torch.equal(run_subgraphs(traceable, list(subgraphs), sample)["logits"], expected)


def test_the_pi0_row_follows_the_filled_cache_fix_and_equals_eager(coverage_row):
    from patcher.samples.robot.modality import NEEDS_ROBOT
    from patcher.coverage.report import image_text_to_text

    require_classes("PI0ForConditionalGeneration")
    row = coverage_row("PI0ForConditionalGeneration")
    assert row.built and row.text.stage == NEEDS_ROBOT, (row.stage, row.error, row.text)
    robot = row.robot
    assert robot.ran and robot.influence > MIN_INFLUENCE, robot
    # the row's targets (GemmaDecoderLayer) match the VLM's layers too: traced on the expert's list alone
    assert robot.targets == [r"re:model\.dit\.layers\.\d+"], robot
    assert robot.traced and robot.subgraphs == robot.expected == 3, robot
    assert robot.max_diff == 0.0 and robot.reuse_diff == 0.0 and robot.equal, robot
    assert blocker(row) is None
    assert f"targets {robot.targets[0]}" in markdown([row])
    assert image_text_to_text([row], {row.architecture})["equal_with_images"] == 1


HANDOVER = ["Qwen2_5OmniTalkerForConditionalGeneration", "Qwen3OmniMoeTalkerForConditionalGeneration",
            "Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration"]


@pytest.mark.parametrize("name", HANDOVER)
def test_the_omni_parts_read_the_embeddings_handed_over(name):
    from patcher.coverage.handover_samples import check_handover_reaches_output, handover_samples
    from patcher.models import random_model

    require_classes(name)
    cls = getattr(transformers, name)
    config = shrink_config(cls.config_class)
    model = random_model(cls, config, 0).eval()
    first, second = handover_samples(model, config, 0)
    assert first["inputs_embeds"].shape[0] == 2 and second["inputs_embeds"].shape[0] == 3
    assert check_handover_reaches_output(model, first, 0, MIN_INFLUENCE) > MIN_INFLUENCE


@pytest.mark.parametrize("name", HANDOVER)
def test_the_omni_parts_are_built_traced_and_equal_to_eager(name, coverage_row):
    # the code predictor's lm_head is a ModuleList indexed by a value of the input's shape: the
    # sample's head is called (patcher.trace.decided_indices)
    require_classes(name)
    row = coverage_row(name)
    assert row.built and row.text.traced, (row.stage, row.error, row.text)
    assert row.text.subgraphs == row.text.expected and row.text.max_diff == 0.0 and row.text.reuse_diff == 0.0
    assert row.text.equal


def test_every_run_of_the_sweep_gets_its_own_copy_of_the_sample():
    # the Qwen2.5-Omni talker adds into inputs_embeds in place: a shared tensor drifts run by run
    from patcher.coverage.check import fresh

    sample = {"inputs_embeds": torch.zeros(2, 3), "states": {"full": (torch.ones(1), torch.ones(2))}, "flag": True}
    copy = fresh(sample)
    copy["inputs_embeds"] += 1
    copy["states"]["full"][0].add_(1)
    assert sample["inputs_embeds"].sum() == 0 and sample["states"]["full"][0].item() == 1 and copy["flag"] is True


def test_parameters_the_models_own_init_leaves_uninitialized_are_drawn_the_same_on_every_build():
    # transformers 5.23's Qwen3-Omni talker: its _init_weights checks the thinker's experts class, not
    # the talker's, so its experts held leftover memory (other values on every build, NaN at times)
    from patcher.models import random_model

    require_classes("Qwen3OmniMoeTalkerForConditionalGeneration")
    cls = transformers.Qwen3OmniMoeTalkerForConditionalGeneration
    config = shrink_config(cls.config_class)
    first = random_model(cls, config, 0)
    leftover = [torch.full((1024, 1024), 1e30) for _ in range(8)]  # memory a careless build would reuse
    del leftover
    second = random_model(cls, config, 0)
    experts = first.model.layers[0].mlp.experts
    for name, value in experts.named_parameters():
        assert torch.isfinite(value).all() and 0.005 < value.std() < 0.05, (name, value.std())
    for (name, value), (_, again) in zip(first.state_dict().items(), second.state_dict().items()):
        assert torch.equal(value, again), name


def test_a_known_transformers_bug_is_named_with_the_release_that_fixes_it():
    from patcher.coverage.upstream import upstream_note

    message = "The set of layer types producing a cache is different than the set of layer types using them"
    note = upstream_note("gemma4_assistant", message, version="5.23.0")
    assert note.startswith("[a transformers 5.23.0 bug, fixed in 5.24.0") and "--rows-from" in note and message in note
    assert upstream_note("gemma4_assistant", message, version="5.24.0") is None
    assert upstream_note("gemma4_text", message, version="5.23.0") is None
    assert upstream_note("gemma4_assistant", "another error", version="5.23.0") is None
