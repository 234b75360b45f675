"""A model traces into the same graph in every process, whatever the process's hash seed.

Distributed oneshot traces in every rank, one process each, and compares the ranks' graphs
(``patcher.integrations.llmcompressor_ranks.check_same_graphs``). Transformers iterates sets of
layer types (``for layer_type in set(self.config.layer_types)``), whose order follows string
hashes, randomized per process: rule TZ108 makes that order the first occurrence's.
"""

from __future__ import annotations

import json
import subprocess
import sys

from child_env import child_env

#: Hash seeds under which a set of the two layer types iterates in different orders (each child
#: reports its order, so the test fails if they stop doing so).
SEEDS = ("1", "2")

CHILD = """
import json

import transformers

import zoo
from patcher import DEFAULT_IGNORE, load_traceable, trace_subgraphs
from patcher.integrations.llmcompressor_ranks import _graph_fingerprint
from patcher.models import random_model
from patcher.samples import text_sample
from zoo._entries import recipe


def traced(model, sample, targets, layer_types, ignore=DEFAULT_IGNORE):
    subgraphs = trace_subgraphs(model, sample, targets, ignore=ignore)
    return {"set_order": list(set(layer_types)), "code": [subgraph.code for subgraph in subgraphs],
            "fingerprint": _graph_fingerprint(subgraphs)}


gemma3 = recipe("gemma3")
model = gemma3.tiny_model(model_class=getattr(zoo, gemma3.traceable_class))
sample = gemma3.build_sample(model.config, batch_size=1, seq_len=4, num_images=1)
results = {"zoo Gemma 3": traced(model, sample, gemma3.default_targets, model.config.text_config.layer_types,
                                 DEFAULT_IGNORE + tuple(gemma3.default_ignore))}

config = transformers.Olmo3Config(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, sliding_window=4,
                                  layer_types=["sliding_attention", "full_attention"], pad_token_id=0)
model = random_model(load_traceable(transformers.Olmo3ForCausalLM), config)
results["Olmo3"] = traced(model, text_sample(config, seq_len=5), ["Olmo3DecoderLayer"], config.layer_types)
print(json.dumps(results))
"""


def _trace_in_processes(seeds):
    children = [subprocess.Popen([sys.executable, "-c", CHILD], env=child_env(PYTHONHASHSEED=seed),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in seeds]
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-3000:]
        results.append(json.loads(out.splitlines()[-1]))
    return results


def test_set_iteration_traces_into_the_same_graph_under_every_hash_seed():
    first, second = _trace_in_processes(SEEDS)
    assert first.keys() == second.keys()
    for model in first:
        assert first[model]["set_order"] != second[model]["set_order"], \
            f"{model}: the seeds {SEEDS} iterate the set in one order, so this test cannot fail; choose others"
        assert first[model]["code"] == second[model]["code"], model
        assert first[model]["fingerprint"] == second[model]["fingerprint"], model
