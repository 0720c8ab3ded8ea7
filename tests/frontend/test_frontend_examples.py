"""Every example kernel lowers to a verified module with the expected kernel attributes. The ops and types of
each example's IR are checked line by line by the FileCheck tests in tests/passes/frontend/."""
from __future__ import annotations

import pytest
from mlir import ir

from tawa.frontend import parse_and_lower, read_source

from frontend_checks import EXAMPLES, kernel_attrs

ALL = sorted(p.name for p in EXAMPLES.glob("*.tawa"))


def lower(name, **constants):
    return parse_and_lower(*read_source(str(EXAMPLES / name)), constants=constants or None)


def test_all_workloads_present():
    assert {"gemm.tawa", "gemm_bias_act.tawa", "gemm_fp8.tawa", "swiglu.tawa", "flash_attention.tawa",
            "softmax.tawa"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_example_verifies_and_round_trips(name):
    m = lower(name)
    m.operation.verify()
    text = str(m)
    again = ir.Module.parse(text, m.context)
    again.operation.verify()
    assert str(again) == text


def test_gemm():
    m = lower("gemm.tawa")
    attrs = kernel_attrs(m)
    assert attrs["tawa.grid"] == ["cdiv(M, 128)", "cdiv(N, 256)"]
    assert attrs["tawa.constants"] == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "DTYPE": "bf16"}
    assert attrs["tawa.params"] == [
        {"name": "A", "kind": "tensor", "dtype": "bf16", "shape": ["M", "K"]},
        {"name": "B", "kind": "tensor", "dtype": "bf16", "shape": ["K", "N"]},
        {"name": "C", "kind": "tensor", "dtype": "bf16", "shape": ["M", "N"], "written": True},
    ]


def test_gemm_fp16_via_dtype_constant():
    m = lower("gemm.tawa", DTYPE="f16")
    assert kernel_attrs(m)["tawa.params"][0]["dtype"] == "f16"


def test_gemm_bias_act():
    m = lower("gemm_bias_act.tawa")
    assert kernel_attrs(m)["tawa.params"][2] == {"name": "bias", "kind": "tensor", "dtype": "f32", "shape": ["N"]}


def test_gemm_fp8():
    m = lower("gemm_fp8.tawa")
    params = kernel_attrs(m)["tawa.params"]
    assert params[0]["dtype"] == "f8E4M3FN" and params[1]["shape"] == ["N", "K"]


def test_softmax():
    m = lower("softmax.tawa")
    assert kernel_attrs(m)["tawa.grid"] == ["cdiv(M, 2)"]


def test_flash_attention():
    m = lower("flash_attention.tawa")
    attrs = kernel_attrs(m)
    assert attrs["tawa.grid"] == ["cdiv(S, 128)", "H", "Z"]
    assert attrs["tawa.params"][0]["shape"] == ["Z", "H", "S", 128]
    assert attrs["tawa.params"][4] == {"name": "sm_scale", "kind": "scalar", "dtype": "f32"}
