"""CompileOptions: checked in one place (`validate`), with a CompilationError naming the option, whether the
options come from `CompileOptions(...)`, from `tawa.compile(...)` keyword arguments, or from `tawac` flags."""
import dataclasses
import pathlib
import subprocess
import sys

import pytest

import tawa
from tawa import hopper
from tawa.cli import _parser, main
from tawa.errors import CompilationError
from tawa.options import CompileOptions

ROOT = pathlib.Path(__file__).resolve().parent.parent
GEMM = str(ROOT / "examples" / "gemm.tawa")
#: Not a kernel: if anything parsed it, the error would be a syntax error, not the option's.
NOT_PARSED = "this is not a kernel ("

BAD = [
    ("num_stages", 0), ("num_stages", -1), ("num_stages", 2.5), ("num_stages", "3"), ("num_stages", True),
    ("num_buffers", 2.5), ("num_buffers", 0), ("num_buffers", -1), ("num_buffers", True),
    ("warp_specialize", "maybe"), ("warp_specialize", 1), ("warp_specialize", "on"),
    ("producer_registers", 41), ("producer_registers", 16), ("producer_registers", 264),
    ("consumer_registers", 0), ("consumer_registers", 300), ("consumer_registers", 232.0),
    ("num_consumer_groups", 4), ("num_consumer_groups", 0), ("num_consumer_groups", True),
    ("num_warps", 2), ("num_warps", 16), ("num_warps", 4.0),
    ("target", "rocm"), ("target", None), ("tma", "off"), ("tma", 0),
    ("group_m", 0), ("group_m", -2), ("group_m", 2.0), ("group_m", True), ("group_m", 10 ** 12),
    ("num_stages", 10 ** 9), ("num_buffers", 65),
]


@pytest.mark.parametrize("name,value", BAD)
def test_validate_names_the_bad_option(name, value):
    with pytest.raises(CompilationError, match=rf"invalid option {name}="):
        CompileOptions(**{name: value}).validate()


@pytest.mark.parametrize("name,value", BAD)
def test_compile_checks_options_before_parsing(name, value):
    with pytest.raises(CompilationError, match=rf"invalid option {name}=") as info:
        tawa.compile(NOT_PARSED, cache=False, **{name: value})
    assert info.value.location is None           # not a parse error at some line of the "source"


def test_compile_checks_options_before_reading_the_file():
    with pytest.raises(CompilationError, match="num_stages"):
        tawa.compile("does/not/exist.tawa", num_stages=-1)


@pytest.mark.parametrize("kwargs", [
    {}, dict(num_stages=1), dict(num_buffers=1), dict(warp_specialize=False), dict(warp_specialize=True),
    dict(producer_registers=hopper.SETMAXNREG_MIN, consumer_registers=hopper.SETMAXNREG_MAX),
    dict(num_consumer_groups=1), dict(num_consumer_groups=2), dict(num_warps=4), dict(num_warps=8),
    dict(target="cpu"), dict(dump_ir_after_all=True, verify_each=True), dict(tma=False), dict(tma=True),
    dict(tma=False, warp_specialize=False), dict(group_m=1), dict(group_m=12),
])
def test_good_values_pass(kwargs):
    opts = CompileOptions(**kwargs)
    assert opts.validate() is opts


def test_register_file_checked_when_the_consumer_count_is_known():
    with pytest.raises(CompilationError, match=r"consumer_registers=256.*at most 232"):
        CompileOptions(num_consumer_groups=2, consumer_registers=256).validate()
    CompileOptions(num_consumer_groups=1, producer_registers=256, consumer_registers=256).validate()
    # The budgets must fit what the block starts with (168 x 384 = 64512), not only the register file: with these
    # setmaxnreg.inc waits forever (the kernel hung on an H200).
    with pytest.raises(CompilationError, match=r"consumer_registers=240.*at most 232.*64512"):
        CompileOptions(num_consumer_groups=2, producer_registers=32, consumer_registers=240).validate()
    CompileOptions(num_consumer_groups=2, producer_registers=24, consumer_registers=240).validate()


def test_unknown_option_name_is_a_compilation_error():
    with pytest.raises(CompilationError, match="unknown compile option 'num_stage'") as info:
        CompileOptions(num_stage=2)
    assert "num_stages" in info.value.note


def test_alias_and_constants_from_kwargs():
    opts = CompileOptions.from_kwargs(dict(num_buffers_warp_spec=3, BLOCK_N=64, num_stages=2))
    assert (opts.num_buffers, opts.num_stages, opts.constants) == (3, 2, {"BLOCK_N": 64})
    assert CompileOptions(num_buffers_warp_spec=2).num_buffers == 2
    with pytest.raises(CompilationError, match="num_buffers_warp_spec"):
        CompileOptions.from_kwargs(dict(num_buffers=2, num_buffers_warp_spec=3))


