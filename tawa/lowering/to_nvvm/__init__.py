"""Conversion of a tawa kernel (layouts assigned, loops pipelined) to a gpu.module holding an NVVM kernel.

Split by op family: `memory` (TMA loads/stores, global access), `dot` (wgmma), `elementwise` (arith/math),
`shape` (splat, arange, expand_dims, broadcast, trans, layout conversion), `reduce` (shuffles + smem),
`control` (scf.for incl. the software pipeline, scf.if); `sync` holds the reusable mbarrier/TMA/fence helpers,
`context` the register/shared tile model, `kernel` the driver.
"""
from __future__ import annotations

NAME = "convert-to-nvvm"


def run(module, options=None):
    from .kernel import convert_kernel
    return convert_kernel(module, options)
