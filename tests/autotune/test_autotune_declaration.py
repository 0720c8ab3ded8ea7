"""`@autotune(...)` in a .tawa file: what it declares, that compiling the file is unchanged by it, and that the
tuner's reading of it (`space_info`, no MLIR) reports the same located errors as the compiler."""
from __future__ import annotations

import pathlib

import pytest

import tawa
from tawa.errors import CompilationError
from tawa.frontend.tuning import space_info
from tawa.source import read_source

from autotune_support import SCALE

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.tawa"))
ERRORS = sorted((ROOT / "tests" / "errors").glob("autotune_*.tawa"))


def test_product_and_config_items_expand_in_order_without_repeats():
    src = ("@autotune(key=M, configs=(config(BLOCK_N=64), product(BLOCK_M=(16, 32), BLOCK_N=(64, 128)),\n"
           "                           config(FACTOR=3, num_warps=8, warp_specialize=None)))\n" + SCALE)
    declared = space_info(src)["declared"]
    assert declared["key"] == ["M"]
    assert declared["configs"] == [
        {"BLOCK_N": 64},
        {"BLOCK_M": 16, "BLOCK_N": 64}, {"BLOCK_M": 16, "BLOCK_N": 128},     # the first name varies slowest
        {"BLOCK_M": 32, "BLOCK_N": 64}, {"BLOCK_M": 32, "BLOCK_N": 128},
        {"FACTOR": 3, "num_warps": 8, "warp_specialize": None},
    ]


def test_key_only_and_configs_only():
    assert space_info("@autotune(key=(N, M))\n" + SCALE)["declared"] == {"key": ["N", "M"], "configs": None}
    assert space_info("@autotune(configs=config(BLOCK_M=64))\n" + SCALE)["declared"] == {
        "key": None, "configs": [{"BLOCK_M": 64}]}
    assert space_info(SCALE)["declared"] is None


def test_dtype_constants_take_dtype_names():
    src = ("@autotune(configs=(config(DTYPE=f16), config(DTYPE=bf16)))\n"
           "@grid(cdiv(M, 64))\n"
           "def k(X: DTYPE[M], Y: DTYPE[M], DTYPE: const = f32):\n"
           "    store(Y, program_id(0), load(X, program_id(0), 64))\n")
    assert space_info(src)["declared"]["configs"] == [{"DTYPE": "f16"}, {"DTYPE": "bf16"}]
    assert space_info(src)["dtype_constants"] == ["DTYPE"]


def test_option_words_are_written_bare():
    """An option whose values are words takes them as names, as dtype constants take dtype names."""
    src = "@autotune(configs=product(schedule=(pingpong, persistent, tile), cluster=((2, 1),)))\n" + SCALE
    assert space_info(src)["declared"]["configs"] == [
        {"schedule": "pingpong", "cluster": [2, 1]}, {"schedule": "persistent", "cluster": [2, 1]},
        {"schedule": "tile", "cluster": [2, 1]}]


def test_compiling_a_file_with_a_declared_space_gives_the_defaults_as_before():
    declared = "@autotune(key=(M,), configs=product(BLOCK_M=(64, 128), FACTOR=(3, 4)))\n" + SCALE
    plain, tuned = tawa.compile(SCALE, cache=False), tawa.compile(declared, cache=False)
    assert tuned.compiled.constants == plain.compiled.constants == {"BLOCK_M": 16, "BLOCK_N": 32, "FACTOR": 2}
    assert tuned.ptx == plain.ptx
    assert tawa.compile(declared, cache=False, BLOCK_M=64).compiled.constants["BLOCK_M"] == 64


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_declare_their_space(path):
    info = space_info(*read_source(str(path)))
    declared = info["declared"]
    assert declared is not None and declared["key"] and len(declared["configs"]) >= 2
    symbols = [s[0] for s in info["symbols"]]
    assert set(declared["key"]) <= set(symbols)
    # Every declared configuration is a valid set of tawa.compile arguments for this kernel.
    for config in declared["configs"]:
        assert set(config) <= set(info["constants"]) | set(tawa.CompileOptions.names()), config


@pytest.mark.parametrize("path", ERRORS, ids=[p.stem for p in ERRORS])
def test_the_tuner_reads_a_bad_declaration_with_the_compilers_error(path):
    """The corpus (tests/errors/autotune_*.tawa) checks the compiler's error; the tuner reads the declaration
    through `space_info`, which must fail the same way, at the same place."""
    source, filename = read_source(str(path))
    with pytest.raises(CompilationError) as tuner_error:
        space_info(source, filename)
    with pytest.raises(CompilationError) as compiler_error:
        tawa.compile(str(path), target="cpu", cache=False)
    a, b = tuner_error.value, compiler_error.value
    assert (a.message, a.location.line, a.location.column) == (b.message, b.location.line, b.location.column)
