import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))
# Nothing is downloaded in tests; subprocesses inherit this too.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# "ci" keeps the default run short on 2 cores; "thorough" is for a long local run:
#   HYPOTHESIS_PROFILE=thorough bash scripts/test
settings.register_profile(
    "ci", max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The CUDA case carries the `gpu` mark, so `pytest -m gpu` (scripts/gpu_check) selects every test
# that runs on the GPU: the `device`-parametrized ones and those marked by hand.
DEVICES = ["cpu"] + ([pytest.param("cuda", marks=pytest.mark.gpu)] if torch.cuda.is_available() else [])

#: The slice CI runs on every transformers of its matrix (``.ci/run``, ``pytest -m versions``): tiny
#: random models of many architectures, text and images, the silent-wrong and exactness checks, and
#: the zoo regenerated for that version. Node id prefixes, from the repository root.
VERSIONS_SLICE = (
    "tests/zoo/",
    "tests/verify/test_text_equivalence.py::",
    "tests/coverage/test_coverage.py::test_architecture_traces_and_equals_eager[",
    "tests/coverage/test_coverage_images.py::",
    "tests/verify/test_kernels.py::",
    "tests/silent_wrong/",
    "tests/registry/test_versions.py::",
    "tests/trace/test_mid_trace_runs.py::",  # fx internals the tracer runs model code in the middle of a trace with
)


def pytest_configure(config):
    # torch only warns when a complex tensor is cast to a real dtype (`Module.to(torch.float32)` on
    # a model with a complex buffer): its imaginary part is gone and the model computes another thing
    config.addinivalue_line("filterwarnings", "error:Casting complex values to real discards the imaginary part")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(VERSIONS_SLICE):
            item.add_marker(pytest.mark.versions)


def pytest_generate_tests(metafunc):
    # A plain parameter, not a fixture: hypothesis tests may take it too.
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", DEVICES)


@pytest.fixture(scope="session")
def coverage_row(tmp_path_factory):
    """``check_architecture(name)``, once per test session: the image, video and audio slices of
    the sweep share their rows (Qwen2-VL is in two of them) and one folder of generated files."""
    from patcher.coverage import check_architecture

    cache_dir = tmp_path_factory.mktemp("generated")
    rows: dict = {}

    def row(name: str):
        from versions import require_classes

        require_classes(name)
        if name not in rows:
            rows[name] = check_architecture(name, cache_dir=cache_dir)
        return rows[name]

    return row
