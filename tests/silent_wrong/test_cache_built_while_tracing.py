"""A key/value cache the forward builds while tracing must not be shared by every run of the graph.

XLM (and Flaubert) build an ``EncoderDecoderCache`` on every call, whatever ``use_cache`` says. While
tracing that object became a constant of the graph, so every run appended its keys to the previous
run's: the second run of a graph traced on 7 tokens attended over 14 keys (here a mask shape caught
it; a model without a mask would have computed over stale keys without a word).
"""

import torch
import transformers

from patcher import load_traceable, run_subgraphs, trace_graph, trace_subgraphs
from patcher.coverage import shrink_config
from patcher.models import random_model


def test_each_run_starts_from_the_cache_as_traced():
    config = shrink_config(transformers.XLMConfig)
    model = random_model(load_traceable(transformers.XLMWithLMHeadModel), config, seed=0)
    generator = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(5, 50, (2, 7), generator=generator)} for _ in range(3)]
    subgraphs = trace_subgraphs(model, batches[0], ["MultiHeadAttention"])
    traced = trace_graph(model, batches[0], ["MultiHeadAttention"])
    for batch in batches + batches[:1]:
        with torch.no_grad():
            expected = model(**batch).logits
            torch.testing.assert_close(run_subgraphs(model, subgraphs, batch)["logits"], expected, rtol=0, atol=0)
            torch.testing.assert_close(traced.forward(model, **batch)["logits"], expected, rtol=0, atol=0)
