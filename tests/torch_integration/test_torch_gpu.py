"""tawa.torch_ops on a Hopper GPU: operators under torch.compile with fullgraph=True (inductor, no graph break),
captured into CUDA graphs (torch.cuda.graph, and torch.compile's mode="reduce-overhead") and replayed on new
data, ordered on torch's current stream, on the second GPU; and the Llama decoder layer of examples/llama_block.py
against the stock transformers layer. Kernels come from the kernel cache where the compiler is missing
(torch_support.py explains how to prefill it). No `from __future__ import annotations` here: torch reads the
annotations of the decorated functions below, which name the `torch` fixture's module."""
import importlib.util
import sys
import uuid

import pytest

from torch_support import EXAMPLES, SCALE_INPLACE, compile_all, op_name

pytestmark = pytest.mark.gpu

SPECS = {"gemm": ("gemm.tawa", {}), "scale": (SCALE_INPLACE, {})}


@pytest.fixture(scope="module")
def kernels():
    return compile_all(SPECS)


@pytest.fixture(scope="module")
def torch(kernels, cuda_torch):
    return cuda_torch


@pytest.fixture(scope="module")
def ops(torch, kernels):
    from tawa import torch_ops
    return {"gemm": torch_ops.custom_op(op_name("gemm"), kernels["gemm"], outputs=["C"]),
            "scale": torch_ops.custom_op(op_name("scale"), kernels["scale"], mutates_args=["X"])}


def rel_err(got, ref) -> float:
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


def bf16(torch, *shape, device="cuda"):
    return torch.randn(*shape, device=device, dtype=torch.bfloat16)


def test_custom_op_under_torch_compile_fullgraph(torch, kernels, ops, monkeypatch):
    from torch._dynamo.utils import counters
    from tawa.runtime import driver
    gemm = ops["gemm"]
    # (launches through the driver: the kernel's own, or the variant its per-shape rule picks for these shapes)
    launched, launch = [], driver.launch
    monkeypatch.setattr(driver, "launch", lambda *a, **k: launched.append(a[0]) or launch(*a, **k))
    w = bf16(torch, 512, 384)

    def model(x):
        y = gemm(torch.nn.functional.rms_norm(x, (512,)), w)
        return torch.nn.functional.silu(y.float()) * 2 + 1

    counters.clear()
    compiled = torch.compile(model, fullgraph=True)          # inductor
    for m in (300, 1000):
        x = bf16(torch, m, 512)
        ref = torch.nn.functional.silu(torch.nn.functional.rms_norm(x, (512,)).float() @ w.float()) * 2 + 1
        assert rel_err(compiled(x), ref) < 1e-2
    assert not counters["graph_break"]
    assert len(launched) == 2                                  # the compiled graph launched the Tawa kernel


def test_function_op_under_torch_compile(torch, kernels):
    from tawa import torch_ops
    gemm = kernels["gemm"]

    @torch_ops.custom_op(op_name("mlp"), mutates_args=())
    def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = x.new_empty(x.shape[0], w1.shape[1])
        gemm(x, w1, h)
        h = torch.relu(h)
        y = x.new_empty(x.shape[0], w2.shape[1])
        gemm(h, w2, y)
        return y

    x, w1, w2 = bf16(torch, 256, 512), bf16(torch, 512, 256) / 16, bf16(torch, 256, 128)
    ref = torch.relu(x.float() @ w1.float()).bfloat16().float() @ w2.float()
    compiled = torch.compile(lambda x: mlp(x, w1, w2) * 2, fullgraph=True)
    assert rel_err(compiled(x), ref * 2) < 1e-2
    torch.library.opcheck(mlp, (x, w1, w2))


def test_cuda_graph_capture_and_replay_on_new_data(torch, ops):
    from tawa.runtime.kernel import Kernel
    import ptx_kernels as K
    gemm, scale = ops["gemm"], ops["scale"]
    a, b = bf16(torch, 256, 512), bf16(torch, 512, 384)
    x = torch.randn(300, 64, device="cuda")
    # A kernel this process has never loaded: its first launch, and so its module load, happen during capture.
    fresh = K.vadd_kernel()
    fresh.ptx += f"\n// {uuid.uuid4()}\n"
    vadd = Kernel(fresh)
    u, v, w = (torch.randn(4099, device="cuda") for _ in range(3))
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = gemm(a, b)
        scale(x, 3.0)
        y = c.float() * 2
        vadd(u, v, w)
    for _ in range(3):
        a.copy_(bf16(torch, 256, 512))
        b.copy_(bf16(torch, 512, 384))
        x0 = torch.randn(300, 64, device="cuda")
        x.copy_(x0)
        u.copy_(torch.randn(4099, device="cuda"))
        w.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        assert rel_err(c, ref) < 1e-2 and rel_err(y, ref * 2) < 1e-2
        torch.testing.assert_close(x, x0 * 3.0)
        torch.testing.assert_close(w, u + v, rtol=0, atol=0)


