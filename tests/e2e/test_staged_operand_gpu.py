"""Epilogue operands brought in through the TMA store's staging boxes (`to_nvvm/staged_operand.py`) on the GPU:
the linear layer's residual under every schedule (persistent, one tile per CTA, ping-pong, 2x1 clusters, the
uniform pipeline), with a residual whose row stride differs from the output's, one TMA cannot read (its start not
16-byte aligned: the launch falls back to the kernel without TMA), an f32 residual used twice, and a residual also
reduced before the store (loaded from global memory). Ragged shapes, float64 references, NaN-poisoned outputs."""
import pathlib

import pytest

import tawa
from e2e_support import EXAMPLES, PREFILL, check_launch, compiled, gemm_case, linear_case

pytestmark = pytest.mark.gpu
KERNELS = pathlib.Path(__file__).resolve().parent / "kernels"
SCHEDULES = [pytest.param({"BLOCK_N": 256, "schedule": "persistent"}, id="persistent-n256"),
             pytest.param({"BLOCK_N": 128, "schedule": "persistent"}, id="persistent-n128"),
             pytest.param({"BLOCK_N": 256, "schedule": "tile"}, id="tile-n256"),
             pytest.param({"BLOCK_N": 128, "schedule": "pingpong"}, id="pingpong-n128"),
             pytest.param({"BLOCK_N": 256, "schedule": "persistent", "cluster": "2x1"}, id="persistent-c21"),
             pytest.param({"BLOCK_N": 128, "schedule": "pingpong", "cluster": "2x1"}, id="pingpong-c21"),
             pytest.param({"BLOCK_N": 192, "schedule": "pingpong"}, id="pingpong-n192"),
             pytest.param({"BLOCK_N": 128, "warp_specialize": False}, id="uniform"),
             # 64 rows over 8 warps: each element held by two threads, so the residual keeps its global loads
             pytest.param({"BLOCK_M": 64, "BLOCK_N": 128, "warp_specialize": False, "num_warps": 8},
                          id="uniform-shared-rows")]
# a single tile; ragged in M and N; a tile count that is not a multiple of the SMs; K below BLOCK_K; more tiles
# than SMs, ragged (persistent CTAs take a second tile: the bias buffer and the residual's registers are reused);
# main loops of 2 and 0 iterations (the residual's copies start at the loop's second iteration, or before a loop
# too short to reach it: `control.lower_for`)
SHAPES = [(100, 120, 64), (333, 520, 200), (1000, 3000, 712), (130, 264, 8), (2100, 2696, 136), (260, 392, 128),
          (130, 264, 0)]
#: Runs test_pingpong_gpu.py and test_cluster_gpu.py make already, with the same options, shape and inputs.
ELSEWHERE = {(schedule, shape) for schedule in ("pingpong-n128", "persistent-c21", "pingpong-c21")
             for shape in ((333, 520, 200), (1000, 3000, 712))}
CASES = [pytest.param(shape, options.values[0], id=f"{'x'.join(map(str, shape))}-{options.id}")
         for shape in SHAPES for options in SCHEDULES if (options.id, shape) not in ELSEWHERE]


@pytest.mark.parametrize("shape,options", CASES)
def test_linear_residual(shape, options):
    kernel = compiled("linear_gelu_residual.tawa", **options)
    import torch
    check_launch(torch, kernel, *linear_case(torch, *shape, seed=sum(shape)))


@pytest.mark.parametrize("options", SCHEDULES[:4])
def test_linear_residual_with_its_own_row_stride(options):
    """R a column slice of a wider tensor: its tensor map has its own row pitch."""
    kernel = compiled("linear_gelu_residual.tawa", **options)
    import torch
    (x, w, bias, r), ref = linear_case(torch, 300, 392, 136, seed=5)
    wide = torch.randn(300, 392 + 72, device="cuda", dtype=torch.bfloat16)
    wide[:, 8:8 + 392] = r
    check_launch(torch, kernel, [x, w, bias, wide[:, 8:8 + 392]], ref)


def test_linear_residual_that_tma_cannot_read():
    """R starting 2 bytes past a 16-byte boundary: the launch uses the kernel compiled without TMA."""
    kernel = tawa.compile(str(EXAMPLES / "linear_gelu_residual.tawa"), BLOCK_N=128)
    if PREFILL:
        kernel._without_tma()
        pytest.skip("kernels compiled into the cache; the check runs on a GPU")
    import torch
    (x, w, bias, r), ref = linear_case(torch, 200, 256, 96, seed=6)
    flat = torch.empty(200 * 256 + 1, device="cuda", dtype=torch.bfloat16)
    shifted = flat[1:].view(200, 256)
    shifted.copy_(r)
    with pytest.warns(tawa.TawaPerformanceWarning, match="without TMA"):
        check_launch(torch, kernel, [x, w, bias, shifted], ref)


def _gemm_residual_case(torch, m, n, k, residual_dtype, seed):
    """Fresh random A [m, k], B [k, n] (bf16) and a residual [m, n]: ([a, b, r], reference of a @ b)."""
    (a, b), product = gemm_case(torch, m, n, k, seed)
    return [a, b, torch.randn(m, n, device="cuda", dtype=residual_dtype)], product


@pytest.mark.parametrize("schedule", ["persistent", "tile", "pingpong"])
def test_f32_residual_used_twice(schedule):
    kernel = compiled(str(KERNELS / "gemm_residual_f32.tawa"), schedule=schedule)
    import torch
    args, product = _gemm_residual_case(torch, 333, 264, 200, torch.float32, seed=7)
    r = args[2].double()
    check_launch(torch, kernel, args, product + r * (1 + r), tol=1e-4, dtype=torch.float32)


@pytest.mark.parametrize("schedule", ["persistent", "tile", "pingpong"])
def test_residual_reduced_before_the_store(schedule):
    kernel = compiled(str(KERNELS / "gemm_residual_rowsum.tawa"), schedule=schedule)
    import torch
    args, product = _gemm_residual_case(torch, 333, 264, 200, torch.bfloat16, seed=8)
    r = args[2]
    m, n = r.shape
    # the kernel subtracts each 128-column block's row sum / 128 (its tile's), zero-padded past N
    rd = torch.nn.functional.pad(r.double(), (0, (-n) % 128)).view(m, -1, 128)
    sums = (rd.sum(dim=2, keepdim=True) / 128).expand(-1, -1, 128).reshape(m, -1)[:, :n]
    check_launch(torch, kernel, args, product + r.double() - sums)
