"""Thread-block clusters in the generated code, compiled for sm_90a and assembled by ptxas on the CPU: the shared
operand tile copied in two halves with TMA multicast (the other tiles as before), slots released in every CTA of
the cluster through `mapa` without a cluster-scope fence in the main loop, the cluster barrier after the mbarriers
are initialised, the producer's last wait on its ring, no serialized wgmma, no spills; kernels without clusters
unchanged. The GPU runs are in tests/e2e/test_cluster_gpu.py."""
import re

import pytest

from ws_support import SERIALIZED, compile_example, spill_bytes

MULTICAST = "multicast::cluster"
REMOTE_ARRIVE = re.compile(r"mapa\.shared::cluster\.u32 remote, %r\d+, %r\d+; mbarrier\.arrive\.shared::cluster\.b64")


@pytest.mark.parametrize("example,constants,shared_boxes", [
    ("gemm", {"cluster": "2x1"}, 8),                  # B 64x256: 4 column boxes, each in two halves
    ("gemm", {"cluster": "1x2"}, 2),                  # A 128x64: one box in two halves
    ("gemm", {"cluster": "2x1", "BLOCK_N": 128, "schedule": "pingpong"}, 4),
    ("swiglu", {"cluster": "2x1", "BLOCK_N": 128}, 8),  # B1 and B2
    ("linear_gelu_residual", {"cluster": "2x1", "BLOCK_N": 128, "schedule": "pingpong"}, 2),  # W [N, K]
    ("gemm_fp8", {"cluster": "2x1"}, 2),             # B [256, 128] of fp8: one box
])
def test_clustered_kernels(example, constants, shared_boxes):
    k = compile_example(example, **constants)
    ptx, notes = k.ptx, "\n".join(k.compiled.notes)
    assert f"runs in {constants['cluster']} thread-block clusters" in notes
    assert k.compiled.cluster == [int(c) for c in constants["cluster"].split("x")]
    assert spill_bytes(k) == 0 and not SERIALIZED.search(notes)
    # Each K step: the shared tile's halves (one per CTA, or both where the launch has no clusters) multicast.
    assert ptx.count(MULTICAST) == shared_boxes
    # A consumer releases a slot in each CTA of the cluster, with no fence at cluster or GPU scope.
    assert REMOTE_ARRIVE.search(ptx)
    assert "arrive.release.cluster" not in ptx and "membar" not in ptx and "fence.acq_rel.gpu" not in ptx
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx
    assert "%cluster_nctarank" in ptx and "%cluster_ctarank" in ptx


def test_kernels_without_clusters_have_none_of_it():
    ptx = compile_example("gemm").ptx
    assert MULTICAST not in ptx and "mapa" not in ptx and "barrier.cluster" not in ptx and "cluster_nctarank" not in ptx


def test_producer_drains_its_ring_before_exit():
    """The last waits of the producer: one per slot of the ring, after the tile loop (the other CTA's consumers
    arrive on this CTA's barriers until then)."""
    plain = compile_example("gemm", schedule="persistent").ptx
    clustered = compile_example("gemm", schedule="persistent", cluster="2x1").ptx
    depth = 4                                       # 128x256 tiles with BLOCK_K 64: four slots
    waits = lambda ptx: ptx.count("mbarrier.try_wait.parity")
    assert waits(clustered) - waits(plain) == depth
