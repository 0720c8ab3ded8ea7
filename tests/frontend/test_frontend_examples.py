"""Every example kernel lowers to a verified module with the expected ops, types and kernel attributes."""
from __future__ import annotations

import pytest
from mlir import ir

from tawa.frontend import parse_and_lower, read_source

from frontend_checks import EXAMPLES, check_not, check_order, count, kernel_attrs

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
    text = str(m)
    check_order(text, [
        r"func.func @gemm\(%arg0: memref<\?x\?xbf16>, %arg1: memref<\?x\?xbf16>, %arg2: memref<\?x\?xbf16>\)",
        r'"tawa.dim"\(%arg0\) \{axis = 1 : i32\}',               # K
        r'"tawa.program_id"\(\) \{axis = 0 : i32\}',
        r'"tawa.program_id"\(\) \{axis = 1 : i32\}',
        r'"tawa.splat".*-> tensor<128x128xf32>',
        r"scf.for .* iter_args\(.*\) -> \(tensor<128x128xf32>\)\s+: i32",
        r'"tawa.load"\(%arg0, .*\) -> tensor<128x64xbf16>',
        r'"tawa.load"\(%arg1, .*\) -> tensor<64x128xbf16>',
        r'"tawa.dot".*\(tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>\) -> tensor<128x128xf32>',
        r"scf.yield",
        r"arith.truncf .* tensor<128x128xf32> to tensor<128x128xbf16>",
        r'"tawa.store"\(%arg2, ',
        r"return",
    ])
    attrs = kernel_attrs(m)
    assert attrs["tawa.grid"] == ["cdiv(M, 128)", "cdiv(N, 128)"]
    assert attrs["tawa.constants"] == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "DTYPE": "bf16"}
    assert attrs["tawa.params"] == [
        {"name": "A", "kind": "tensor", "dtype": "bf16", "shape": ["M", "K"]},
        {"name": "B", "kind": "tensor", "dtype": "bf16", "shape": ["K", "N"]},
        {"name": "C", "kind": "tensor", "dtype": "bf16", "shape": ["M", "N"]},
    ]


def test_gemm_fp16_via_dtype_constant():
    m = lower("gemm.tawa", DTYPE="f16")
    text = str(m)
    check_order(text, [r"memref<\?x\?xf16>", r"tensor<128x64xf16>", r"tensor<128x128xf32> to tensor<128x128xf16>"])
    check_not(text, [r"bf16"])
    assert kernel_attrs(m)["tawa.params"][0]["dtype"] == "f16"


def test_gemm_bias_act():
    m = lower("gemm_bias_act.tawa")
    text = str(m)
    check_order(text, [
        r"memref<\?xf32>",                                        # bias: f32[N]
        r'"tawa.dot"',
        r'"tawa.load"\(%arg2, %\w+\) : \(memref<\?xf32>, i32\) -> tensor<128xf32>',
        r'"tawa.expand_dims".*\{axis = 0 : i32\}.*-> tensor<1x128xf32>',
        r'"tawa.broadcast".*-> tensor<128x128xf32>',
        r"arith.addf",
        r"math.exp",                                              # sigmoid in the gelu
        r"arith.truncf",
        r'"tawa.store"',
    ])
    assert kernel_attrs(m)["tawa.params"][2] == {"name": "bias", "kind": "tensor", "dtype": "f32", "shape": ["N"]}


def test_gemm_fp8():
    m = lower("gemm_fp8.tawa")
    text = str(m)
    check_order(text, [
        r"memref<\?x\?xf8E4M3FN>",
        r'"tawa.load"\(%arg1, .*-> tensor<128x128xf8E4M3FN>',
        r'"tawa.trans".*\(tensor<128x128xf8E4M3FN>\) -> tensor<128x128xf8E4M3FN>',
        r'"tawa.dot".*\(tensor<128x128xf8E4M3FN>, tensor<128x128xf8E4M3FN>, tensor<128x128xf32>\)',
        r'"tawa.load"\(%arg2, .*-> tensor<128xf32>',
        r'"tawa.load"\(%arg3, .*-> tensor<128xf32>',
        r"arith.mulf", r"arith.mulf",
        r"to tensor<128x128xbf16>",
    ])
    params = kernel_attrs(m)["tawa.params"]
    assert params[0]["dtype"] == "f8E4M3FN" and params[1]["shape"] == ["N", "K"]


def test_swiglu_shares_a_load():
    text = str(lower("swiglu.tawa"))
    check_order(text, [r"scf.for .* -> \(tensor<128x64xf32>, tensor<128x64xf32>\)"])
    loop = text[text.index("scf.for"):]
    assert count(loop, r'"tawa.load"\(%arg0') == 1
    assert count(loop, r'"tawa.dot"') == 2
    check_order(text, [r"scf.yield", r"math.exp", r"arith.mulf", r"arith.truncf", r'"tawa.store"'])


def test_softmax():
    m = lower("softmax.tawa")
    text = str(m)
    check_order(text, [
        r'"tawa.dim"\(%arg0\) \{axis = 1 : i32\}',                # N, for the column mask
        r'"tawa.load".*-> tensor<4x1024xf32>',
        r'"tawa.arange"\(\) \{end = 1024 : i32, start = 0 : i32\}',
        r"arith.cmpi slt, .* : tensor<1x1024xi32>",
        r"arith.select",
        r'"tawa.reduce".*\{axis = 1 : i32, kind = "max"\}.*-> tensor<4xf32>',
        r"math.exp",
        r'"tawa.reduce".*kind = "sum"',
        r"arith.divf",
        r'"tawa.store"',
    ])
    check_not(text, ["scf.for"])
    assert kernel_attrs(m)["tawa.grid"] == ["cdiv(M, 4)"]


def test_flash_attention():
    m = lower("flash_attention.tawa")
    text = str(m)
    check_order(text, [
        r"memref<\?x\?x\?x\?xbf16>",
        r'"tawa.dim"\(%arg0\) \{axis = 2 : i32\}',                # S
        r'"tawa.load"\(%arg0, %\w+, %\w+, %\w+, %\w+\) : \(memref<\?x\?x\?x\?xbf16>, i32, i32, i32, i32\) '
        r"-> tensor<128x128xbf16>",
        r"scf.for .* -> \(tensor<128xf32>, tensor<128x128xf32>, tensor<128xf32>\)",
        r'"tawa.trans"',
        r'"tawa.dot".*-> tensor<128x64xf32>',
        r"arith.select",
        r'kind = "max"',
        r"math.exp2",
        r'kind = "sum"',
        r'"tawa.dot".*\(tensor<128x64xbf16>, tensor<64x128xbf16>, tensor<128x128xf32>\)',
        r"scf.yield",
        r"arith.divf",
        r'"tawa.store"\(%arg3, ',
    ])
    check_not(text, [r"arith.cmpi sle"])                         # CAUSAL = 0 folds the mask away
    attrs = kernel_attrs(m)
    assert attrs["tawa.grid"] == ["cdiv(S, 128)", "H", "Z"]
    assert attrs["tawa.params"][0]["shape"] == ["Z", "H", "S", 128]
    assert attrs["tawa.params"][4] == {"name": "sm_scale", "kind": "scalar", "dtype": "f32"}
