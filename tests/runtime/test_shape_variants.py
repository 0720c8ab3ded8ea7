"""A GEMM-family kernel from `tawa.compile` without tile constants launches, per call, the variant its shape calls
for (`tawa.autotune.launch_defaults.shape_defaults`: small-M tiles and split-K, other tiles and schedules, clusters
where B's rows sit off the sector grid), compiled once per configuration and looked up per extents and alignment; an
explicit grid (sized for the kernel's own tiles), given tile constants and other kernels keep the kernel itself.
Launchers are faked here (the GPU tests are tests/e2e/test_split_k_gpu.py and test_launch_defaults_gpu.py)."""
import pathlib
import types

import pytest

import tawa
from tawa.errors import CompilationError
from tawa.runtime.kernel import Kernel, ShapeVariants

INFO = {"name": "gemm", "constants": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64},
        "symbols": [["M", 0, 0], ["K", 0, 1], ["N", 1, 1]], "tiles": [["BLOCK_M", "M"], ["BLOCK_N", "N"]],
        "grid_symbols": [None, None], "operands": [[0, ["M", "K"]], [1, ["K", "N"]], [2, ["M", "N"]]], "has_dot": True, "dots": 1}


class FakeLauncher:
    def __init__(self):
        self.calls = []

    def launch(self, args, grid=None, stream=None):
        self.calls.append(grid)


class Array:
    def __init__(self, *shape):
        self.shape = shape


class Strided(Array):
    """numpy's and CuPy's view: strides in bytes."""
    def __init__(self, *shape, itemsize=2):
        super().__init__(*shape)
        self.strides = (shape[1] * itemsize, itemsize)


class TorchLike(Array):
    """torch's view: stride(dim) in elements, element_size() in bytes."""
    def __init__(self, *shape, row=None):
        super().__init__(*shape)
        self._row = shape[1] if row is None else row

    def stride(self, dim=None):
        strides = (self._row, 1)
        return strides if dim is None else strides[dim]

    def element_size(self):
        return 2


def fake_kernel(label, shapes=None) -> Kernel:
    k = Kernel(types.SimpleNamespace(name=label, target="cuda", params=[{"name": n} for n in "ABC"]),
               shape_variants=shapes)
    k._launcher = FakeLauncher()
    return k


def gemm_args(m, n, k):
    return Array(m, k), Array(k, n), Array(m, n)


@pytest.fixture(autouse=True)
def prepared(request, monkeypatch):
    """The kernel's tuning view without the frontend, and 132 SMs without a driver."""
    if "gemm" in request.fixturenames:
        monkeypatch.setattr(ShapeVariants, "_prepare", lambda self, target: _prepared(self))
    

@pytest.fixture
def made():
    return []


@pytest.fixture
def gemm(made):
    def compile_variant(config):
        made.append(config)
        return fake_kernel(f"variant {sorted(config.items())}")
    return fake_kernel("gemm", ShapeVariants(lambda: INFO, compile_variant))


