"""Where loads that are not dot operands end up, on kernels a review of the register-load changes found wrong:
a scaled Q under the persistent schedule keeps its ring counted in shared memory (it failed to compile: 257 KiB);
a bias loaded inside a run-time `if` stays the consumers' and the kernel warp specialized (it fell back to the
uniform schedule); 1-D block scales are not carried across K iterations (ptxas spilled 88 bytes)."""
import pathlib

import tawa
from ws_support import spill_bytes

KERNELS = pathlib.Path(__file__).resolve().parents[1] / "e2e" / "kernels"


def test_scaled_q_ring_is_counted():
    kernel = tawa.compile(str(KERNELS / "attention_scaled_q.tawa"), cache=False, D=128)
    assert any("persistent schedule" in n for n in kernel.notes)
    assert kernel.compiled.shared_bytes <= 232448


def test_bias_under_an_if_keeps_warp_specialization():
    kernel = tawa.compile(str(KERNELS / "attention_bias_if.tawa"), cache=False, warp_specialize=True)
    assert any("persistent schedule" in n for n in kernel.notes)


def test_one_dimensional_block_scales_do_not_spill():
    kernel = tawa.compile(str(KERNELS / "gemm_block_scales_1d.tawa"), cache=False)
    assert spill_bytes(kernel) == 0
