"""Bad targets, bad samples, swallowed layers and untraceable code give errors that say what to do."""

import re

import pytest
import torch
from torch import nn

from patcher import MissingTargetsError, SampleInputError, TargetMatchError, UntraceableCodeError, trace_subgraphs
from patcher.samples import text_sample
from tiny_models import tiny_model


@pytest.fixture(scope="module")
def llama():
    return tiny_model("LlamaForCausalLM")


def sample_for(model):
    return text_sample(model.config, batch_size=1, seq_len=4)


def test_class_name_matching_nothing_is_named_with_a_suggestion(llama):
    with pytest.raises(TargetMatchError, match=r"'LlamaDecodeLayer' match no module of LlamaForCausalLM") as info:
        trace_subgraphs(llama, sample_for(llama), ["LlamaDecodeLayer"])
    assert "Did you mean 'LlamaDecoderLayer'" in str(info.value)


def test_regex_matching_nothing(llama):
    with pytest.raises(TargetMatchError, match=re.escape(r"'re:model\.blocks\.\d+' match no module")):
        trace_subgraphs(llama, sample_for(llama), [r"re:model\.blocks\.\d+"])


@pytest.mark.parametrize("entry, closest", [("create_causal_mak", "create_causal_mask"), ("LlamaRMSNrom", "LlamaRMSNorm"),
                                            (r"re:model\.layerz\.1", r"re:model\.layers\.1")])
def test_ignore_entry_matching_nothing_is_refused_with_the_closest_name(llama, entry, closest):
    # The defaults name other models' helpers too (get_rope_index): only the caller's entries must match.
    from patcher import DEFAULT_IGNORE, IgnoreMatchError

    with pytest.raises(IgnoreMatchError, match=re.escape(f"ignore entry '{entry}' matches no ")) as info:
        trace_subgraphs(llama, sample_for(llama), ["LlamaDecoderLayer"], ignore=[*DEFAULT_IGNORE, "rotate_half", entry])
    assert f"did you mean '{closest}'?" in str(info.value) and info.value.entries == [entry]


def test_regex_targets_select_whole_names(llama):
    subgraphs = trace_subgraphs(llama, sample_for(llama), [r"re:model\.layers\.[02]"])
    assert [subgraph.targets for subgraph in subgraphs] == [["model.layers.0"], ["model.layers.2"], []]


def test_nested_targets_are_refused(llama):
    with pytest.raises(TargetMatchError, match="lies inside sequential target"):
        trace_subgraphs(llama, sample_for(llama), ["LlamaDecoderLayer", "LlamaMLP"])


def test_sample_missing_required_input(llama):
    with pytest.raises(SampleInputError, match="exactly one of input_ids or inputs_embeds") as info:
        trace_subgraphs(llama, {"attention_mask": torch.ones(1, 4)}, ["LlamaDecoderLayer"])
    assert "modeling_llama.py:" in str(info.value)
    assert "sample input lacks an input" in str(info.value)


def test_sample_with_unknown_input_is_named():
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2)])

        def forward(self, x):
            return self.layers[0](x)

    with pytest.raises(SampleInputError, match=r"'y', which Plain.forward does not accept"):
        trace_subgraphs(Plain(), {"x": torch.ones(1, 2), "y": torch.ones(1)}, ["Linear"])
    with pytest.raises(SampleInputError, match=r"missing required input\(s\) 'x'"):
        trace_subgraphs(Plain(), {}, ["Linear"])


def test_ignored_module_containing_targets_is_an_error(llama):
    with pytest.raises(MissingTargetsError, match=r"inside ignored 'model'") as info:
        trace_subgraphs(llama, sample_for(llama), ["LlamaDecoderLayer"], ignore=["LlamaModel"])
    assert info.value.missing == ["model.layers.0", "model.layers.1", "model.layers.2"]