def test_compiled_with_cuda_graphs(torch, ops):
    gemm = ops["gemm"]
    w = bf16(torch, 512, 384)
    compiled = torch.compile(lambda x: torch.relu(gemm(x * 0.5, w)), fullgraph=True, mode="reduce-overhead")
    for _ in range(4):                                        # warm-up, recording, then replays on new data
        x = bf16(torch, 256, 512)
        out = compiled(x).clone()
        assert rel_err(out, torch.relu((x * 0.5).float() @ w.float())) < 1e-2


def test_op_runs_on_torch_current_stream(torch, ops):
    gemm = ops["gemm"]
    src, b = bf16(torch, 2048, 2048), bf16(torch, 2048, 512)
    a = torch.zeros_like(src)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)                        # the side stream is busy; the default one idle
        a.copy_(src)
        d = gemm(a, b).float() * 2
    s.synchronize()
    assert rel_err(d, (src.float() @ b.float()) * 2) < 1e-2


def test_op_on_the_second_gpu(torch, ops):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    torch.cuda.set_device(0)
    a, b = bf16(torch, 300, 512, device="cuda:1"), bf16(torch, 512, 256, device="cuda:1")
    c = ops["gemm"](a, b)
    assert c.device == torch.device("cuda:1")
    assert rel_err(c, a.float() @ b.float()) < 1e-2
    compiled = torch.compile(lambda a, b: ops["gemm"](a, b) + 1, fullgraph=True)
    assert rel_err(compiled(a, b), a.float() @ b.float() + 1) < 1e-2
    assert torch.cuda.current_device() == 0


# -- the Llama decoder layer ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llama():
    spec = importlib.util.spec_from_file_location("llama_block", EXAMPLES / "llama_block.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["llama_block"] = module                      # dynamo reads the module's globals by name
    spec.loader.exec_module(module)
    compile_all(dict(module.KERNELS))
    return module


def test_llama_block_matches_the_stock_layer(llama, torch):
    pytest.importorskip("transformers")
    config = llama.make_config(hidden=1024, intermediate=2816, heads=8, kv_heads=2)
    stock = llama.make_stock_layer(config)
    tawa_layer = llama.make_tawa_layer(stock)
    x, rope = llama.make_inputs(config, 2, 300)
    rows = llama.check(stock, tawa_layer, x, rope, {"compiled": torch.compile(tawa_layer, fullgraph=True)})
    for name, stock_err, tawa_err, ok in rows:
        print(f"{name}: stock {stock_err:.2e} tawa {tawa_err:.2e}")
    assert [name for name, *_ in rows] == ["attention", "mlp", "layer", "layer, compiled"]
    assert all(ok for *_, ok in rows), rows


#: A small tuning space for the autotuned operator (compiled into the cache in prefill mode).
TUNED = [{"BLOCK_N": 128}, {"BLOCK_N": 256}]


@pytest.fixture(scope="module")
def tuned_gemm():
    import tawa
    from torch_support import PREFILL
    gemm = str(EXAMPLES / "gemm.tawa")
    if PREFILL:
        outcomes = tawa.autotune.compile_space(gemm, configs=TUNED)
        assert all(o.kernel is not None for o in outcomes), [o.error for o in outcomes]
        pytest.skip("the tuning space is compiled into the cache; the check runs on a GPU")
    return tawa.autotune(gemm, configs=TUNED, show_progress=False)


def test_autotuned_op_tunes_eagerly_and_replays_in_cuda_graphs(tuned_gemm, torch):
    """An operator made from a tuner: capturing a key that was never tuned is refused with a clear error (tuning
    times candidates, which a capture forbids); after one eager call the key's choice is captured and replayed on
    new data, and torch.compile's reduce-overhead mode (which warms up eagerly) works as is."""
    from tawa import torch_ops
    from tawa.torch_ops import TorchOpError
    op = torch_ops.custom_op(op_name("tuned_gemm"), tuned_gemm, outputs=["C"])
    a, b = bf16(torch, 384, 512), bf16(torch, 512, 640)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(TorchOpError, match="inside a CUDA-graph capture"):
        with torch.cuda.graph(graph):
            op(a, b)
    assert not tuned_gemm.choices
    c = op(a, b)                                               # eager: tunes for (384, 640, 512), then launches
    assert rel_err(c, a.float() @ b.float()) < 1e-2 and list(tuned_gemm.choices) == [(384, 640, 512)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = op(a, b)
    for _ in range(2):
        a.copy_(bf16(torch, 384, 512))
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(c, a.float() @ b.float()) < 1e-2
    w = bf16(torch, 512, 256)
    compiled = torch.compile(lambda x: torch.relu(op(x, w)), fullgraph=True, mode="reduce-overhead")
    for _ in range(4):
        x = bf16(torch, 256, 512)
        out = compiled(x).clone()
        assert rel_err(out, torch.relu(x.float() @ w.float())) < 1e-2
