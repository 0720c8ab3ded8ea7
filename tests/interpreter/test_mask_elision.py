"""Masks the mask-elision pass turns into branches compute what the plain selects compute, on every block: the
interpreter runs the kernel after the tile-level passes (target='cpu'), on ragged shapes where some blocks take
the unmasked branch and others the masked one, against numpy."""
import pathlib

import numpy as np
import pytest

import tawa

KERNEL = pathlib.Path(__file__).resolve().parents[1] / "passes" / "mask-elision.tawa"


def reference(x, block):
    m, n = x.shape
    gm, gn = -(-m // block), -(-n // block)
    padded = np.zeros((gm * block, gn * block))      # loads read 0 outside the tensor
    padded[:m, :n] = x
    y = np.zeros((gm * block, block))
    for pm in range(gm):
        r = (pm * block + np.arange(block))[:, None]
        acc = np.zeros((block, block))
        for j in range(gn):
            c = (j * block + np.arange(block))[None, :]
            tile = padded[r, c]
            a = np.where(c < n, tile, 2.0)
            b = np.where((c <= r) & (c < n), a, -1.0)
            acc += np.where(c != 3, np.where(b > 0, b, 0.5), 1.0) + a
        y[pm * block:(pm + 1) * block] = acc
    return y[:m]


@pytest.mark.parametrize("m,n", [(64, 64), (100, 200), (130, 70), (1, 1), (64, 300), (70, 127)])
def test_elided_masks_match_numpy(m, n):
    kernel = tawa.compile(str(KERNEL), target="cpu")
    x = np.random.default_rng(m * 1000 + n).standard_normal((m, n)).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    kernel[(-(-m // 64),)](x, y)
    w = min(n, 64)
    np.testing.assert_allclose(y[:, :w], reference(x, 64)[:, :w], rtol=1e-5, atol=1e-5)


def test_the_pass_fires():
    """The kernel above really has its two index masks elided (else this file would test nothing new)."""
    from tawa.compiler import compile_source
    from tawa.options import CompileOptions
    text = compile_source(KERNEL.read_text(), str(KERNEL), CompileOptions(target="cpu"), emit="mlir")
    assert str(text).count("scf.if") == 2
