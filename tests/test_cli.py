"""tawac: emitting IR, constant overrides, the pass dump, and error reporting (no GPU needed)."""
import pathlib
import os
import re
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


def test_spills_are_warned_about_without_verbose(capsys):
    """A 256x256 tile (256 accumulator registers per thread in each consumer group) spills: tawac says so without
    --verbose, and says nothing of the resource report for a kernel that does not spill."""
    assert main([GEMM, "--emit", "ptx", "-o", os.devnull, "-D", "BLOCK_M=256", "-D", "BLOCK_N=256"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: ptxas: \d+ registers, [1-9]\d* bytes spill stores", err)
    assert main([GEMM, "--emit", "ptx", "-o", os.devnull]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err and "ptxas" not in err


def test_register_budgets_reach_the_ptx(capsys):
    assert main([GEMM, "--emit", "ptx", "--warp-specialize", "on", "--producer-registers", "48",
                 "--consumer-registers", "224"]) == 0
    ptx = capsys.readouterr().out
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+48;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+224;", ptx)
    assert not re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)   # not the default


def test_num_buffers_warp_spec_alias_and_verify_each(capsys):
    assert main([GEMM, "--emit", "mlir", "--warp-specialize", "on", "--num-buffers-warp-spec", "3",
                 "--verify-each"]) == 0
    assert ", 3 : i32>" in capsys.readouterr().out


def test_output_into_a_missing_folder_fails_before_compiling(tmp_path, monkeypatch, capsys):
    import tawa.compiler

    def must_not_run(*args, **kwargs):
        raise AssertionError("compiled although the output cannot be written")
    monkeypatch.setattr(tawa.compiler, "compile_source", must_not_run)
    out = tmp_path / "missing" / "dir" / "x.ptx"
    assert main([GEMM, "--emit", "ptx", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tawac: error:") and "no such directory" in err and "Traceback" not in err
    assert main([GEMM, "--emit", "ptx", "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main([GEMM, "--emit", "cubin"]) == 2
    assert "needs -o" in capsys.readouterr().err


def test_output_write_error_is_clean(tmp_path, monkeypatch, capsys):
    import tawa.cli

    def failing_open(*args, **kwargs):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tawa.cli, "open", failing_open, raising=False)
    assert main([GEMM, "--emit", "tawa", "-o", str(tmp_path / "x.mlir")]) == 1
    err = capsys.readouterr().err
    assert "tawac: error: cannot write" in err and "No space left" in err


def test_output_file_is_written(tmp_path, capsys):
    out = tmp_path / "gemm.mlir"
    assert main([GEMM, "--emit", "tawa", "-o", str(out)]) == 0
    assert "func.func @gemm" in out.read_text() and capsys.readouterr().out == ""


def test_non_utf8_kernel_file(tmp_path, capsys):
    bad = tmp_path / "latin1.tawa"
    bad.write_bytes(b"# caf\xe9\n@grid(1)\ndef k(A: f32[M]):\n    pass\n")
    assert main([str(bad), "--emit", "mlir"]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "not UTF-8" in err and "Traceback" not in err


def _tile_ir(tmp_path, capsys) -> pathlib.Path:
    assert main([GEMM, "--emit", "tawa", "-D", "BLOCK_N=64"]) == 0
    path = tmp_path / "gemm.mlir"
    path.write_text(capsys.readouterr().out)
    return path


def test_passes_on_mlir_input(tmp_path, capsys):
    path = _tile_ir(tmp_path, capsys)
    assert main([str(path), "--passes", "canonicalize,aref-insertion", "--num-buffers", "2"]) == 0
    out = capsys.readouterr().out
    assert "tawa.aref_create" in out and ", 2 : i32>" in out and "tawa.warp_group" not in out
    with make_context():
        assert ir.Module.parse(out).operation.verify()
    # Without --passes the IR is parsed, verified and printed back.
    assert main([str(path)]) == 0
    assert "tawa.aref" not in capsys.readouterr().out


def test_passes_on_tawa_input_and_to_a_file(tmp_path, capsys):
    out = tmp_path / "ws.mlir"
    assert main([GEMM, "--passes", "aref-insertion", "--passes", "partition", "-o", str(out)]) == 0
    text = out.read_text()
    assert "tawa.aref_create" in text and "tawa.warp_group" in text


def test_passes_usage_errors(tmp_path, capsys):
    path = _tile_ir(tmp_path, capsys)
    assert main([str(path), "--passes", "canonicalize,no-such-pass"]) == 2
    assert "unknown pass 'no-such-pass'" in capsys.readouterr().err
    assert main([str(path), "--passes", "canonicalize", "--emit", "ptx"]) == 2
    assert "--emit mlir" in capsys.readouterr().err
    assert main([str(tmp_path / "none.mlir"), "--passes", "canonicalize"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_bad_mlir_input_reports_its_line(tmp_path, capsys):
    path = tmp_path / "bad.mlir"
    path.write_text("module {\n  this is not mlir\n}\n")
    assert main([str(path), "--passes", "canonicalize"]) == 1
    err = capsys.readouterr().err
    assert f"{path}:2:" in err and "Traceback" not in err
