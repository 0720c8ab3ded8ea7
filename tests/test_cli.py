"""tawac: emitting IR, constant overrides, the pass dump, and error reporting (no GPU needed)."""
import pathlib
import subprocess
import sys

from mlir import ir

from tawa.cli import main
from tawa.ir.dialect import make_context

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"

GEMM = str(EXAMPLES / "gemm.tawa")


def test_emit_mlir_prints_a_verified_tawa_module(capsys):
    assert main([GEMM, "--emit", "mlir"]) == 0
    text = capsys.readouterr().out
    assert "tawa.load" in text and "tawa.dot" in text and "tawa.store" in text
    with make_context():
        assert ir.Module.parse(text).operation.verify()


def test_define_overrides_a_constant(capsys):
    assert main([GEMM, "--emit", "tawa", "-D", "BLOCK_N=64", "--warp-specialize", "off"]) == 0
    assert "tensor<128x64xf32>" in capsys.readouterr().out


def test_dump_ir_after_all_shows_every_tile_pass(capsys):
    assert main([GEMM, "--emit", "mlir", "--dump-ir-after-all"]) == 0
    err = capsys.readouterr().err
    for name in ("frontend", "canonicalize", "aref-insertion", "partition", "protocol-check"):
        assert f"IR Dump After {name} " in err
    assert "tawa.aref_create" in err and '"producer"' in err and '"consumer"' in err


def test_warp_specialize_off_keeps_the_plain_loop(capsys):
    assert main([GEMM, "--emit", "mlir", "--warp-specialize", "off"]) == 0
    assert "tawa.aref" not in capsys.readouterr().out


def test_bad_program_reports_location_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.tawa"
    bad.write_text("@grid(1)\ndef k(A: f32[M]):\n    x = load(A, (0,), (3,))\n")
    assert main([str(bad), "--emit", "mlir"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "power of two" in err and "Traceback" not in err


def test_missing_file(capsys):
    assert main(["does/not/exist.tawa"]) == 1
    assert "no such kernel file" in capsys.readouterr().err


def test_entry_point_runs_as_module():
    out = subprocess.run([sys.executable, "-m", "tawa", GEMM, "--emit", "tawa"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "func.func @gemm" in out.stdout


def test_verbose_prints_the_ptxas_resource_report(tmp_path, capsys):
    out = tmp_path / "gemm.cubin"
    assert main([GEMM, "--emit", "cubin", "-o", str(out), "--verbose"]) == 0
    err = capsys.readouterr().err
    assert "registers" in err and "spill" in err
    assert out.read_bytes()[:4] == b"\x7fELF"
