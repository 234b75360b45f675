"""Running model code on the meta device while integer inputs stay real.

Token ids, masks, image sizes and grids keep their values, so code that reads them (a vision
tower's grid, a mask builder's ``.all()``, split sizes from ``image_sizes.tolist()``) runs as in a
real run, while every large value (weights, activations) has only a shape and a dtype. ``patcher
plan`` runs its subgraphs this way, and the CLI counts a model's image tokens on meta with it.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map


@contextmanager
def untracked() -> Iterator[None]:
    """No dispatch mode inside (stand-ins made for meta kernels, which the real run does not make:
    ``patcher plan``'s live-bytes tracking must not count them)."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yield


def is_integer(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex()


class MetaWhereMixed(TorchFunctionMode):
    """Integer inputs (token ids, masks, image grids) stay real CPU tensors so that code reading
    their values (a vision tower's grid, a mask builder's ``.all()``) still works; an operation
    mixing them with meta tensors gets them moved to meta, so every large value stays on meta."""

    def __init__(self, weights: Mapping[int, torch.Tensor] | None = None):
        super().__init__()
        self.weights = weights or {}
        self.read: dict[int, torch.Tensor] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = tree_flatten((args, kwargs))[0]
        for value in flat:
            if isinstance(value, torch.Tensor) and id(value) in self.weights:
                self.read[id(value)] = value
        devices = {value.device.type for value in flat if isinstance(value, torch.Tensor) and value.ndim}
        if func in _KEEPS_VALUES and "meta" not in devices and _keeps_values(func, args, kwargs):
            # integers moved to the device of a meta value (`torch.as_tensor(image_sizes,
            # device=features.device)`, `torch.arange(n, device=x.device)`) stay real: code reads
            # their values next (`.tolist()` for split sizes)
            args, kwargs = tree_map(_cpu_device, (args, kwargs))
            devices = set()
        elif func is torch.Tensor.to and args and isinstance(args[0], torch.Tensor) and args[0].device.type == "meta":
            # a meta value moved to the device of a real one (`x.to(pixel_values.device)`) stays on meta
            args, kwargs = tree_map(_meta_device, (args, kwargs))
        if "meta" in devices and len(devices) > 1:
            with untracked():  # stand-ins of values the real run has once, on its device
                args, kwargs = tree_map(_meta_tensor, (args, kwargs))
        if func in _GROUPED_MM and "meta" in devices:
            return _grouped_mm_on_meta(func, args, kwargs)
        if func is torch.nn.functional.scaled_dot_product_attention and "meta" in devices:
            return _attention_on_meta(func, args, kwargs)
        return func(*args, **kwargs)


#: functions that make or move a tensor to a given device
_KEEPS_VALUES = {torch.Tensor.to, torch.as_tensor, torch.tensor, torch.arange}
#: grouped matrix products (fused MoE experts): their meta kernels accept bfloat16 only
_GROUPED_MM = {getattr(owner, name) for owner, name in ((torch, "_grouped_mm"), (torch.nn.functional, "grouped_mm"))
               if hasattr(owner, name)}


def _is_meta_device(value: Any) -> bool:
    return isinstance(value, (torch.device, str)) and str(value).split(":")[0] == "meta"


def _meta_device(value: Any) -> Any:
    return torch.device("meta") if isinstance(value, torch.device) or (
        isinstance(value, str) and value.split(":")[0] in ("cpu", "cuda", "xpu", "mps", "hpu", "npu")) else value


def _cpu_device(value: Any) -> Any:
    return torch.device("cpu") if _is_meta_device(value) else value


def _keeps_values(func, args, kwargs) -> bool:
    """Whether ``func`` would move real integer values (or Python numbers) to the meta device."""
    if not any(_is_meta_device(value) for value in tree_flatten((args, kwargs))[0]):
        return False
    dtype = kwargs.get("dtype") or next((value for value in args if isinstance(value, torch.dtype)), None)
    if dtype is not None and (dtype.is_floating_point or dtype.is_complex):
        return False
    if func is torch.Tensor.to:
        return isinstance(args[0], torch.Tensor) and is_integer(args[0])
    data = args[0] if args else kwargs.get("data", kwargs.get("end"))
    if isinstance(data, torch.Tensor):
        return is_integer(data)
    return all(isinstance(value, (int, bool)) for value in tree_flatten((args, kwargs.get("data")))[0]
               if not isinstance(value, (torch.dtype, torch.device, str)))


_ATTENTION_OPTIONS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _attention_on_meta(func, args, kwargs):
    """``scaled_dot_product_attention`` as a real run computes it. On meta, torch always takes the
    math path, which materializes the score matrix; a CPU or GPU run takes a fused kernel (flash or
    memory-efficient attention) wherever one applies, which allocates only the output and a float32
    log-sum-exp per query. Which one applies is asked of torch's own CPU selection, on stand-ins of
    one token with the same heads, head sizes, dtypes and options (DeepSeek's value heads, smaller
    than its query heads, rule the fused kernel out on a CPU: the math path, scores included)."""
    query, key, value = args[:3]
    options = dict(zip(_ATTENTION_OPTIONS, args[3:]), **kwargs)
    with untracked():
        def one_token(tensor):
            return torch.zeros(*tensor.shape[:-2], 1, tensor.shape[-1], dtype=tensor.dtype)
        mask = options.get("attn_mask")
        choice = torch._fused_sdp_choice(
            one_token(query), one_token(key), one_token(value),
            torch.zeros([1] * mask.ndim, dtype=mask.dtype) if isinstance(mask, torch.Tensor) else None,
            options.get("dropout_p", 0.0), options.get("is_causal", False), scale=options.get("scale"),
            enable_gqa=options.get("enable_gqa", False))
    if choice == int(torch.nn.attention.SDPBackend.MATH):
        return func(*args, **kwargs)
    converted = None
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
        # torch turns a boolean mask into an additive one first (where(~mask, -inf, 0))
        inverted = torch.empty(mask.shape, dtype=torch.bool, device="meta")
        converted = torch.empty(mask.shape, dtype=query.dtype, device="meta")
        del inverted
    logsumexp = torch.empty(query.shape[:-1], dtype=torch.float32, device="meta")
    output = torch.empty(*query.shape[:-1], value.shape[-1], dtype=query.dtype, device="meta")
    del logsumexp, converted
    return output


def _grouped_mm_on_meta(func, args, kwargs):
    """The meta kernel of ``grouped_mm`` takes bfloat16 only (the CUDA kernel's rule), while the
    CPU kernel and the eager fallbacks take float32 too: on meta, the product of bfloat16 stand-ins
    in the inputs' dtype (only shapes and dtypes are read)."""
    tensors = [value for value in tree_flatten((args, kwargs))[0] if isinstance(value, torch.Tensor)]
    dtype = kwargs.get("out_dtype") or (tensors[0].dtype if tensors else None)
    if dtype in (None, torch.bfloat16):
        return func(*args, **kwargs)
    with untracked():  # bfloat16 stand-ins for the shape: no allocation of the real run
        args, kwargs = tree_map(lambda value: value.to(torch.bfloat16) if isinstance(value, torch.Tensor)
                                and value.is_floating_point() else value, (args, kwargs))
        if "out_dtype" in kwargs:
            kwargs["out_dtype"] = torch.bfloat16
        shape = func(*args, **kwargs).shape
    return torch.empty(shape, dtype=dtype, device="meta")


def _meta_tensor(value: Any) -> Any:
    return value.to("meta") if isinstance(value, torch.Tensor) and value.ndim else value