def test_small_m_launches_the_split_variant_compiled_once(gemm, made):
    gemm(*gemm_args(8, 4096, 4096))
    gemm(*gemm_args(8, 4096, 4096))
    gemm(*gemm_args(1, 4096, 4096))                    # other extents, same configuration: no new compile
    assert made == [{"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}]
    variant = gemm.variant_for(*gemm_args(8, 4096, 4096))
    assert variant is not gemm and variant._launcher.calls == [None, None, None]
    assert gemm._launcher.calls == []


def test_large_shapes_and_explicit_grids_keep_the_kernel(gemm, made):
    gemm(*gemm_args(4096, 4096, 4096))
    gemm[(2, 16)](*gemm_args(8, 4096, 4096))           # a grid sized for the kernel's own 128 x 256 tiles
    assert made == [] and gemm._launcher.calls == [None, (2, 16)]
    assert gemm.variant_for(*gemm_args(4096, 4096, 4096)) is gemm


def refusing(kernel, message: str) -> list:
    """Make every variant of `kernel` fail to compile with `message`; the list of configurations tried."""
    tried = []

    def refuse(config):
        tried.append(config)
        raise CompilationError(message)
    kernel._shapes._compile_variant = refuse
    return tried


def test_a_variant_that_does_not_compile_drops_the_split_then_the_tile(gemm):
    tried = refusing(gemm, "cannot split the K loop")
    gemm(*gemm_args(8, 4096, 4096))
    assert tried == [{"BLOCK_M": 64, "BLOCK_N": 128, "split_k": 4}, {"BLOCK_M": 64, "BLOCK_N": 128}]
    assert gemm._launcher.calls == [None]


def test_a_sparse_last_wave_launches_the_stream_k_variant(gemm, made):
    gemm(*gemm_args(1280, 10240, 2048))                # 400 tiles of 128 x 256 on 132 SMs: 3.03 waves
    gemm(*gemm_args(4096, 4096, 4096))                 # 512 tiles: 3.9 waves, the kernel itself
    gemm(*gemm_args(1100, 4096, 4096))                 # 144 tiles; 132 of 192 x 192: one wave
    assert made == [{"schedule": "streamk"}, {"BLOCK_M": 192, "BLOCK_N": 192, "schedule": "persistent"}]
    assert gemm._launcher.calls == [None]


def test_a_kernel_that_cannot_stream_k_launches_itself(gemm):
    """The linear layer's epilogue loads its bias and residual: its stream-K variant does not compile."""
    tried = refusing(gemm, "cannot make kernel 'linear' stream-K: its epilogue loads a tensor after the K loop")
    gemm(*gemm_args(1280, 10240, 2048))
    gemm(*gemm_args(1280, 10240, 2048))
    assert tried == [{"schedule": "streamk"}] and gemm._launcher.calls == [None, None]


def test_a_refused_schedule_keeps_the_chosen_tile(gemm):
    """A kernel that refuses the persistent schedules (a K loop under an `if` in a loop the program writes): the
    launch keeps the tile the rule chose (192 x 192 here, one full wave) on the schedule the compiler picks, rather
    than the kernel's own tile."""
    tried = []

    def compile_variant(config):
        tried.append(config)
        if "schedule" in config:
            raise CompilationError("cannot make kernel 'moe' persistent: its pipelined loop is nested in a "
                                   "conditional the program writes")
        return fake_kernel(f"variant {sorted(config.items())}")
    gemm._shapes._compile_variant = compile_variant
    gemm(*gemm_args(1100, 4096, 4096))
    assert tried == [{"BLOCK_M": 192, "BLOCK_N": 192, "schedule": "persistent"}, {"BLOCK_M": 192, "BLOCK_N": 192}]
    assert gemm.variant_for(*gemm_args(1100, 4096, 4096)) is not gemm


def test_a_variant_missing_from_the_cache_tries_the_smaller_one(gemm):
    """Where no compiler is installed, a variant the cache lacks (refused when the cache was filled, so never
    stored) leads to the smaller variant the cache holds, not straight to the kernel's own."""
    def compile_variant(config):
        if "schedule" in config:
            raise ImportError("no module named 'mlir'")
        return fake_kernel(f"variant {sorted(config.items())}")
    gemm._shapes._compile_variant = compile_variant
    assert gemm.variant_for(*gemm_args(1100, 4096, 4096)).name == "variant [('BLOCK_M', 192), ('BLOCK_N', 192)]"


def test_b_rows_off_the_sector_grid_launch_the_clustered_variant(gemm, made):
    gemm(Strided(8192, 4096), Strided(4096, 5000), Strided(8192, 5000))     # B's rows 10000 bytes apart
    gemm(Strided(8192, 4096), Strided(4096, 5008), Strided(8192, 5008))     # 10016: on the grid
    gemm(TorchLike(8192, 4096), TorchLike(4096, 5000), TorchLike(8192, 5000))
    gemm(TorchLike(8192, 4096), TorchLike(4096, 5000, row=5008), TorchLike(8192, 5000))   # a padded view of B
    assert made == [{"cluster": "2x1"}] and gemm._launcher.calls == [None, None]


class Typed(TorchLike):
    """A torch-like tensor with a dtype: its layout (shape, strides, dtype) keys the choice of the next calls."""
    dtype = "bf16"


def test_a_repeated_layout_reuses_the_choice_without_reading_the_rows_again(gemm, made):
    off = (Typed(8192, 4096), Typed(4096, 5000), Typed(8192, 5000))           # B's rows off the sector grid
    gemm(*off)
    real = gemm._shapes._misaligned
    calls = []
    gemm._shapes._misaligned = lambda indices, args: calls.append(1) or real(indices, args)
    gemm(*off)
    gemm(Typed(8192, 4096), Typed(4096, 5000), Typed(8192, 5000))              # other tensors, same layout
    assert calls == [] and made == [{"cluster": "2x1"}]
    variant = gemm.variant_for(*off)
    assert variant is not gemm and len(variant._launcher.calls) == 3
    padded = (Typed(8192, 4096), Typed(4096, 5000, row=5008), Typed(8192, 5000))  # B padded: another layout
    gemm(*padded)
    assert calls == [1] and gemm._launcher.calls == [None]
    gemm(*padded)
    assert calls == [1] and gemm._launcher.calls == [None, None]


def test_arguments_without_shapes_launch_the_kernel(gemm):
    gemm(object(), object(), object())                # the launcher's own checks report these
    assert gemm._launcher.calls == [None]


def _prepared(shapes):
    shapes._adopt(INFO)
    shapes._sms = 132


def test_compile_attaches_variants_only_without_tile_constants(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    path = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa")
    assert tawa.compile(path)._shapes is not None
    assert tawa.compile(path, BLOCK_M=64)._shapes is None
    assert tawa.compile(path, split_k=2)._shapes is None
    assert tawa.compile(path, target="cpu")._shapes is None
    k = tawa.compile(path)
    variant = k.variant_for(*gemm_args(8, 4096, 4096))
    assert variant.compiled.constants["BLOCK_M"] == 64 and variant.compiled.split_k == 4
    assert variant._shapes is None
    assert k.variant_for(*gemm_args(4096, 4096, 4096)) is k
    pingpong = k.variant_for(*gemm_args(1536, 6144, 2048))       # 288 tiles of 128 x 256, 384 of 128 x 192
    assert pingpong.compiled.constants["BLOCK_N"] == 192 and "pingpong" in " ".join(pingpong.notes)
    sk = k.variant_for(*gemm_args(1280, 10240, 2048))
    assert sk.compiled.stream_k and sk.compiled.constants["BLOCK_N"] == 256
    three = k.variant_for(*gemm_args(1100, 4096, 4096))       # 132 tiles of 192 x 192: three consumer groups
    assert three.compiled.constants["BLOCK_M"] == 192 and three.compiled.num_threads == 512


def test_linear_layer_switches_tiles_but_never_to_stream_k(tmp_path, monkeypatch):
    """The linear layer's epilogue loads its bias and residual, which stream-K refuses: the rule does not ask for
    it (1280x10240x2048, where a GEMM takes stream-K, keeps the own 128x192 tile), and picks among the tiles
    instead (1024x4096x4096: 176 tiles of 128x192 fill 0.65 of two waves, 128 of 128x256 0.97 of one;
    2112x2048x8192: 187 of 128x192 fill 0.67 of two, 121 of 192x192 0.89 of one)."""
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    path = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "linear_gelu_residual.tawa")
    from tawa.autotune import launch_defaults, space
    from tawa.frontend import read_source
    info = space.space_info(*read_source(path))
    assert info["epilogue_loads"] and info["constants"]["BLOCK_N"] == 192
    choose = lambda m, n, k: launch_defaults.shape_defaults(info, {"M": m, "N": n, "K": k})
    assert choose(1280, 10240, 2048) == {}
    assert choose(2112, 2048, 8192) == {"BLOCK_M": 192, "BLOCK_N": 192, "schedule": "persistent"}
    assert choose(1024, 4096, 4096) == {"BLOCK_N": 256, "schedule": "persistent"}
    assert choose(512, 4096, 4096) == {"BLOCK_N": 128, "schedule": "persistent"}
    k = tawa.compile(path)
    args = lambda m, n, kk: (Array(m, kk), Array(n, kk), Array(n), Array(m, n), Array(m, n))
    assert k.variant_for(*args(1280, 10240, 2048)) is k
    wide = k.variant_for(*args(1024, 4096, 4096))
    assert wide.compiled.constants["BLOCK_N"] == 256 and wide.compiled.persistent


def test_an_explicit_schedule_is_never_overridden(tmp_path, monkeypatch):
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    path = str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa")
    for schedule in ("streamk", "persistent"):
        k = tawa.compile(path, schedule=schedule)
        assert k.variant_for(*gemm_args(1280, 10240, 2048)) is k
        assert k.variant_for(*gemm_args(1100, 4096, 4096)) is k
    # small M still takes its tile with the schedule given
    small = tawa.compile(path, schedule="persistent").variant_for(*gemm_args(8, 4096, 4096))
    assert small.compiled.constants["BLOCK_M"] == 64
    # clusters asked for are kept: stream-K cannot run in them
    paired = tawa.compile(path, cluster="2x1")
    assert paired.variant_for(*gemm_args(1280, 10240, 2048)) is paired
    assert tawa.compile(path, cluster="1x1").variant_for(*gemm_args(1280, 10240, 2048)).compiled.stream_k


class CupyLike:
    """A device array as CuPy shows it: `__cuda_array_interface__` and strides in bytes."""

    def __init__(self, shape, ptr):
        from runtime_fakes import FakeDeviceArray
        self._array = FakeDeviceArray(shape, "bf16", ptr=ptr)
        self.shape = tuple(shape)
        self.strides = (shape[1] * 2, 2)

    @property
    def __cuda_array_interface__(self):
        return self._array.__cuda_array_interface__


@pytest.mark.parametrize("m,n,k", [(1536, 6145, 2048), (1536, 6144, 2001)], ids=["B-rows", "A-rows"])
def test_rows_tma_cannot_copy_take_the_kernels_own_variant_without_tma(tmp_path, monkeypatch, m, n, k):
    """A shape whose variant is persistent or clustered, called on rows TMA cannot copy (a pitch not a multiple of
    16 bytes): the launch goes to a variant without TMA (the shape variant's own, compiled under the compiler's
    schedule, or where that has none the kernel's), with its warning, not to an error."""
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from runtime_fakes import FakeDriver
    from tawa.runtime import driver
    from tawa.runtime.launcher import param_size_align
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    kernel = tawa.compile(str(pathlib.Path(__file__).resolve().parents[2] / "examples" / "gemm.tawa"))
    fake = FakeDriver().install(monkeypatch, [param_size_align(p)[0] for p in kernel.compiled.abi])
    monkeypatch.setattr(driver, "sm_count", lambda ordinal: 132)
    monkeypatch.setattr(driver, "default_device", lambda: 0)
    a, b = CupyLike((m, k), 0x7F0000000000), CupyLike((k, n), 0x7F1000000000)
    c = CupyLike((m, n), 0x7F2000000000)
    assert kernel.variant_for(a, b, c) is not kernel          # the shape picks a persistent variant
    with pytest.warns(tawa.TawaPerformanceWarning, match="without TMA"):
        kernel(a, b, c)
    kernel(a, b, c)                                           # again: no recompiling, the same fallback
    fallbacks = [f for f in (kernel._fallback, kernel.variant_for(a, b, c)._fallback) if f is not None]
    assert len(fake.launches) == 2 and len(fallbacks) == 1 and not fallbacks[0].compiled.persistent


def test_rows_off_sector_reads_every_kind_of_array():
    from tawa.autotune.launch_defaults import rows_off_sector
    assert rows_off_sector(Strided(100, 5000)) and not rows_off_sector(Strided(100, 5008))
    assert not rows_off_sector(Strided(100, 1001))          # not a multiple of 16 bytes: TMA cannot copy it at all
    assert not rows_off_sector(Strided(1, 5000))            # one row
    assert rows_off_sector(TorchLike(100, 5000)) and not rows_off_sector(TorchLike(100, 5000, row=5008))
    class InterfaceOnly:                                    # only `__cuda_array_interface__` (C-contiguous)
        shape = (100, 5000)
        __cuda_array_interface__ = CupyLike((100, 5000), 0x7F0000000000).__cuda_array_interface__
    assert rows_off_sector(InterfaceOnly())
    assert not rows_off_sector(object()) and not rows_off_sector(Array(100))


def test_attention_at_head_dim_64_launches_its_192_row_variant_on_long_sequences():
    """flash_attention.tawa compiled at head dim 64: a long sequence launches the 192-row variant (compiled once),
    a short one the kernel itself; causal (its compiled kernel's loops uneven) needs a longer sequence. The rule
    reads the compiled kernel's constants and loop traits."""
    source = (pathlib.Path(__file__).resolve().parents[2] / "examples" / "flash_attention.tawa").read_text()
    from tawa.frontend.tuning import space_info
    compiled = []

    def compile_variant(config):
        compiled.append(dict(config))
        return fake_kernel(f"v{len(compiled)}")

    for causal, short, long in ((0, 1024, 2048), (1, 4096, 6144)):
        compiled.clear()
        shapes = ShapeVariants(lambda: space_info(source, "flash_attention.tawa"), compile_variant,
                               fixed={"HEAD_DIM": 64, "CAUSAL": causal})
        own = Kernel(types.SimpleNamespace(name="fa", target="cuda", params=[{"name": n} for n in "QKVO"],
                                           constants={"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 128},
                                           uneven_programs=bool(causal), chained_dots=True, ctas_per_sm=2,
                                           uniform_by_choice=True),
                     shape_variants=shapes)
        q = Array(8, 16, short, 64)
        assert own.variant_for(q, q, q, q, 0.1) is own
        q = Array(8, 16, long, 64)
        assert own.variant_for(q, q, q, q, 0.1) is not own
        assert own.variant_for(q, q, q, q, 0.1) is own.variant_for(q, q, q, q, 0.1)
        assert compiled == [{"BLOCK_M": 192, "BLOCK_N": 128, "schedule": "tile"}]


def test_a_raised_key_block_that_did_not_take_the_uniform_path_is_not_launched():
    """A kernel of 64-key specialized blocks at head dim 64 asks for 128-key blocks on S = 512 (for the uniform-warp
    path); where the compiled variant is specialized after all (ptxas left the uniform kernel one CTA per SM) the
    launch keeps the kernel itself, and asks no more for those extents; where it is uniform, the variant runs."""
    source = (pathlib.Path(__file__).resolve().parents[2] / "examples" / "flash_attention.tawa").read_text()
    from tawa.frontend.tuning import space_info
    for uniform in (False, True):
        compiled = []

        def compile_variant(config):
            compiled.append(dict(config))
            k = fake_kernel(f"v{len(compiled)}")
            k.compiled.uniform_by_choice = uniform
            return k

        shapes = ShapeVariants(lambda: space_info(source, "flash_attention.tawa"), compile_variant,
                               fixed={"HEAD_DIM": 64})
        own = Kernel(types.SimpleNamespace(name="fa", target="cuda", params=[{"name": n} for n in "QKVO"],
                                           constants={"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 64},
                                           uneven_programs=False, chained_dots=True, ctas_per_sm=2,
                                           uniform_by_choice=False),
                     shape_variants=shapes)
        q = Array(8, 16, 512, 64)
        got = own.variant_for(q, q, q, q, 0.1)
        assert (got is own) == (not uniform)
        assert own.variant_for(q, q, q, q, 0.1) is got
        assert compiled == [{"BLOCK_N": 128}]


def test_a_program_whose_results_depend_on_its_tiles_keeps_them(made):
    """`partial[pid_n]` (one row per BLOCK_N tile): another tile would change what the program writes, so no
    shape launches a variant (`tawa.frontend.tuning.tile_invariant`)."""
    info = dict(INFO, tile_invariant=False)
    kernel = fake_kernel("gemm_rowmax", ShapeVariants(lambda: info, lambda config: made.append(config)))
    for m, n, k in ((8, 4096, 4096), (1100, 4096, 4096), (3000, 5000, 2000)):
        assert kernel.variant_for(*gemm_args(m, n, k)) is kernel
    assert made == []


def test_a_variant_whose_constants_break_a_requirement_gives_way_to_the_kernel(gemm, made):
    """A shape variant (other tile constants) whose `@requires` condition the arguments break: the kernel's own
    configuration launches, and checks its own conditions."""
    from tawa.errors import RequirementError
    variant = gemm.variant_for(*gemm_args(8, 4096, 4096))
    assert variant is not gemm

    class Refusing(FakeLauncher):
        def launch(self, args, grid=None, stream=None):
            raise RequirementError("kernel 'gemm' requires K % 256 == 0, but K = 4096")
    variant._launcher = Refusing()
    gemm(*gemm_args(8, 4096, 4096))
    assert gemm._launcher.calls == [None]


def test_a_variant_whose_requirement_the_extents_break_is_not_picked(gemm, made):
    """The pick checks the variant's @requires on the extents it reads: the kernel itself is named (variant_for)
    and launched, without trying the variant on every call."""
    from tawa.runtime.kernel import Kernel
    real = Kernel.__init__
    seen = []

    def compile_variant(config):
        k = fake_kernel(f"variant {sorted(config.items())}")
        k.compiled.requires = [{"condition": "K % 8192 == 0", "source": "@requires(K % 8192 == 0)", "line": 1}]
        k.compiled.constants = {}
        seen.append(k)
        return k
    gemm._shapes._compile_variant = compile_variant
    assert gemm.variant_for(*gemm_args(8, 4096, 4096)) is gemm
    gemm(*gemm_args(8, 4096, 4096))
    assert gemm._launcher.calls == [None] and seen and seen[0]._launcher.calls == []

