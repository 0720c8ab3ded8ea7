"""A kernel compiled assuming a scalar argument positive (`positive_scales`, the `scale-after-max` pass) has the
launcher check the value at every launch, cached plans included; a kernel from `tawa.compile` launches its
variant compiled with positive_scales=False for other values, and without one the error says how to get it. The
driver and the launcher are faked here (the GPU test is tests/e2e/test_user_kernels_gpu.py)."""
import dataclasses
import math
import types

import warnings

import pytest

from tawa.abi import POSITIVE_ARG_RANGE
from tawa.errors import CompilationError, LaunchError, PositiveScaleError, TawaPerformanceWarning
from tawa.runtime.kernel import Kernel
from tawa.runtime.launcher import GpuLauncher

from test_launcher import args, fake, gemm_kernel  # noqa: F401  (fake is a fixture)


def positive_alpha():
    return dataclasses.replace(gemm_kernel(), positive_params=[3])


@pytest.mark.parametrize("alpha", [1.5, 0.125, 3, POSITIVE_ARG_RANGE[0], POSITIVE_ARG_RANGE[1]])
def test_values_in_range_launch(fake, alpha):
    launcher = GpuLauncher(positive_alpha())
    launcher.launch(args(alpha=alpha))
    launcher.launch(args(alpha=alpha))               # the cached plan
    assert launcher.launches == 2


@pytest.mark.parametrize("alpha", [0.0, -0.5, -0.0, math.nan, math.inf, POSITIVE_ARG_RANGE[0] / 2,
                                   POSITIVE_ARG_RANGE[1] * 2])
def test_other_values_are_refused_before_the_launch(fake, alpha):
    launcher = GpuLauncher(positive_alpha())
    launcher.launch(args(alpha=1.0))                 # a plan for this signature exists: it must check too
    with pytest.raises(PositiveScaleError, match=r"argument 'alpha' is positive .* and it is") as info:
        launcher.launch(args(alpha=alpha))
    assert "positive_scales=False" in info.value.note
    with pytest.raises(PositiveScaleError):
        GpuLauncher(positive_alpha()).launch(args(alpha=alpha))      # the full path alike
    assert launcher.launches == 1


def test_a_kernel_without_the_assumption_takes_any_value(fake):
    launcher = GpuLauncher(gemm_kernel())
    launcher.launch(args(alpha=-2.0))
    assert launcher.launches == 1


class FakeLauncher:
    def __init__(self, fail: bool):
        self.fail, self.calls = fail, []

    def launch(self, args, grid=None, stream=None):
        if self.fail and args[0] <= 0:
            raise PositiveScaleError("kernel 'attn' was compiled assuming its argument 'sm_scale' is positive",
                                     note="compile the kernel with positive_scales=False for such values")
        self.calls.append((tuple(args), grid))


def kernel(fail: bool, general=None) -> Kernel:
    k = Kernel(types.SimpleNamespace(name="attn", target="cuda", params=[{"name": "sm_scale"}],
                                     positive_params=[0] if fail else []), general=general)
    k._launcher = FakeLauncher(fail)
    return k


