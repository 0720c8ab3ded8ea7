"""A kernel from `tawa.compile` (tma left automatic) whose arguments break TMA's 16-byte rules launches its variant
compiled with tma=False instead, once warned; without such a variant the launch error says how to get one. The
launcher is faked here (the GPU test is tests/e2e/test_unaligned_gpu.py)."""
import types
import warnings

import pytest

from tawa.errors import CompilationError, LaunchError, TawaPerformanceWarning, TmaAlignmentError
from tawa.runtime.kernel import Kernel


class FakeLauncher:
    def __init__(self, fail: bool):
        self.fail, self.calls = fail, []

    def launch(self, args, grid=None, stream=None):
        if self.fail:
            raise TmaAlignmentError("argument 'B': stride of dimension 0 is 1001 elements (2002 bytes)")
        self.calls.append((tuple(args), grid))


def kernel(fail: bool, without_tma=None) -> Kernel:
    k = Kernel(types.SimpleNamespace(name="gemm", target="cuda", params=[{"name": "A"}]), without_tma=without_tma)
    k._launcher = FakeLauncher(fail)
    return k


def test_unaligned_arguments_launch_the_variant_without_tma():
    made = []

    def variant():
        made.append(kernel(False))
        return made[-1]
    k = kernel(True, variant)
    with pytest.warns(TawaPerformanceWarning, match="without TMA"):
        k("x")
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # warned once, not at every launch
        k[(3,)]("y")
    assert len(made) == 1 and made[0]._launcher.calls == [(("x",), None), (("y",), (3,))]


def test_aligned_arguments_keep_the_tma_kernel():
    k = kernel(False, lambda: pytest.fail("the variant must not be built"))
    k("x")
    assert k._launcher.calls == [(("x",), None)]


def test_without_a_variant_the_error_says_how_to_get_one():
    with pytest.raises(LaunchError, match="stride") as info:
        kernel(True)("x")
    assert "tma=False" in info.value.note


@pytest.mark.parametrize("failure,note", [
    (CompilationError("a tile read by a dot without TMA needs rows of a multiple of 128 bytes"), "does not compile"),
    (ModuleNotFoundError("No module named 'mlir'"), "not in the kernel cache"),
], ids=["does-not-compile", "neither-cached-nor-compilable"])
def test_a_variant_that_cannot_be_had_keeps_the_alignment_error(failure, note):
    def variant():
        raise failure
    with pytest.raises(TmaAlignmentError) as info:
        kernel(True, variant)("x")
    assert note in info.value.note


def test_the_variant_without_tma_drops_dynamic_tiles_and_clusters(tmp_path, monkeypatch):
    """Threads copy the operands on the uniform-warp path, which has no persistent schedule: a kernel compiled with
    dynamic tiles (or clusters) gets a variant without them, which compiles."""
    import tawa
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    gemm = __import__("pathlib").Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa"
    k = tawa.compile(str(gemm), dynamic_tiles=True, cache=False)
    assert k.compiled.dynamic_tiles
    fallback = k._without_tma()
    assert not fallback.compiled.persistent and not fallback.compiled.dynamic_tiles


@pytest.mark.parametrize("schedule", ["persistent", "pingpong"])
def test_a_scheduled_kernel_has_a_variant_without_tma(tmp_path, monkeypatch, schedule):
    """The variant without TMA runs on uniform warps: the warp-specialized schedule a kernel was compiled with is
    not asked of it (it was, and an unaligned view failed to compile: "cannot make kernel persistent")."""
    pytest.importorskip("mlir")
    import pathlib
    import tawa
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa"
    k = tawa.compile(str(path), BLOCK_M=128, BLOCK_N=128, schedule=schedule)
    variant = k._without_tma()
    assert variant.compiled.name == k.compiled.name
    assert not any("warp-specialized" in n and "uses the" in n for n in variant.compiled.notes)
