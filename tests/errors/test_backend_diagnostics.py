"""The GPU backend's diagnostics outside the corpus: what runs after the pipeline (PTX, ptxas, the kernel's
metadata), the layout strings, and the classification of each refusal (user error or compiler bug)."""
from __future__ import annotations

import json
import pathlib

import pytest

from tawa.errors import CompilationError, InternalCompilerError
from tawa.frontend import parse_and_lower, read_source
from tawa.ir import attrs
from tawa.lowering import backend, emit_ptx, layouts
from tawa.options import CompileOptions

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEMM = ROOT / "examples" / "gemm.tawa"


def _llvm_module():
    """The gemm example after the whole pipeline (`lower-to-llvm`), before the backend's last step."""
    from tawa.compiler import compile_module
    source, filename = read_source(str(GEMM))
    module = parse_and_lower(source, filename)
    return compile_module(module, CompileOptions(warp_specialize=False), stop_after="lower-to-llvm")


def test_shared_memory_beyond_the_block_limit_is_refused():
    module = _llvm_module()
    info = json.loads(attrs.KERNEL_INFO.get(module.operation))
    info["shared_bytes"] = 300 * 1024
    attrs.KERNEL_INFO.set(module.operation, json.dumps(info))
    with pytest.raises(CompilationError, match="bytes of shared memory, more than") as e:
        backend.build_kernel(module, ptxas=False)
    assert "smaller tiles" in e.value.note


def test_module_without_kernel_info_is_an_internal_error():
    module = _llvm_module()
    del module.operation.attributes["tawa.kernel_info"]
    with pytest.raises(InternalCompilerError) as e:
        backend.build_kernel(module, ptxas=False)
    assert e.value.pass_name == backend.NAME
    assert str(e.value).startswith("error: internal compiler error in pass 'build-kernel'")


def test_unexpected_exceptions_in_the_backend_become_internal_errors(monkeypatch):
    def boom(module, text=None):
        raise KeyError("objects")
    monkeypatch.setattr(emit_ptx, "emit_ptx", boom)
    with pytest.raises(InternalCompilerError, match="KeyError") as e:
        backend.build_kernel(_llvm_module(), ptxas=False)
    assert e.value.pass_name == backend.NAME


def test_missing_ptxas_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(emit_ptx, "find_ptxas", lambda: None)
    with pytest.raises(CompilationError, match="ptxas was not found") as e:
        emit_ptx.assemble(".version 8.0")
    assert "TAWA_PTXAS" in e.value.note


def test_ptxas_that_cannot_run_is_a_user_error(tmp_path):
    with pytest.raises(CompilationError, match="could not run ptxas") as e:
        emit_ptx.assemble(".version 8.0", ptxas=str(tmp_path / "no-ptxas"))
    assert "TAWA_PTXAS" in e.value.note


@pytest.mark.skipif(emit_ptx.find_ptxas() is None, reason="ptxas not installed")
def test_ptx_that_ptxas_rejects_is_an_internal_error():
    with pytest.raises(InternalCompilerError, match="ptxas rejected the generated PTX") as e:
        emit_ptx.assemble(".version 8.0\n.target sm_90a\n.address_size 64\nthis is not ptx\n")
    assert e.value.pass_name == emit_ptx.PTXAS


@pytest.mark.parametrize("text", ["mma<128x128", "mma<128x128,w=x>", "grid<4>", ""])
def test_malformed_layout_strings_are_internal_errors(text):
    with pytest.raises(InternalCompilerError, match="malformed layout"):
        layouts.parse(text)


def test_layout_refusals_carry_notes():
    with pytest.raises(CompilationError) as e:
        layouts.mma(8, 128, 4)
    assert "at least 16" in e.value.note
    with pytest.raises(CompilationError) as e:
        layouts.blocked((64, 128), 24)
    assert "@num_warps(4)" in e.value.note
    with pytest.raises(CompilationError) as e:
        layouts.blocked((96, 128), 4)
    assert "powers of two" in e.value.note
