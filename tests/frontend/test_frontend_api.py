"""The entry points: Python strings, paths, contexts, constant overrides, locations, verification."""
from __future__ import annotations

import pytest
from mlir import ir

from tawa.errors import CompilationError
from tawa.frontend import parse_and_lower, read_source
from tawa.ir.dialect import make_context

from frontend_checks import EXAMPLES, kernel_attrs, kernel_op

SCALE = """
@grid(cdiv(N, BLOCK))
def scale(X: f32[N], Y: f32[N], alpha: f32, BLOCK: const = 256):
    pid = program_id(0)
    x = load(X, pid, BLOCK)
    store(Y, pid, x * alpha)
"""


def test_python_string():
    m = parse_and_lower(SCALE)
    m.operation.verify()
    f = kernel_op(m)
    assert ir.StringAttr(f.attributes["sym_name"]).value == "scale"
    ftype = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
    assert [str(t) for t in ftype.inputs] == ["memref<?xf32>", "memref<?xf32>", "f32"]
    block = f.regions[0].blocks[0]
    ops = [op.operation for op in block.operations]
    names = [op.name for op in ops]
    load, splat, mul, store = (ops[names.index(n)] for n in ("tawa.load", "tawa.splat", "arith.mulf", "tawa.store"))
    assert names.index("tawa.load") < names.index("tawa.splat") < names.index("arith.mulf") < names.index("tawa.store")
    assert str(load.results[0].type) == "tensor<256xf32>"
    assert splat.operands[0] == block.arguments[2]                       # alpha, splatted
    assert list(mul.operands) == [load.results[0], splat.results[0]]     # x * alpha
    assert store.operands[0] == block.arguments[1] and store.operands[1] == mul.results[0]
    assert kernel_attrs(m)["tawa.grid"] == ["cdiv(N, 256)"]


def test_read_source_path_and_text(tmp_path):
    src, name = read_source(str(EXAMPLES / "gemm.tawa"))
    assert name.endswith("gemm.tawa") and "def gemm" in src
    assert read_source(SCALE) == (SCALE, "<string>")
    p = tmp_path / "k.tawa"
    p.write_text(SCALE)
    assert read_source(str(p)) == (SCALE, str(p))


def test_given_context_is_used():
    ctx = make_context()
    m = parse_and_lower(SCALE, context=ctx)
    assert m.context is ctx
    with ctx:
        assert str(ir.Module.parse(str(m))) == str(m)


def test_locations_point_into_the_source():
    m = parse_and_lower(SCALE, filename="scale.tawa")
    asm = m.operation.get_asm(enable_debug_info=True)
    assert 'loc("scale.tawa":5:9)' in asm          # the load
    assert 'loc("scale.tawa":6:5)' in asm          # the store


def test_constant_override_changes_ir():
    small = str(parse_and_lower(SCALE, constants={"BLOCK": 64}))
    assert "tensor<64xf32>" in small and "tensor<256xf32>" not in small
    assert kernel_attrs(parse_and_lower(SCALE, constants={"BLOCK": 64}))["tawa.grid"] == ["cdiv(N, 64)"]


def test_causal_constant_adds_the_mask():
    src, name = read_source(str(EXAMPLES / "flash_attention.tawa"))
    # the mask and the loop bound in the IR: tests/passes/frontend/flash_attention.mlir (CAUSAL)
    text = str(parse_and_lower(src, name, constants={"CAUSAL": 1, "HEAD_DIM": 64}))
    assert "tensor<128x64xbf16>" in text
    attrs = kernel_attrs(parse_and_lower(src, name, constants={"CAUSAL": 1, "HEAD_DIM": 64}))
    assert attrs["tawa.constants"]["CAUSAL"] == 1 and attrs["tawa.params"][0]["shape"][-1] == 64


def test_unknown_constant_is_an_error():
    with pytest.raises(CompilationError, match="unknown constant 'BLOCK_Q'"):
        parse_and_lower(SCALE, constants={"BLOCK_Q": 3})


def test_constant_override_type_is_checked():
    src, name = read_source(str(EXAMPLES / "gemm.tawa"))
    with pytest.raises(CompilationError, match="expected a dtype name"):
        parse_and_lower(src, name, constants={"DTYPE": 3})
    with pytest.raises(CompilationError, match="expected an int, float or bool"):
        parse_and_lower(src, name, constants={"BLOCK_M": "f16"})
    # the IR spelling of a dtype is accepted too
    assert "f8E4M3FN" in str(parse_and_lower(src, name, constants={"DTYPE": "f8E4M3FN"}))


def test_override_to_non_power_of_two_is_reported_at_the_use():
    with pytest.raises(CompilationError, match="not a power of two or a multiple of 16") as info:
        parse_and_lower(SCALE, constants={"BLOCK": 100})
    assert info.value.location.line == 5


@pytest.mark.parametrize("block", [48, 96, 176, 192])
def test_multiples_of_16_are_tile_extents(block):
    # The language takes them; the GPU backend decides which tiles may hold them (shared and dot tiles).
    assert f"tensor<{block}xf32>" in str(parse_and_lower(SCALE, constants={"BLOCK": block}))


@pytest.mark.parametrize("block", [3, 24, 100, 200])
def test_other_extents_are_refused(block):
    with pytest.raises(CompilationError, match=f"tile dimension {block} is not a power of two or a multiple of 16"):
        parse_and_lower(SCALE, constants={"BLOCK": block})


def test_missing_grid_gives_empty_grid_and_num_warps():
    m = parse_and_lower(SCALE.replace("@grid(cdiv(N, BLOCK))", "@num_warps(8)"))
    assert kernel_attrs(m)["tawa.grid"] == []
    assert "tawa.num_warps = 8 : i32" in str(m)


def test_grid_folds_constants_and_keeps_symbols():
    src = """
@grid(cdiv(M * N, BLOCK) + 0 * X, max(Z, 2), min(BLOCK // 64, 2 + 1))
def k(A: f32[M, N, Z], BLOCK: const = 256, X: const = 7):
    pass
"""
    assert kernel_attrs(parse_and_lower(src))["tawa.grid"] == ["cdiv(M * N, 256) + 0", "max(Z, 2)", "3"]


# Comments, continuations and trailing commas: tests/passes/frontend/syntax.tawa.


def test_import_is_cheap():
    import subprocess, sys
    code = "import sys, tawa.frontend; print('lark' in sys.modules, 'tawa.frontend.lower' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
