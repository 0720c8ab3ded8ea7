"""Two CTAs per SM on the GPU (`ctas_per_sm`, chosen by the compiler for attention at head dim 64 with 64-key
blocks) against float64 torch references: fresh random inputs, NaN-poisoned outputs, ragged sequence lengths (not
a multiple of any block, smaller than one block, 1), causal and not, grouped-query attention, and the same kernel
held to one CTA per SM. Each launch also asks the driver how many CTAs of the launched kernel an SM holds
(`cuOccupancyMaxActiveBlocksPerMultiprocessor`), so a kernel that silently fits only once fails."""
import pytest

from e2e_support import check_attention, compiled, record_launches

pytestmark = pytest.mark.gpu

#: (batch, heads, S, head dim 64)
SHAPES = [(1, 3, 77, 64), (1, 2, 129, 64), (2, 2, 640, 64), (2, 2, 1, 64), (1, 4, 1000, 64), (4, 8, 2048, 64)]


@pytest.fixture
def resident(monkeypatch):
    """CTAs per SM the driver reports for every launch made through it."""
    from tawa.runtime import driver

    def resident_ctas(fn, grid, block, shared, cluster):
        cu = driver.driver()
        n = driver.check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn.handle, block[0] * block[1] * block[2],
                                                                         shared), "cuOccupancyMaxActiveBlocks")
        return int(n)
    return record_launches(monkeypatch, resident_ctas)


def _attention(kernel, shape, causal, gqa=1):
    import torch
    check_attention(torch, kernel, shape, causal, seed=sum(shape) + causal, kv_heads=shape[1] // gqa)


@pytest.mark.parametrize("ctas", [None, 1], ids=["auto-2", "one"])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_flash_attention(shape, causal, ctas, resident):
    kernel = compiled("flash_attention.tawa", CAUSAL=causal, HEAD_DIM=64, BLOCK_N=64,
                      **({} if ctas is None else {"ctas_per_sm": ctas}))
    _attention(kernel, shape, causal)
    assert resident == [2 if ctas is None else 1]


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("shape,group", [((2, 8, 300, 64), 8), ((1, 8, 129, 64), 4), ((1, 4, 77, 64), 1)],
                         ids=["mqa", "gqa4", "mha"])
def test_gqa_attention(shape, group, causal, resident):
    kernel = compiled("gqa_attention.tawa", CAUSAL=causal, HEAD_DIM=64, BLOCK_N=64)
    _attention(kernel, shape, causal, gqa=group)
    assert resident == [2]


@pytest.mark.parametrize("example", ["flash_attention.tawa", "gqa_attention.tawa"])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("shape", [(1, 4, 77, 64), (2, 4, 640, 64), (1, 8, 1000, 64)],
                         ids=lambda s: "x".join(map(str, s)))
def test_uniform_warps_by_choice_keep_two_ctas_per_sm(example, shape, causal, resident):
    """The examples' default at head dim 64: 128-key blocks that the compiler runs on uniform warps because two of
    their CTAs fit an SM (`CompiledKernel.uniform_by_choice`): the driver must agree, on every launch (the shapes
    here keep the kernel's own blocks: S below 2048)."""
    kernel = compiled(example, CAUSAL=causal, HEAD_DIM=64)
    assert kernel.compiled.uniform_by_choice and kernel.compiled.num_threads == 256
    _attention(kernel, shape, causal, gqa=2 if example.startswith("gqa") else 1)
    assert resident and set(resident) == {2}
