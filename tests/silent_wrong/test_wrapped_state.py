"""Moved code that changes a module's settings while the graph runs (BigBird).

BigBird's forward switches itself from block-sparse to full attention on short inputs
(``self.set_attention_type("original_full")`` under ``if seq_length <= max_tokens_to_attend``).
The rewriter moves that shape branch into a wrapped function, which does not run while tracing:
the graph was traced for block-sparse attention (padding, block masks, no causal mask) and the
switch happened only when the graph ran, so the layers ran full attention without a causal mask.
The subgraph chain differed from eager by 7e-3 with no error. Now ``StateChangeError`` names the
source line and the attribute.
"""

from __future__ import annotations

import pytest
import torch
import transformers

from patcher import StateChangeError, load_traceable, run_subgraphs, trace_graph, trace_subgraphs

LAYERS = r"re:bert\.encoder\.layer\.\d+$"


def _config():
    return transformers.BigBirdConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128, attention_type="block_sparse", block_size=4, num_random_blocks=1,
        is_decoder=True, pad_token_id=0)


def _models():
    torch.manual_seed(0)
    original = transformers.BigBirdForCausalLM(_config()).eval()
    traceable = load_traceable(transformers.BigBirdForCausalLM, targets=["BigBirdLayer"])(_config()).eval()
    traceable.load_state_dict(original.state_dict())
    return original, traceable


def _sample(seed: int = 0, length: int = 7):
    return {"input_ids": torch.randint(1, 96, (2, length), generator=torch.Generator().manual_seed(seed))}


def test_settings_changed_by_moved_code_while_the_graph_runs_are_refused():
    _, traceable = _models()
    subgraphs = trace_subgraphs(traceable, _sample(), LAYERS)
    with pytest.raises(StateChangeError) as caught:
        run_subgraphs(traceable, subgraphs, _sample(1))
    message = str(caught.value)
    assert "modeling_big_bird.py:" in message and "BigBirdModel.forward" in message
    assert "BigBirdModel.attention_type: 'block_sparse' -> 'original_full'" in message
    _, traceable = _models()
    traced = trace_graph(traceable, _sample(), LAYERS)
    with pytest.raises(StateChangeError, match="attention_type"):
        traced(traceable, **_sample(1))


def test_model_put_in_that_state_before_tracing_matches_eager():
    # The fix the error names: with the setting made before tracing, the switch is not in the graph.
    original, traceable = _models()
    traceable.bert.set_attention_type("original_full")
    subgraphs = trace_subgraphs(traceable, _sample(), LAYERS)
    traced = trace_graph(traceable, _sample(), LAYERS)
    sample = _sample(2, length=9)
    with torch.no_grad():
        want = original(**sample).logits
        torch.testing.assert_close(run_subgraphs(traceable, subgraphs, sample)["logits"], want, rtol=0, atol=0)
        torch.testing.assert_close(traced(traceable, **sample)["logits"], want, rtol=0, atol=0)
