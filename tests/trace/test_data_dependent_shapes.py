"""A graph whose tensor shapes depend on tensor values: BLT's entropy patcher decides how many
patches a sequence has from its own predictions, and the encoder, global transformer and decoder
then run on that many patches. An fx graph records operations, not shapes, so one trace serves
every patch count, provided the code deciding the count runs when the graph runs (the rewriter
moves it into wrapped functions: the distribution, and ``process_patch_lengths``, which returns
from a branch on values)."""

from __future__ import annotations

import torch
import transformers

from patcher import load_traceable, run_subgraphs, trace_subgraphs
from patcher.coverage import shrink_config
from patcher.models import random_model
from patcher.trace import DEFAULT_IGNORE


def _patch_lengths(model, config, input_ids):
    with torch.no_grad():
        return model.model.patcher(input_ids, patch_size=config.patch_size, threshold=config.patching_threshold,
                                   max_patch_length=config.max_patch_length)[1]


def test_blt_chain_follows_eager_for_patch_counts_the_trace_never_saw():
    config = shrink_config(transformers.BltConfig)
    generator = torch.Generator().manual_seed(0)
    samples = [{"input_ids": torch.randint(0, config.vocab_size, shape, generator=generator),
                "attention_mask": torch.ones(shape, dtype=torch.long)} for shape in ((2, 7), (3, 11), (2, 9))]
    probe = random_model(transformers.BltForCausalLM, config, 0)
    with torch.no_grad():
        entropies = probe.model.patcher(samples[0]["input_ids"], patch_size=None)[0]
    # A random tiny model is about equally unsure everywhere: a threshold amid its entropies makes
    # the patch boundaries, and so the patch count, depend on the tokens.
    config.patching_threshold = entropies.median().item()
    model = random_model(transformers.BltForCausalLM, config, 0)
    counts = [_patch_lengths(model, config, sample["input_ids"]).shape[1] for sample in samples]
    lengths = [sample["input_ids"].shape[1] + 1 for sample in samples]
    assert counts != lengths, "every token a patch: the patch count would follow the length alone"

    traceable = random_model(load_traceable(transformers.BltForCausalLM, targets=["BltTransformerLayer"]), config, 0)
    traceable.load_state_dict(model.state_dict())
    subgraphs = trace_subgraphs(traceable, samples[0], ["BltTransformerLayer"], DEFAULT_IGNORE)
    with torch.no_grad():
        for sample in samples:
            expected = model(**sample, use_cache=False).logits
            torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["logits"], expected, rtol=0, atol=0)
