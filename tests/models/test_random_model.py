"""``random_model`` and ``cast_floating_point``: the dtype reaches floating-point tensors only.

``Module.to(torch.float32)`` casts complex buffers too, to real, and keeps only their real part. The
tiny Llama 4 of the sweep and the tests used to be built that way. Its vision rotary table
(``freqs_ci``, complex64) lost its sines. Chain and eager still agreed, but on a model whose vision
tower was not Llama 4's.
"""

import pytest
import torch
import transformers

from patcher.coverage.shrink import shrink_config
from patcher.models import cast_floating_point, random_model


class _WithComplexBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(2, 2)
        self.register_buffer("table", torch.polar(torch.ones(3), torch.tensor([0.5, 1.0, 2.0])))
        self.register_buffer("positions", torch.arange(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_cast_floating_point_casts_floats_and_leaves_complex_and_integer_tensors_alone(dtype):
    module = _WithComplexBuffer()
    table = module.table.clone()
    assert cast_floating_point(module, dtype) is module
    assert module.linear.weight.dtype == dtype and module.linear.bias.dtype == dtype
    assert module.table.dtype == torch.complex64 and torch.equal(module.table, table)
    assert module.positions.dtype == torch.int64


def test_cast_floating_point_refuses_a_dtype_that_is_not_floating_point():
    with pytest.raises(ValueError, match="cast_floating_point takes one of .*not torch.int8"):
        cast_floating_point(_WithComplexBuffer(), torch.int8)


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_the_tiny_llama4_keeps_its_complex_vision_rotary_table(dtype):
    cls = transformers.Llama4ForConditionalGeneration
    model = random_model(cls, shrink_config(cls.config_class), 0, dtype=dtype)
    rotary = model.vision_model.rotary_embedding
    assert rotary.freqs_ci.dtype == torch.complex64
    assert torch.equal(rotary.freqs_ci, type(rotary)._compute_freqs_ci(rotary.config))
    assert rotary.freqs_ci.imag.abs().max() > 0.5
    assert {parameter.dtype for parameter in model.parameters()} == {dtype or torch.float32}
