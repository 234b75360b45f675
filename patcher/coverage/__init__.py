"""Coverage: every generative transformers architecture, built tiny, traced and compared.

- :mod:`.shrink`: ``shrink_config(config_class)``, a tiny config from the class defaults.
- :mod:`.discover`: ``architectures()`` to cover and ``find_targets(model)`` (decoder layers).
- the samples come from :mod:`patcher.samples` (:mod:`~patcher.samples.sweep`: text samples that avoid
  special tokens; :mod:`~patcher.samples.modalities`: what the sweep feeds besides text, one
  declaration per modality, ``patcher/samples/<modality>/modality.py``).
- :mod:`.check`: ``check_architecture(name) -> CoverageRow``, never raising for model failures.
- :mod:`.runner`: one process per architecture with a time limit; :mod:`.report`: tables.
"""

from .check import Attempt, CoverageRow, check_architecture, tensor_diff
from .discover import architectures, count_target_calls, find_targets
from .shrink import shrink_config, shrink_dict

__all__ = ["Attempt", "CoverageRow", "architectures", "check_architecture", "count_target_calls",
           "find_targets", "shrink_config", "shrink_dict", "tensor_diff"]