def test_cache_key_leaves_out_the_debugging_switches():
    a = CompileOptions().cache_key_fields()
    b = CompileOptions(dump_ir_after_all=True, verify_each=True).cache_key_fields()
    assert a == b
    assert "dump_ir_after_all" not in a and "verify_each" not in a
    assert CompileOptions(num_stages=2).cache_key_fields() != a


def test_every_option_has_help_and_a_tawac_flag():
    flags = {s for a in _parser()._actions for s in a.option_strings}
    for f in dataclasses.fields(CompileOptions):
        assert f.metadata.get("help"), f"CompileOptions.{f.name} has no help text"
        if f.name != "constants":
            assert "--" + f.name.replace("_", "-") in flags
    assert {"-D", "--num-buffers-warp-spec", "--producer-registers", "--consumer-registers",
            "--verify-each", "--passes"} <= flags


# tawac: each bad value is a usage error naming the flag (exit 2), or a compile error (exit 1); never a traceback.
CLI_BAD = [
    ("num_stages", "0"), ("num_stages", "-1"), ("num_stages", "2.5"),
    ("num_buffers", "2.5"), ("num_buffers", "0"), ("num_buffers", "-1"), ("num_buffers_warp_spec", "0"),
    ("warp_specialize", "maybe"),
    ("producer_registers", "41"), ("producer_registers", "512"), ("consumer_registers", "16"),
    ("num_consumer_groups", "4"), ("num_warps", "2"), ("target", "rocm"),
]


def _tawac(argv, capsys):
    try:
        status = main(argv)
    except SystemExit as e:                      # argparse's own usage errors
        status = e.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize("name,value", CLI_BAD)
def test_tawac_rejects_bad_option_values(name, value, capsys):
    flag = "--" + name.replace("_", "-")
    status, err = _tawac([GEMM, "--emit", "mlir", f"{flag}={value}"], capsys)
    assert status in (1, 2)
    assert flag in err and "tawac: error:" in err and "Traceback" not in err


def test_tawac_register_file_overflow(capsys):
    status, err = _tawac([GEMM, "--num-consumer-groups", "2", "--consumer-registers", "256"], capsys)
    assert status == 2 and "--consumer-registers" in err and "at most 232" in err


def test_tawac_bad_option_has_no_traceback_in_a_subprocess():
    out = subprocess.run([sys.executable, "-m", "tawa", GEMM, "--num-stages", "0"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 2
    assert "--num-stages" in out.stderr and "Traceback" not in out.stderr and out.stdout == ""


def test_tma_off_cannot_be_warp_specialized():
    """The producer warp group loads through TMA: asking for both is refused, naming the conflict."""
    with pytest.raises(CompilationError, match="invalid option warp_specialize=True.*tma=False"):
        CompileOptions(tma=False, warp_specialize=True).validate()


@pytest.mark.parametrize("options,clash", [
    (dict(warp_specialize=False), "warp_specialize=False"),
    (dict(tma=False), "tma=False"),
    (dict(schedule="tile"), "schedule='tile'"),
    (dict(schedule="pingpong"), "schedule='pingpong'"),
    (dict(cluster="2x1"), "cluster='2x1'"),
    (dict(split_k=2), "split_k=2"),
    (dict(target="cpu"), "warp_specialize=None (the cpu target specializes only with warp_specialize=True)"),
])
def test_dynamic_tiles_refuse_what_rules_them_out(options, clash):
    with pytest.raises(CompilationError, match="invalid option dynamic_tiles=True") as info:
        CompileOptions(dynamic_tiles=True, **options).validate()
    assert clash in info.value.message
    CompileOptions(dynamic_tiles=False, **options).validate()


def test_dynamic_tiles_accepted_where_they_can_apply():
    CompileOptions(dynamic_tiles=True).validate()
    CompileOptions(dynamic_tiles=True, schedule="persistent", cluster="1x1").validate()
    CompileOptions(dynamic_tiles=True, target="cpu", warp_specialize=True).validate()


def test_cli_constants_read_booleans_ints_floats_and_names():
    from tawa.option_flags import constant_value
    assert [constant_value(t) for t in ("True", "false", "3", "-2", "0.5", "bf16")] == [True, False, 3, -2, 0.5, "bf16"]
    assert constant_value("TRUE") is True and constant_value("1") == 1 and constant_value("1") is not True


def test_the_interpreter_walks_a_huge_grid_one_program_at_a_time():
    from tawa.runtime.interpreter import _grid_points
    points = _grid_points((2 ** 40, 3, 2))
    assert [next(points) for _ in range(3)] == [(0, 0, 0), (0, 0, 1), (0, 0, 2)]
