"""GPU coverage of what the language documents: every dot operand layout (transposed A and B), f32 dots (tf32),
tiles of fewer rows than a 64-row wgmma, narrow K tiles (32- and 64-byte rows), fp8 and i32 tiles in registers.

Each kernel runs on ragged shapes with outputs poisoned (NaN, or a sentinel for integers), under the compiler's
schedule and the uniform-warp one where both apply, against a reference computed from the same inputs in float64
(dots) or with the interpreter's own rounding rules (ml_dtypes for fp8, C division for i32). The references are
checked against the CPU interpreter too (`test_*_reference_matches_interpreter`), so a GPU that matches them
matches the interpreter."""
import pathlib

import numpy as np
import pytest

import tawa
from e2e_support import compiled, rel_err

ml_dtypes = pytest.importorskip("ml_dtypes")

KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"
GEMM = str(KERNELS / "gemm_layouts.tawa")
F8 = str(KERNELS / "f8_elementwise.tawa")
I32 = str(KERNELS / "i32_ops.tawa")

NUMPY = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32, "f8e4m3": ml_dtypes.float8_e4m3fn,
         "f8e5m2": ml_dtypes.float8_e5m2}
#: Ragged (M, N, K) per operand type: not multiples of any tile, every contiguous extent a multiple of 16 bytes.
SHAPES = {"bf16": (200, 136, 88), "f16": (200, 136, 88), "f32": (200, 140, 76), "f8e4m3": (208, 144, 176)}
#: Relative error against float64: 16-bit products are exact in f32 and accumulate in f32; tf32 drops 13 mantissa
#: bits of each operand; fp8 wgmma accumulates its products with fewer bits than f32 (measured on an H200: 1.6e-4
#: on these shapes, where an f32 accumulation would give 1e-7) (docs/language.md).
TOLERANCE = {"bf16": 1e-5, "f16": 1e-5, "f32": 5e-3, "f8e4m3": 1e-3}

AUTO, UNIFORM = {}, {"warp_specialize": False}


def _case(dtype, bm, bn, bk, a_t=0, b_t=0, a_computed=0, schedules=(AUTO, UNIFORM), **options):
    consts = dict(DTYPE=dtype, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, A_T=a_t, B_T=b_t, A_COMPUTED=a_computed)
    name = f"{dtype}-{bm}x{bn}x{bk}" + "-at" * a_t + "-bt" * b_t + "-computed" * a_computed + \
        "".join(f"-{k}{v}" for k, v in options.items())
    return [pytest.param(consts, dict(options, **s), id=f"{name}-{'uniform' if s else 'auto'}") for s in schedules]


DOT_CASES = [
    # Transposed operands of 16-bit dots: A stored [K, M] (tnspA), B stored [N, K], both, and `at.T * 2.0`
    # (A computed from a transposed tile: in a warp-specialized kernel the slot is read into registers).
    *_case("bf16", 128, 128, 64, a_t=1),
    *_case("f16", 128, 64, 64, a_t=1, b_t=1),
    *_case("bf16", 128, 128, 64, b_t=1),
    *_case("bf16", 128, 128, 64, a_t=1, a_computed=1),
    # f32 through tf32: K-major B; a transposed or computed A goes through registers.
    *_case("f32", 128, 128, 32, b_t=1),
    *_case("f32", 64, 64, 32, a_t=1, b_t=1),
    *_case("f32", 128, 64, 32, b_t=1, a_computed=1),
    *_case("f32", 128, 64, 16, b_t=1, schedules=(UNIFORM,)),
    *_case("f32", 64, 64, 8, b_t=1, schedules=(UNIFORM,)),
    # Fewer rows than one 64-row wgmma: every warp feeds the rows it holds (copies).
    *_case("bf16", 16, 128, 64),
    *_case("bf16", 32, 64, 64, b_t=1),
    *_case("bf16", 16, 64, 64, a_t=1, schedules=(UNIFORM,)),
    *_case("f32", 16, 64, 32, b_t=1),
    *_case("f8e4m3", 32, 64, 128, b_t=1),
    *_case("bf16", 64, 128, 64, schedules=(UNIFORM,), num_warps=8),
    *_case("bf16", 64, 128, 64, schedules=(AUTO,), num_consumer_groups=2),
    # Narrow K tiles: 32- and 64-byte swizzled rows, in aref slots too under warp specialization.
    *_case("bf16", 128, 128, 16),
    *_case("bf16", 128, 128, 32, b_t=1),
    *_case("f16", 64, 64, 32, a_t=1),
    *_case("bf16", 16, 64, 16, b_t=1),
    *_case("f8e4m3", 128, 128, 64, b_t=1),
    *_case("f8e4m3", 128, 64, 128, a_t=1, b_t=1),
    # Narrow MN-major B rows: BLOCK_N of 16 and 32.
    *_case("bf16", 128, 16, 64),
    *_case("bf16", 64, 32, 32),
]


