"""Bytes of the tensors alive while code runs, from every allocation the dispatcher sees.

The graph of a subgraph shows only the values handed between the modules it calls; the inside of a
called module (attention scores, the MLP's intermediate activations, a vision block's patches)
allocates and frees tensors the graph never names. On meta tensors the module's own Python code
runs as it would on a GPU, so tensors are freed at the same points: counting each new storage
when an operation returns it, and releasing it when the last tensor using it is garbage, gives
the live bytes at every step, hence the peak inside each call.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten



class LiveBytes(TorchDispatchMode):
    """Live bytes of storages allocated by operations while the mode is active (``live``) and their
    peak (``peak``). A view or in-place result shares its input's storage and allocates nothing;
    storages made elsewhere (parameters, the sample) are never counted."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        #: storage -> [bytes, tensors using it]
        self._storages: dict[int, list[int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        inputs = {_storage_key(value) for value in tree_flatten((args, kwargs))[0] if isinstance(value, torch.Tensor)}
        for value in tree_flatten(result)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value, inputs)
        return result

    def _track(self, tensor: torch.Tensor, inputs: set[int]) -> None:
        key = _storage_key(tensor)
        if key is None:
            return
        entry = self._storages.get(key)
        if entry is None:
            if key in inputs:
                return  # a view or in-place result of a tensor made elsewhere
            entry = self._storages[key] = [tensor.untyped_storage().nbytes(), 0]
            self.live += entry[0]
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(tensor, self._release, key)

    def _release(self, key: int) -> None:
        entry = self._storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            del self._storages[key]
            self.live -= entry[0]

    @contextmanager
    def measure(self) -> Iterator["Measured"]:
        """The peak of live bytes inside the block above those alive when it began (``extra``)."""
        saved, start = self.peak, self.live
        self.peak = self.live
        measured = Measured()
        try:
            yield measured
        finally:
            measured.extra = self.peak - start
            self.peak = max(saved, self.peak)

    def transient(self, extra: int) -> None:
        """A call that was not run again (a cached repeat of a layer) would have peaked ``extra``
        bytes above what is alive now."""
        self.peak = max(self.peak, self.live + extra)


class Measured:
    extra: int = 0


def _storage_key(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage()._cdata
    except (RuntimeError, NotImplementedError):  # tensors without storage (sparse, nested, functional)
        return None