class LayersBehindAMethod(nn.Module):
    """Calls its layers from a helper method, which an ignore entry makes opaque."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 3)
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(2)])

    def run_layers(self, hidden):
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden

    def forward(self, x):
        return {"out": self.run_layers(self.embed(x))}


def test_targets_swallowed_by_an_opaque_method_are_named():
    model = LayersBehindAMethod()
    with pytest.raises(MissingTargetsError, match=r"2 sequential target\(s\) are missing") as info:
        trace_subgraphs(model, {"x": torch.ones(1, 3)}, [r"re:layers\.\d"], ignore=["run_layers"])
    assert info.value.missing == ["layers.0", "layers.1"]
    assert "run_layers" in str(info.value)
    # Without the ignore entry the layers are traced into their own subgraphs.
    assert len(trace_subgraphs(model, {"x": torch.ones(1, 3)}, [r"re:layers\.\d"], ignore=[])) == 3


class BranchOnValue(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3)])

    def forward(self, x):
        if x.sum() > 0:  # data-dependent
            x = -x
        return self.layers[0](x)


class StarredShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3)])

    def forward(self, x):
        batch, *rest = x.shape
        return self.layers[0](x).reshape(batch, -1)


class AssertOnShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3)])

    def forward(self, x):
        assert x.shape[-1] == 3, "wrong width"
        return self.layers[0](x)


@pytest.mark.parametrize(
    "module, kind, rule, code",
    [
        (BranchOnValue, "control flow on a tensor value", "TZ101", "if x.sum() > 0:  # data-dependent"),
        (StarredShape, "starred unpacking of a shape", "TZ104", "batch, *rest = x.shape"),
        (AssertOnShape, "assert or check on a tensor value", "TZ102", 'assert x.shape[-1] == 3, "wrong width"'),
    ],
)
def test_untraceable_construct_names_file_line_kind_and_fix(module, kind, rule, code):
    with pytest.raises(UntraceableCodeError) as info:
        trace_subgraphs(module(), {"x": torch.ones(2, 3)}, ["Linear"], ignore=[])
    construct = info.value.construct
    assert construct.filename == __file__
    assert construct.symptom.name == kind and construct.symptom.rule == rule
    assert construct.code == code
    message = str(info.value)
    assert f"test_errors.py:{construct.lineno}" in message
    assert code in message and f"patcher rule {rule}" in message and "GUIDE.md#" in message


def test_construct_in_shared_transformers_code_names_the_modeling_call_to_keep_opaque():
    # Gemma3's vision mask builder lives in modeling_gemma3.py but branches in masking_utils.py:
    # the error must point at the modeling-file call, since patching masking_utils is no fix.
    import inspect

    import transformers
    import transformers.models.gemma3.modeling_gemma3 as modeling_gemma3

    from patcher import DEFAULT_IGNORE
    from zoo.gemma3 import recipe as gemma3

    if "create_masks_for_vision_model" not in inspect.getsource(modeling_gemma3):
        pytest.skip(f"transformers {transformers.__version__}'s modeling_gemma3.py has no create_masks_for_vision_model")
    model = gemma3.tiny_model()
    sample = gemma3.build_sample(model.config, batch_size=1, seq_len=4)
    without = [name for name in DEFAULT_IGNORE if name != "create_masks_for_vision_model"]
    with pytest.raises(UntraceableCodeError) as info:
        trace_subgraphs(model, sample, ["Gemma3DecoderLayer"], ignore=without)
    message = str(info.value)
    assert "at transformers/masking_utils.py:" in message
    assert re.search(r"reached from: transformers/models/gemma3/modeling_gemma3\.py:\d+ in "
                     r"create_masks_for_vision_model\(\)", message)
    assert "--ignore create_masks_for_vision_model" in message


class _SecondItemOnlyForPositiveSums(nn.Module):
    """Returns ``(hidden, None)`` for a negative sum, ``(hidden, 2 * hidden)`` otherwise: the trace
    follows the sample's structure, and the graph's check refuses the other one when it runs."""

    def forward(self, hidden):
        return hidden, (None if bool(hidden.sum() < 0) else 2 * hidden)


class _TestsTheSecondItem(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = _SecondItemOnlyForPositiveSums()
        self.dropout = nn.Dropout(0.0)

    def forward(self, input_ids):
        first, second = self.layer(input_ids.float())[:2]
        return {"logits": self.dropout(second if second is not None else first)}


def test_an_error_raised_by_graph_code_at_run_time_names_the_node_and_the_model_line():
    from patcher import LeafOutputError, run_subgraphs

    model = _TestsTheSecondItem().eval()
    sample = {"input_ids": torch.ones(2, 4, dtype=torch.long)}
    subgraphs = trace_subgraphs(model, sample, ["_SecondItemOnlyForPositiveSums"])
    with pytest.raises(LeafOutputError, match="returned") as info:
        run_subgraphs(model, subgraphs, {"input_ids": -sample["input_ids"]})
    line = _TestsTheSecondItem.forward.__code__.co_firstlineno + 1
    note = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised while running subgraph 1, by its node `leaf_output_checked`" in note, note
    assert f"test_errors.py:{line} in forward()" in note
    assert info.value.graph_source == (__file__, line)


def test_instructblip_unpacking_its_tower_output_traces_as_is_and_with_the_older_fix():
    """InstructBLIP's get_image_features rebuilds the vision tower's output with `**vision_outputs`: the
    tracer takes the keys of that leaf's output from an eager run, so it traces without help; keeping
    the function opaque (the fix the error used to name) still works too."""
    import transformers

    from patcher import DEFAULT_IGNORE, load_traceable, run_subgraphs

    config = transformers.InstructBlipConfig(
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                           image_size=30, patch_size=2),
        qformer_config=dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=37, cross_attention_frequency=1, max_position_embeddings=64,
                            encoder_hidden_size=32),
        text_config=dict(model_type="llama", vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
        num_query_tokens=4, image_token_index=98)
    torch.manual_seed(0)
    model = load_traceable(transformers.InstructBlipForConditionalGeneration)(config).eval()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, 90, (2, 10), generator=generator)
    input_ids[:, :4] = config.image_token_index  # one image: num_query_tokens image tokens
    sample = {"pixel_values": torch.randn(2, 3, 30, 30, generator=generator),
              "qformer_input_ids": torch.randint(1, 90, (2, 6), generator=generator),
              "qformer_attention_mask": torch.ones(2, 6, dtype=torch.long),
              "input_ids": input_ids, "attention_mask": torch.ones(2, 10, dtype=torch.long)}
    for ignore in (None, [*DEFAULT_IGNORE, "get_image_features"]):
        subgraphs = trace_subgraphs(model, sample, ["LlamaDecoderLayer"], ignore)
        with torch.no_grad():
            torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits,
                                       rtol=0, atol=0)


def _as_mapping(hidden):
    return {"hidden": hidden}


class UnpacksAnOpaqueResult(nn.Module):
    """`**` of what an opaque function returns: a traced value whose keys no run records."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def rebuild(self, hidden):
        return dict(**_as_mapping(hidden))

    def forward(self, x):
        hidden = self.rebuild(x)["hidden"]
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden


