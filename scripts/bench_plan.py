"""Time ``patcher plan`` (build on meta, trace, meta propagation) for the real bundled configs.

    .venv/bin/python scripts/bench_plan.py

Prints seconds per config (median of 3, after one warm-up that pays the imports), and the
peaks. The issue's target: under 5 s each on 2 cores.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from patcher.plan import plan_model  # noqa: E402
from patcher.plan.report import human  # noqa: E402

CASES = [
    ("LlamaForCausalLM", "Meta-Llama-3-8B", False),
    ("DeepseekV3ForCausalLM", "DeepSeek-V3", False),
    ("TraceableQwen2VLForConditionalGeneration", "Qwen2-VL-2B-Instruct", True),
    ("TraceableMllamaForConditionalGeneration", "Llama-3.2-11B-Vision-Instruct", True),
]


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    for model_class, model_id, multimodal in CASES:
        times = []
        plan = None
        for _ in range(repeats + 1):
            start = time.perf_counter()
            plan = plan_model(model_id, model_class, multimodal_data=multimodal, seq_len=2048, samples=512,
                              algorithm="gptq")
            times.append(time.perf_counter() - start)
        print(f"{model_id:32s} first {times[0]:5.2f} s  median {statistics.median(times[1:]):5.2f} s  "
              f"{len(plan.subgraphs)} subgraphs  gpu {human(plan.peak_gpu_bytes)}  cpu {human(plan.peak_cpu_bytes)}")


if __name__ == "__main__":
    main()