def dot_inputs(consts, shape=None):
    """(A as stored, B as stored, float64 reference of C) for a gemm_layouts configuration."""
    dtype = consts["DTYPE"]
    m, n, k = shape or SHAPES[dtype]
    rng = np.random.default_rng(m + n + k + 7 * consts["BLOCK_M"] + consts["BLOCK_K"])
    a = rng.standard_normal((m, k)).astype(np.float32).astype(NUMPY[dtype])
    b = rng.standard_normal((k, n)).astype(np.float32).astype(NUMPY[dtype])
    ref = a.astype(np.float64) * (2.0 if consts["A_COMPUTED"] else 1.0) @ b.astype(np.float64)
    a_stored = np.ascontiguousarray(a.T) if consts["A_T"] else a
    b_stored = np.ascontiguousarray(b.T) if consts["B_T"] else b
    return a_stored, b_stored, ref


def torch_fp8(torch, dtype):
    return {ml_dtypes.float8_e4m3fn: torch.float8_e4m3fn, ml_dtypes.float8_e5m2: torch.float8_e5m2}[dtype]


def to_device(torch, x):
    """A numpy array (ml_dtypes included) as a CUDA tensor of the matching torch dtype, with the same bytes."""
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
    if x.dtype.itemsize == 1:
        return torch.from_numpy(x.view(np.uint8)).cuda().view(torch_fp8(torch, x.dtype.type))
    return torch.from_numpy(x).cuda()