def test_unpacking_a_traced_value_by_name_says_which_function_to_keep_opaque_and_that_works():
    """fx reports `**` as iteration, whose loop-rewrite fix does not fit. The fix given must work."""
    from patcher import DEFAULT_IGNORE, run_subgraphs

    torch.manual_seed(0)
    model = UnpacksAnOpaqueResult().eval()
    sample = {"x": torch.randn(2, 4)}
    with pytest.raises(UntraceableCodeError) as caught:
        trace_subgraphs(model, sample, [r"re:layers\.\d+"], [*DEFAULT_IGNORE, "_as_mapping"])
    message = str(caught.value)
    assert "untraceable construct: `**` unpacking of a traced value" in message
    assert "in rebuild()" in message and "**_as_mapping(hidden)" in message
    assert "ignore=[*DEFAULT_IGNORE, 'rebuild']" in message
    assert "iteration" not in message.split("raised:")[0]
    # followed, the fix gives a chain equal to eager
    subgraphs = trace_subgraphs(model, sample, [r"re:layers\.\d+"], [*DEFAULT_IGNORE, "_as_mapping", "rebuild"])
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["output"], model(**sample), rtol=0, atol=0)


def test_kosmos2_traces_as_is_and_with_the_old_ignore_fix():
    """Kosmos-2's text model branches on `input_ids.shape` handed to _prepare_decoder_attention_mask:
    the rewriter now sees the traced size through the call site and moves the branch, so the chain is
    equal to eager with no ignore entry; the ignore entry an older error message offered still works."""
    import transformers

    from patcher import DEFAULT_IGNORE, load_traceable, run_subgraphs
    from patcher.coverage import shrink_config
    from patcher.samples import multimodal_sample

    config = shrink_config(transformers.Kosmos2Config)
    torch.manual_seed(0)
    model = load_traceable(transformers.Kosmos2ForConditionalGeneration)(config).eval()
    sample = multimodal_sample(config, batch_size=2, seq_len=8, model=model, generator=torch.Generator().manual_seed(0))
    for ignore in (None, [*DEFAULT_IGNORE, "_prepare_decoder_attention_mask"]):
        subgraphs = trace_subgraphs(model, sample, ["Kosmos2TextBlock"], ignore)
        with torch.no_grad():
            torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits,
                                       rtol=0, atol=0)