def test_other_values_launch_the_variant_without_the_assumption():
    made = []

    def variant():
        made.append(kernel(False))
        return made[-1]
    k = kernel(True, variant)
    k(0.5)
    with pytest.warns(TawaPerformanceWarning, match="positive_scales=False"):
        k(-0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # warned once, not at every launch
        k[(3,)](-1.0)
    assert k._launcher.calls == [((0.5,), None)]
    assert len(made) == 1 and made[0]._launcher.calls == [((-0.5,), None), ((-1.0,), (3,))]


def test_variant_for_names_the_kernel_the_arguments_launch():
    made = []

    def variant():
        made.append(kernel(False))
        return made[-1]
    k = kernel(True, variant)
    assert k.variant_for(0.5) is k and not made
    with pytest.warns(TawaPerformanceWarning):
        assert k.variant_for(-0.5) is made[0]
    assert k.variant_for(math.nan) is made[0] and len(made) == 1
    assert kernel(True).variant_for(-0.5) is not None        # no variant to build: the launch raises

    def broken():
        raise CompilationError("no")
    k = kernel(True, broken)
    assert k.variant_for(-0.5) is k                           # (nor one that builds)


def test_without_a_variant_the_error_says_how_to_get_one():
    with pytest.raises(LaunchError, match="sm_scale") as info:
        kernel(True)(-0.5)
    assert "positive_scales=False" in info.value.note


@pytest.mark.parametrize("failure", [CompilationError("no"), ModuleNotFoundError("No module named 'mlir'")])
def test_a_variant_that_cannot_be_had_keeps_the_error(failure):
    def variant():
        raise failure
    with pytest.raises(PositiveScaleError) as info:
        kernel(True, variant)(-0.5)
    assert "could not be built" in info.value.note


def test_compile_gives_the_variant_and_records_the_assumption(tmp_path, monkeypatch):
    """Compiled from source, a user-style attention kernel records its scale as assumed positive; its variant
    without the assumption (what a negative scale launches) records none, and a kernel compiled with the option
    given has no variant to fall back to."""
    pytest.importorskip("mlir")
    import pathlib
    import tawa
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e" / "kernels" / "user" / "attn_cross.tawa"
    k = tawa.compile(str(path))
    names = [p["name"] for p in k.compiled.params]
    assert [names[i] for i in k.compiled.positive_params] == ["sm_scale"]
    with pytest.warns(TawaPerformanceWarning):
        general = k._without_assumption(PositiveScaleError("x"))
    assert general.compiled.positive_params == []
    assert tawa.compile(str(path), positive_scales=True)._general is None


@pytest.mark.parametrize("value", ["off", 0, 1, "auto"])
def test_the_option_takes_true_false_or_none(value):
    from tawa.options import CompileOptions
    with pytest.raises(CompilationError, match="positive_scales"):
        CompileOptions(positive_scales=value).validate()


def test_an_explicit_auto_still_has_the_variant(tmp_path, monkeypatch):
    """positive_scales=None given explicitly is the default: the variant without the assumption is built with
    the option replaced, not given twice."""
    pytest.importorskip("mlir")
    import pathlib
    import tawa
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e" / "kernels" / "user" / "attn_cross.tawa"
    k = tawa.compile(str(path), positive_scales=None, tma=None)
    with pytest.warns(TawaPerformanceWarning):
        assert k._without_assumption(PositiveScaleError("x")).compiled.positive_params == []
    assert k._without_tma().compiled.positive_params == [4]


def test_autotuned_kernels_fall_back_for_both_rules(monkeypatch):
    """A tuned kernel launched on tensors TMA cannot read and with a scale its code assumes positive ends on the
    candidate compiled with tma=False and positive_scales=False, whichever rule the launch meets first (the
    launcher and the compiler are faked: each kernel refuses what its configuration assumes)."""
    from tawa.autotune import compiling
    from tawa.autotune import tuner as tuner_module
    from tawa.errors import TmaAlignmentError
    launched = []

    class Launcher:
        def __init__(self, compiled):
            self.config = compiled.config

        def launch(self, args, grid=None, stream=None):
            if self.config.get("tma") is not False and args[0] == "misaligned":
                raise TmaAlignmentError("misaligned")
            if self.config.get("positive_scales") is not False and args[1] <= 0:
                raise PositiveScaleError("not positive")
            launched.append(self.config)

    def compile_one(source, filename, config, target, defaults):
        config = config.as_dict() if hasattr(config, "as_dict") else dict(config)
        kernel = types.SimpleNamespace(name="attn", target="cuda", params=[{"name": "Q"}, {"name": "sm_scale"}],
                                       positive_params=[1], config=config)
        return types.SimpleNamespace(kernel=kernel, from_cache=True, error=None)
    monkeypatch.setattr(compiling, "compile_one", compile_one)
    import tawa.runtime.launcher
    monkeypatch.setattr(tawa.runtime.launcher, "GpuLauncher", Launcher)
    tuner = types.SimpleNamespace(source="", filename="attn.tawa", target="cuda", _defaults=None)
    config = {"BLOCK_M": 128, "schedule": "persistent"}
    kernel = tuner_module.Autotuner._kernel(tuner, compile_one(None, None, config, "cuda", None), config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TawaPerformanceWarning)
        for args in (["aligned", 1.0], ["aligned", -1.0], ["misaligned", 1.0], ["misaligned", -1.0]):
            kernel(*args)
    assert launched[0] == config
    assert launched[1] == dict(config, positive_scales=False)
    assert launched[2] == {"BLOCK_M": 128, "tma": False}
    assert launched[3] in ({"BLOCK_M": 128, "tma": False, "positive_scales": False},
                           {"BLOCK_M": 128, "positive_scales": False, "tma": False})
