"""Show an untraceable construct inside transformers' shared code, and the one-name fix.

    python docs/examples/shared_code.py

Gemma3's ``create_masks_for_vision_model`` (in ``modeling_gemma3.py``) builds its masks with
``masking_utils._preprocess_mask_arguments``, which branches on ``attention_mask.ndim``. No patch
of ``modeling_gemma3.py`` changes that line; keeping the modeling-file call opaque does. tracezoo
ignores this builder by default, so the script first takes it out of the defaults to show the
error a model with a builder tracezoo does not know yet gives, then traces with it ignored and
checks the chain against the eager model. GUIDE.md shows this script's real output.
"""

import torch

from patcher import DEFAULT_IGNORE, UntraceableCodeError, run_subgraphs, trace_subgraphs
from patcher.verify import run_eagerly
from zoo.gemma3 import recipe as gemma3

BUILDER = "create_masks_for_vision_model"


def main() -> None:
    model = gemma3.tiny_model()
    sample = gemma3.build_sample(model.config, batch_size=1, seq_len=4)
    without = [name for name in DEFAULT_IGNORE if name != BUILDER]
    print(f"1. tracing Gemma3ForConditionalGeneration with {BUILDER} not ignored:")
    try:
        trace_subgraphs(model, sample, ["Gemma3DecoderLayer"], ignore=without)
    except UntraceableCodeError as error:
        print("\n".join("   " + line for line in str(error).splitlines()[1:]))
    else:
        raise SystemExit(f"expected an error: does transformers' {BUILDER} still call masking_utils?")
    subgraphs = trace_subgraphs(model, sample, ["Gemma3DecoderLayer"], ignore=without + [BUILDER])
    print(f"2. with ignore=[..., {BUILDER!r}]: traced into {len(subgraphs)} subgraphs")
    other = gemma3.build_sample(model.config, batch_size=2, seq_len=7, num_images=2, left_padding=2)
    with torch.no_grad():
        torch.testing.assert_close(run_subgraphs(model, subgraphs, other)["logits"], run_eagerly(model, other).logits,
                                   rtol=0, atol=0)
    print("   and equals the original on inputs of other shapes")


if __name__ == "__main__":
    main()