def from_device(x, dtype):
    """The bytes of an fp8 CUDA tensor as a numpy array of the ml_dtypes type `dtype`."""
    import torch
    return x.view(torch.uint8).cpu().numpy().view(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("consts,options", DOT_CASES)
def test_dot(consts, options):
    kernel = compiled(GEMM, **consts, **options)
    import torch
    a, b, ref = dot_inputs(consts)
    c = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.float32)
    kernel(to_device(torch, a), to_device(torch, b), c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    assert rel_err(c, torch.from_numpy(ref).cuda()) < TOLERANCE[consts["DTYPE"]]


#: Tiles wider than one wgmma's 256 columns (two wgmmas per k-step, cut at a swizzle box: 192 + 128 columns of a
#: 320-wide tile, 160 + 128 of a 288-wide one's 32-column boxes, 192 + 192; at 8 rows of a K-major B) and tiles
#: taller than one TMA copy (a K-major B), on an N that covers both wgmmas' columns (both copies' rows) of the first
#: tiles and leaves the last one ragged.
WIDE_CASES = [
    *_case("bf16", 128, 320, 64),
    *_case("f16", 128, 288, 64, schedules=(AUTO,)),
    *_case("bf16", 128, 384, 64, a_t=1, schedules=(AUTO,)),
    *_case("bf16", 128, 320, 64, a_computed=1, schedules=(AUTO,)),
    # K-major B tiles of 320 and 384 rows: two TMA copies of 160 (192) rows each, wgmmas of 160 (192) columns
    *_case("bf16", 128, 320, 64, b_t=1, schedules=(AUTO,)),
    *_case("f16", 128, 384, 64, a_t=1, b_t=1, schedules=(AUTO,)),
    # tf32 and fp8 read B K-major only: 160 + 160 columns
    *_case("f32", 128, 320, 32, b_t=1, schedules=(AUTO,)),
    *_case("f8e4m3", 128, 320, 128, b_t=1, schedules=(AUTO,)),
]
WIDE_SHAPES = {"bf16": (200, 712, 88), "f16": (200, 712, 88), "f32": (200, 712, 76), "f8e4m3": (200, 712, 176)}


@pytest.mark.gpu
@pytest.mark.parametrize("consts,options", WIDE_CASES)
def test_wide_dot(consts, options):
    kernel = compiled(GEMM, **consts, **options)
    import torch
    a, b, ref = dot_inputs(consts, shape=WIDE_SHAPES[consts["DTYPE"]])
    c = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.float32)
    kernel(to_device(torch, a), to_device(torch, b), c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    assert rel_err(c, torch.from_numpy(ref).cuda()) < TOLERANCE[consts["DTYPE"]]


INTERPRETED = {"bf16-128x128x64-at-auto", "f32-128x128x32-bt-auto", "bf16-16x128x64-auto", "bf16-128x128x16-uniform",
               "f8e4m3-128x64x128-at-bt-auto", "bf16-128x16x64-uniform"}


@pytest.mark.parametrize("consts,options", [c for c in DOT_CASES if c.id in INTERPRETED])
def test_dot_reference_matches_interpreter(consts, options):
    a, b, ref = dot_inputs(consts, shape=(40, 24, 40) if consts["DTYPE"] != "f8e4m3" else (48, 32, 64))
    c = np.full(ref.shape, np.nan, dtype=np.float32)
    tawa.interpret(GEMM, **consts)(a, b, c)
    assert rel_err_np(c, ref) < 1e-5


def rel_err_np(out, ref) -> float:
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


# ---- fp8 tiles in registers --------------------------------------------------------------------------------------
F8_CASES = [pytest.param("f8e4m3", 100.0, id="e4m3"), pytest.param("f8e5m2", 3000.0, id="e5m2")]
F8_SHAPE, F8_BLOCK = (77, 150), (32, 64)


def f8_inputs(dtype, shape=F8_SHAPE):
    rng = np.random.default_rng(11)
    return (rng.standard_normal(shape) * 8).astype(np.float32).astype(NUMPY[dtype])


def f8_reference(x, scale, block=F8_BLOCK):
    """What the interpreter computes: every fp8 op in f32, rounded to fp8 (ml_dtypes) after each op."""
    dt = x.dtype
    f = np.float32
    x32 = x.astype(f)
    y = ((x32 * x32).astype(dt).astype(f) - x32).astype(dt)
    other = (np.maximum(x32, (-x32).astype(dt).astype(f)) + f(0.25)).astype(dt)
    y = np.where(x32 > f(0.5), y, other)
    z = x32 * f(3.0) + y.astype(f)
    w = (x32 * f(scale)).astype(dt)
    m, n = x.shape
    nb = -(-n // block[1])
    padded = np.zeros((m, nb * block[1]), dtype=f)
    padded[:, :n] = x32
    r = padded.reshape(m, nb, block[1]).max(axis=2)
    return y, z, w, r


def same_fp8(out, ref):
    """Bit-identical fp8 arrays, any NaN matching any NaN (the sign of a NaN is not specified)."""
    out_nan = np.isnan(out.astype(np.float32))
    ref_nan = np.isnan(ref.astype(np.float32))
    return bool(np.all((out.view(np.uint8) == ref.view(np.uint8)) | (out_nan & ref_nan)))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,scale", F8_CASES)
def test_fp8_elementwise(dtype, scale):
    kernel = compiled(F8, DTYPE=dtype, SCALE=scale)
    import torch
    x = f8_inputs(dtype)
    y_ref, z_ref, w_ref, r_ref = f8_reference(x, scale)
    # Poison fp8 outputs with the smallest subnormal, which no element of these outputs can take.
    y, w = (torch.full(x.shape, 1, device="cuda", dtype=torch.uint8).view(torch_fp8(torch, x.dtype.type))
            for _ in range(2))
    z = torch.full(x.shape, float("nan"), device="cuda", dtype=torch.float32)
    r = torch.full(r_ref.shape, float("nan"), device="cuda", dtype=torch.float32)
    kernel(to_device(torch, x), y, z, w, r)
    torch.cuda.synchronize()
    assert same_fp8(from_device(y, x.dtype), y_ref)
    assert same_fp8(from_device(w, x.dtype), w_ref)
    assert np.array_equal(r.cpu().numpy(), r_ref)
    z = z.cpu().numpy()
    assert np.allclose(z, z_ref, rtol=1e-6, atol=0, equal_nan=True)
    assert np.array_equal(np.isnan(z), np.isnan(z_ref))


@pytest.mark.parametrize("dtype,scale", F8_CASES)
def test_fp8_reference_matches_interpreter(dtype, scale):
    x = f8_inputs(dtype)
    y_ref, z_ref, w_ref, r_ref = f8_reference(x, scale)
    assert np.isnan(w_ref.astype(np.float32)).any() or np.isinf(w_ref.astype(np.float32)).any()  # overflow tested
    y, w = np.zeros_like(x), np.zeros_like(x)
    z = np.zeros(x.shape, np.float32)
    r = np.zeros(r_ref.shape, np.float32)
    tawa.interpret(F8, DTYPE=dtype, SCALE=scale)(x, y, z, w, r)
    assert same_fp8(y, y_ref) and same_fp8(w, w_ref)
    assert np.array_equal(r, r_ref)
    assert np.allclose(z, z_ref, rtol=1e-6, atol=0, equal_nan=True)


# ---- i32 tensors -------------------------------------------------------------------------------------------------
I32_SHAPE, I32_BLOCK = (77, 50), (32, 64)
SENTINEL = -12345678


def i32_inputs(shape=I32_SHAPE):
    return np.random.default_rng(12).integers(-10**6, 10**6, size=shape, dtype=np.int32)


def _cdiv_trunc(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def i32_reference(x, block=I32_BLOCK):
    """C semantics: // and % round toward zero; out-of-bounds columns of the block read as 0 (they join the
    row reductions)."""
    m, n = x.shape
    xp = np.zeros((m, block[1]), dtype=np.int64)
    xp[:, :n] = x
    a = xp * 3 + 7
    y = _cdiv_trunc(a, 5) - (xp - 4 * _cdiv_trunc(xp, 4))
    y = np.where(y > 10, y & 255, np.abs(y) | 1)
    y = np.maximum(y, xp - 100)
    s = xp.sum(axis=1) + y.max(axis=1)
    return y[:, :n].astype(np.int32), s.astype(np.int32), (x.astype(np.float32) * np.float32(0.5))


@pytest.mark.gpu
def test_i32_tensors():
    kernel = compiled(I32)
    import torch
    x = i32_inputs()
    y_ref, s_ref, f_ref = i32_reference(x)
    y = torch.full(x.shape, SENTINEL, device="cuda", dtype=torch.int32)
    s = torch.full(s_ref.shape, SENTINEL, device="cuda", dtype=torch.int32)
    f = torch.full(x.shape, float("nan"), device="cuda", dtype=torch.float32)
    kernel(torch.from_numpy(x).cuda(), y, s, f)
    torch.cuda.synchronize()
    assert np.array_equal(y.cpu().numpy(), y_ref)
    assert np.array_equal(s.cpu().numpy(), s_ref)
    assert np.array_equal(f.cpu().numpy(), f_ref)


def test_i32_reference_matches_interpreter():
    x = i32_inputs()
    y_ref, s_ref, f_ref = i32_reference(x)
    y, s, f = np.zeros_like(x), np.zeros(s_ref.shape, np.int32), np.zeros(x.shape, np.float32)
    tawa.interpret(I32)(x, y, s, f)
    assert np.array_equal(y, y_ref) and np.array_equal(s, s_ref) and np.array_equal(f, f_ref)
