"""Source rewriter: turns a transformers modeling file into a variant torch.fx can trace.

>>> from patcher.rewrite import patch_source
>>> src = '''import torch
... def pool(x: torch.Tensor):
...     b, t, *_ = x.shape
...     return x.view(b, t, -1)
... '''
>>> print(patch_source(src).code.split("\\n\\n", 1)[1])
import torch
def pool(x: torch.Tensor):
    # TRACING(TZ104): starred shape unpacking -> indexing
    b, t = x.shape[0], x.shape[1]
    return x.view(b, t, -1)
<BLANKLINE>

Rules live in `patcher.rewrite.rules`, one module per rule (SPEC, CODE, rewrite()); their codes, texts
and precedence in `patcher.registry.rules`.
"""

from .api import PatchResult, patch_file, patch_source
from .engine import Blocker, Rewrite
from .errors import PatchError
from .rules import ALL_RULES, RULES_BY_CODE

__all__ = [
    "ALL_RULES",
    "Blocker",
    "PatchError",
    "PatchResult",
    "RULES_BY_CODE",
    "Rewrite",
    "patch_file",
    "patch_source",
]