def test_tower_blocks_swallowed_by_moved_code_say_to_leave_them_out_and_that_works():
    """LLaVA-NeXT: the patcher wraps `if pixel_values ... .size(0) > 0:` around get_image_features,
    and cannot see that it reaches CLIP's blocks (another modeling file). The error names the
    wrapper by name (not a function repr) and a fix that works: leave the blocks out."""
    import transformers

    from patcher import MissingTargetsError, find_tower_blocks, load_traceable, run_subgraphs
    from patcher.coverage import shrink_config
    from patcher.samples import multimodal_sample

    config = shrink_config(transformers.LlavaNextConfig)
    torch.manual_seed(0)
    model = load_traceable(transformers.LlavaNextForConditionalGeneration)(config).eval()
    sample = multimodal_sample(config, batch_size=1, seq_len=8, model=model, generator=torch.Generator().manual_seed(0))
    text_layers = ["LlamaDecoderLayer"]
    with pytest.raises(MissingTargetsError) as caught:
        trace_subgraphs(model, sample, find_tower_blocks(model) + text_layers)
    message = str(caught.value)
    assert "swallowed by _wrapped_" in message and "<function" not in message
    assert "is code the patcher moved out of the model's forward" in message
    assert "Leave these targets out" in message
    subgraphs = trace_subgraphs(model, sample, text_layers)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, sample)["logits"], model(**sample).logits,
                                   rtol=0, atol=0)


def test_a_check_message_traced_through_says_the_run_time_values():
    # Aya Vision's merge checks `torch_compilable_check(cond, f"... tokens: {n_image_tokens}, ...")` in
    # code the patcher did not rewrite: the f-string ran while tracing, and a failing run said
    # "tokens: Proxy(sum_1), features: Proxy(mul)". Here the sample has 4 image tokens for 1 feature.
    import transformers

    from patcher import run_subgraphs
    from patcher.coverage.shrink import shrink_config
    from patcher.models import build_model
    from patcher.samples import sample_input

    config = shrink_config(transformers.AyaVisionConfig)
    torch.manual_seed(0)
    model = build_model(transformers.AyaVisionForConditionalGeneration, config, device="cpu").eval()
    sample = sample_input(config, multimodal=True)
    subgraphs = trace_subgraphs(model, sample, ["Cohere2DecoderLayer"])
    with torch.no_grad(), pytest.raises(ValueError) as eager:
        model(**sample)
    with torch.no_grad(), pytest.raises(ValueError) as traced:
        run_subgraphs(model, subgraphs, sample)
    assert str(traced.value) == str(eager.value) == \
        "Image features and image tokens do not match, tokens: 4, features: 1"


def test_every_tracing_error_is_named_once_and_exported_by_patcher_and_patcher_trace():
    """The errors are listed in one table (patcher.exports.errors), which patcher and patcher.trace both
    export from; an error class added to patcher.trace's modules without a row there would be missing
    from both."""
    import inspect

    import patcher
    import patcher.trace
    from patcher.exports.errors import TRACE_ERRORS
    from patcher.trace import errors, liveness

    defined = {name: module.__name__.rsplit(".", 1)[1] for module in (errors, liveness)
               for name, value in vars(module).items()
               if inspect.isclass(value) and issubclass(value, Exception) and value.__module__ == module.__name__}
    assert defined == TRACE_ERRORS
    for name, module in TRACE_ERRORS.items():
        error = getattr(errors if module == "errors" else liveness, name)
        assert getattr(patcher, name) is error and getattr(patcher.trace, name) is error
        assert name in patcher.__all__ and name in patcher.trace.__all__
