"""TMA stores of tiles whose rows are a multiple of 64 or 32 bytes but not of 128 (`assign_layouts.swizzle_width`): each
copy's tensor map agrees with the staging it reads or writes, an epilogue operand is not brought in through
boxes narrower than its copies assume, and a persistent kernel's shared memory counts one staging area per stored
geometry (the GPU numerics: tests/e2e/test_examples_gpu.py, head dims 96, 80 and 32 and GEMM tiles 96 and 80
wide)."""
import pytest

from tawa.compiler import compile_source
from tawa.ir.types import elem_bytes
from tawa.options import CompileOptions
from ws_support import EXAMPLES

LINEAR = EXAMPLES / "linear_gelu_residual.tawa"


def build(path, source=None, **options):
    constants = {k: options.pop(k) for k in list(options) if k.isupper()}
    return compile_source(source or path.read_text(), str(path), CompileOptions(constants=constants, **options))


def swizzled_maps_match_their_boxes(kernel) -> bool:
    """Every swizzled tensor map copies rows of exactly its swizzle width (what the staging or the ring slot it
    fills is laid out for)."""
    dtypes = [p["dtype"] for p in kernel.params if p["kind"] != "const"]
    return all(p.box[-1] * elem_bytes(dtypes[p.arg]) == p.swizzle
               for p in kernel.abi if p.kind == "tensormap" and p.swizzle)


@pytest.mark.parametrize("block_n", [96, 80])
@pytest.mark.parametrize("options", [{"schedule": "tile"}, {"schedule": "persistent"}, {"warp_specialize": False}],
                         ids=["tile", "persistent", "uniform"])
def test_a_residual_of_narrow_rows_is_loaded_by_the_threads(block_n, options):
    """The linear layer's residual has the stored tile's shape, but its rows (192 or 160 bytes) are staged in 64- or
    32-byte boxes, which the operand's 128-byte box copies do not fit (their barrier would wait for bytes that never
    come): it is read into registers, and only Y goes through TMA."""
    k = build(LINEAR, BLOCK_N=block_n, **options)
    maps = {p.arg: p for p in k.abi if p.kind == "tensormap"}
    assert 3 not in maps                                   # R: per thread
    assert maps[4].swizzle == (64 if block_n == 96 else 32)
    assert swizzled_maps_match_their_boxes(k)
    assert "st.global" not in k.ptx and k.spill_bytes == 0


def test_wide_rows_keep_the_residual_in_the_staging():
    k = build(LINEAR, BLOCK_N=128, schedule="persistent")
    maps = {p.arg: p for p in k.abi if p.kind == "tensormap"}
    assert maps[3].swizzle == maps[4].swizzle == 128 and swizzled_maps_match_their_boxes(k)


TWO_OUTPUTS = """
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def two_out(A: bf16[M, K], B: bf16[K, N], B2: bf16[K, N2], C: bf16[M, N], C2: bf16[M, N2],
            BLOCK_M: const = 128, BLOCK_N: const = 256, BLOCK_K: const = 32, BN2: const = 160):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    acc2 = zeros((BLOCK_M, BN2), f32)
    for k in range(cdiv(K, BLOCK_K)):
        a = load(A, (pid_m, k), (BLOCK_M, BLOCK_K))
        b = load(B, (k, pid_n), (BLOCK_K, BLOCK_N))
        b2 = load(B2, (k, pid_n), (BLOCK_K, BN2))
        acc = dot(a, b, acc)
        acc2 = dot(a, b2, acc2)
    store(C, (pid_m, pid_n), acc.to(bf16))
    store(C2, (pid_m, pid_n), acc2.to(bf16))
"""


@pytest.mark.parametrize("bn2", [160, 96, 80])
def test_a_persistent_kernel_storing_two_geometries_fits_both_staging_areas(bn2):
    """C's 128-byte boxes and C2's 64- or 32-byte ones are two areas of the persistent epilogue; the ring sizing
    counted only the larger, and the kernel asked for more shared memory than the SM has."""
    k = build(EXAMPLES / "two_out.tawa", TWO_OUTPUTS, schedule="persistent", BN2=bn2)
    assert k.persistent and swizzled_maps_match_their_boxes(k)
