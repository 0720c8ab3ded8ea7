"""`tawa.opt` (tawa-opt): the library entry point, the command line, options, errors and --split-input-file."""
from __future__ import annotations

import dataclasses
import pathlib

import pytest

from tawa import opt
from tawa.errors import CompilationError, TawaError
from tawa.options import CompileOptions

ROOT = pathlib.Path(__file__).resolve().parents[2]
GEMM = ROOT / "examples" / "gemm.tawa"

KERNEL = """func.func @k(%A: memref<?xf32>) attributes {tawa.kernel} {
  %c0 = arith.constant 0 : i32
  %c0_dup = arith.constant 0 : i32
  %t = "tawa.load"(%A, %c0) : (memref<?xf32>, i32) -> tensor<16xf32>
  "tawa.store"(%A, %t, %c0_dup) : (memref<?xf32>, tensor<16xf32>, i32) -> ()
  return
}
"""


def test_run_passes_on_text_mlir():
    out = opt.run_passes_on_text(KERNEL, "k.mlir", ["canonicalize"], CompileOptions())
    assert out.startswith("module {") and out.count("arith.constant 0 : i32") == 1   # CSE'd
    assert '"tawa.store"(%arg0, %0, %c0_i32)' in out
    # no passes: parse and print
    assert "%c0_i32_0" in opt.run_passes_on_text(KERNEL, "k.mlir", [], CompileOptions())


def test_run_passes_on_text_tawa_source_with_constants():
    out = opt.run_passes_on_text(GEMM.read_text(), str(GEMM), ["aref-insertion"],
                                 CompileOptions(constants={"BLOCK_N": 64}, num_buffers=2))
    assert "!tawa.aref<[tensor<128x64xbf16>, tensor<64x64xbf16>], 2 : i32>" in out


def test_errors_are_tawa_errors():
    with pytest.raises(CompilationError, match="unknown pass 'nope'") as e:
        opt.run_passes_on_text(KERNEL, "k.mlir", ["canonicalize", "nope"], CompileOptions())
    assert "aref-insertion" in e.value.note
    with pytest.raises(CompilationError, match="invalid option num_stages=0"):
        opt.run_passes_on_text(KERNEL, "k.mlir", [], CompileOptions(num_stages=0))
    bad = KERNEL.replace("arith.constant 0 : i32\n  %c0_dup", "arith.bogus 0 : i32\n  %c0_dup")
    with pytest.raises(CompilationError, match="cannot parse the MLIR input") as e:
        opt.run_passes_on_text(bad, "k.mlir", [], CompileOptions())
    assert str(e.value.location) == "k.mlir:2:9" and "arith.bogus" in e.value.location.source_line


def test_locations_name_the_input_file():
    from tawa.ir.location import source_location
    from tawa.ir.dialect import make_context
    m = opt.parse_mlir(KERNEL, "dir/k.mlir", make_context())
    load = list(m.body.operations[0].regions[0].blocks[0].operations)[2]
    loc = source_location(load)
    assert (loc.filename, loc.line) == ("dir/k.mlir", 4)


def test_split_input_keeps_line_numbers():
    text = "a\n// -----\nb\nc\n//   -----  \nd"
    chunks = opt.split_input(text, "x.mlir")
    assert len(chunks) == 3
    for chunk, (line, word) in zip(chunks, [(1, "a"), (3, "b"), (6, "d")]):
        assert chunk.splitlines()[line - 1] == word
    assert len(opt.split_input("x\n# -----\ny\n", "x.tawa")) == 2
    assert len(opt.split_input("x\n# -----\ny\n", "x.mlir")) == 1


def test_every_compile_option_is_a_flag():
    parser = opt._parser()
    flags = {s for a in parser._actions for s in a.option_strings}
    for f in dataclasses.fields(CompileOptions):
        if f.name != "constants":
            assert "--" + f.name.replace("_", "-") in flags, f.name
    args = parser.parse_args(["x.mlir", "--warp-specialize", "off", "--num-buffers-warp-spec", "3", "--verify-each",
                              "--option", "consumer-registers=224", "--option", "num_consumer_groups=1",
                              "-D", "BLOCK_N=64", "-D", "DTYPE=f16", "--num-stages", "4"])
    o = opt.options_from_args(args)
    assert (o.warp_specialize, o.num_buffers, o.verify_each, o.consumer_registers, o.num_consumer_groups,
            o.num_stages) == (False, 3, True, 224, 1, 4)
    assert o.constants == {"BLOCK_N": 64, "DTYPE": "f16"}
    assert o.num_warps is None and o.producer_registers is None        # untouched fields keep their defaults
    assert opt.options_from_args(parser.parse_args(["x", "--warp-specialize", "auto"])).warp_specialize is None
    assert opt.options_from_args(parser.parse_args(["x", "--warp-specialize", "on"])).warp_specialize is True


def test_main_prints_the_module(tmp_path, capsys):
    f = tmp_path / "k.mlir"
    f.write_text(KERNEL + "// -----\n" + KERNEL.replace("@k", "@k2"))
    assert opt.main([str(f), "--passes", "canonicalize", "--split-input-file"]) == 0
    out = capsys.readouterr().out
    assert out.count("module {") == 2 and "// -----" in out and "@k2" in out
    assert opt.main([str(f), "--split-input-file", "--mlir-print-debuginfo", "-o", str(tmp_path / "o.mlir")]) == 0
    assert f'loc("{f}":4:' in (tmp_path / "o.mlir").read_text()


def test_main_usage_errors(tmp_path, capsys):
    f = tmp_path / "k.mlir"
    f.write_text(KERNEL)
    assert opt.main([str(f), "--passes", "canonicalize,partiton"]) == 2
    err = capsys.readouterr().err
    assert "unknown pass 'partiton'" in err and "protocol-check" in err and "lower-to-llvm" in err
    with pytest.raises(SystemExit) as exit_:            # argparse's own usage error, as tawac's
        opt.main([str(f), "--num-buffers", "two"])
    assert exit_.value.code == 2 and "--num-buffers" in capsys.readouterr().err
    assert opt.main([str(f), "--option", "num_buffers=two"]) == 2
    assert "num_buffers expects a value of type int" in capsys.readouterr().err
    assert opt.main([str(f), "--option", "num_bufers=2"]) == 2
    assert "unknown option 'num_bufers'" in capsys.readouterr().err
    assert opt.main([str(tmp_path / "missing.mlir")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_main_errors_exit_1_without_traceback(tmp_path, capsys):
    f = tmp_path / "bad.mlir"
    f.write_text("func.func @k() {\n  %0 = arith.bogus\n}\n// -----\n" + KERNEL)
    assert opt.main([str(f), "--split-input-file"]) == 1          # the other chunk still runs
    captured = capsys.readouterr()
    assert f"{f}:2:" in captured.err and "cannot parse the MLIR input" in captured.err
    assert "Traceback" not in captured.err and "func.func @k(" in captured.out
    assert opt.main([str(f), "--num-stages", "0"]) == 1
    assert "invalid option num_stages=0" in capsys.readouterr().err


def test_internal_error_names_the_pass(tmp_path, capsys, monkeypatch):
    from tawa import compiler

    def broken(module, options):
        raise ValueError("boom")
    monkeypatch.setitem(compiler.PASSES, "canonicalize", dataclasses.replace(compiler.PASSES["canonicalize"],
                                                                              run=broken))
    with pytest.raises(TawaError, match="internal compiler error in pass 'canonicalize': ValueError: boom"):
        opt.run_passes_on_text(KERNEL, "k.mlir", ["canonicalize"], CompileOptions())
