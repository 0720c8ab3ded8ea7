"""tawa.torch_ops on the CPU: operators made from kernels compiled for the interpreter, run on CPU tensors. The
schema, output allocation, in-place arguments, the fake implementations (torch.library.opcheck), torch.compile
with fullgraph=True (aot_eager: the fake kernels and functionalization, no C++ compiler needed) and the errors.
Needs torch and the compiler (MLIR); the same operators on the GPU are in test_torch_gpu.py."""
from __future__ import annotations

import pytest

import tawa
from tawa.errors import LaunchError, TawaError
from tawa.runtime.kernel import Kernel, dry_run

from torch_support import EXAMPLES, FREE_SYMBOL, SCALE_INPLACE, TWO_OUTPUTS, op_name

torch = pytest.importorskip("torch")
torch_ops = pytest.importorskip("tawa.torch_ops")
pytest.importorskip("mlir", reason="the interpreter runs the kernels' tile IR, which needs the MLIR bindings")

GEMM = str(EXAMPLES / "gemm.tawa")


@pytest.fixture(scope="module")
def gemm_f32():
    return tawa.interpret(GEMM, DTYPE="f32", BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)


def compiled_without_breaks(fn, *args, **compile_kw):
    """fn compiled with fullgraph=True (a graph break is an error), called on args; also asserts that dynamo
    recorded no graph break."""
    from torch._dynamo.utils import counters
    counters.clear()
    out = torch.compile(fn, fullgraph=True, backend="aot_eager", **compile_kw)(*args)
    assert not counters["graph_break"]
    return out


def test_kernel_op_schema_and_result(gemm_f32):
    op = torch_ops.custom_op(op_name("gemm"), gemm_f32, outputs=["C"])
    assert str(op._opoverload._schema).endswith("(Tensor A, Tensor B) -> Tensor")
    a, b = torch.randn(40, 24), torch.randn(24, 20)
    c = op(a, b)
    assert c.shape == (40, 20) and c.dtype == torch.float32
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    torch.library.opcheck(op, (a, b))


def test_kernel_op_bf16_and_strided_inputs():
    gemm = tawa.interpret(GEMM, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    op = torch_ops.custom_op(op_name("gemm_bf16"), gemm, outputs="C")
    a = torch.randn(33, 24).bfloat16()
    b = torch.randn(20, 24).bfloat16().t()            # innermost stride 20: copied to contiguous first
    c = op(a, b)
    assert c.dtype == torch.bfloat16
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=5e-2)


def test_kernel_op_that_writes_in_place():
    op = torch_ops.custom_op(op_name("scale"), tawa.interpret(SCALE_INPLACE), mutates_args=["X"])
    assert str(op._opoverload._schema).endswith("(Tensor(a0!) X, float alpha) -> ()")
    x = torch.randn(100, 50)
    expected = x * 3.0
    assert op(x, 3.0) is None
    torch.testing.assert_close(x, expected)
    torch.library.opcheck(op, (torch.randn(10, 7), 0.5))

    def f(x):
        y = x + 1
        op(y, 2.0)
        return y * 10
    x = torch.randn(70, 30)
    torch.testing.assert_close(compiled_without_breaks(f, x), (x + 1) * 20)


def test_kernel_op_with_two_outputs_and_a_grid():
    kernel = tawa.interpret(TWO_OUTPUTS)
    grids = []

    def grid(x, alpha):
        grids.append(x.shape)
        return (x.shape[0] + 63) // 64,
    op = torch_ops.custom_op(op_name("two"), kernel, outputs=["Y", "Z"], grid=grid)
    assert str(op._opoverload._schema).endswith("(Tensor X, float alpha) -> (Tensor, Tensor)")
    x = torch.randn(130, 40)
    y, z = op(x, 1.5)
    torch.testing.assert_close(y, x * 1.5)
    torch.testing.assert_close(z, x + 1.5)
    assert grids == [(130, 40)]


def test_output_shape_symbols_no_input_declares():
    kernel = tawa.interpret(FREE_SYMBOL)
    with pytest.raises(torch_ops.TorchOpError, match=r"output 'Y' has the shape symbol 'P', which no input") as err:
        torch_ops.custom_op(op_name("free"), kernel, outputs=["Y"])
    assert "out_shapes" in err.value.note
    op = torch_ops.custom_op(op_name("free"), kernel, outputs=["Y"], out_shapes={"Y": lambda x: (x.shape[0], 64)})
    x = torch.randn(70, 64)
    y = op(x)
    torch.testing.assert_close(y, x.sum(1, keepdim=True).expand(70, 64), rtol=1e-5, atol=1e-4)
    torch.library.opcheck(op, (x,))


def test_function_op_fake_runs_the_function_without_launching(gemm_f32, monkeypatch):
    launched = []
    real = Kernel._launch_cpu
    monkeypatch.setattr(Kernel, "_launch_cpu", lambda self, *a: launched.append(self.name) or real(self, *a))

    @torch_ops.custom_op(op_name("mlp"), mutates_args=())
    def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        h = x.new_empty(x.shape[0], w1.shape[1])
        gemm_f32(x, w1, h)
        h = torch.relu(h)
        y = x.new_empty(x.shape[0], w2.shape[1])
        gemm_f32(h, w2, y)
        return y
    x, w1, w2 = torch.randn(40, 24), torch.randn(24, 32), torch.randn(32, 8)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fake = mlp(mode.from_tensor(x), mode.from_tensor(w1), mode.from_tensor(w2))
    assert fake.shape == (40, 8) and launched == []
    torch.testing.assert_close(mlp(x, w1, w2), torch.relu(x @ w1) @ w2, rtol=1e-5, atol=1e-4)
    assert launched == ["gemm", "gemm"]
    torch.library.opcheck(mlp, (x, w1, w2))


def test_compiled_model_has_no_graph_break_and_follows_shapes(gemm_f32):
    op = torch_ops.custom_op(op_name("gemm"), gemm_f32, outputs=["C"])
    w = torch.randn(24, 20)

    def model(x):
        return torch.nn.functional.gelu(op(x * 2, w)) + 1
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (40, 17, 64):
        x = torch.randn(m, 24)
        torch.testing.assert_close(compiled(x), torch.nn.functional.gelu((x * 2) @ w) + 1, rtol=1e-4, atol=1e-4)
    compiled_without_breaks(model, torch.randn(5, 24))


def test_interpreter_reads_torch_cpu_tensors(gemm_f32):
    a, b, c = torch.randn(20, 24), torch.randn(24, 18), torch.zeros(20, 18)
    gemm_f32(a, b, c)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_dry_run_checks_the_argument_count_only(gemm_f32):
    with dry_run():
        assert gemm_f32(object(), object(), object()) is None      # nothing is read
        with pytest.raises(LaunchError, match=r"takes 3 arguments \(A, B, C\), got 2"):
            gemm_f32(object(), object())
    with pytest.raises(LaunchError):
        gemm_f32(object(), object(), object())                       # outside it, arguments are checked


@pytest.mark.parametrize("kwargs, message", [
    (dict(outputs=["D"]), r"outputs names 'D', which is not an argument of kernel 'gemm' \(A, B, C\)"),
    (dict(outputs=["C"], mutates_args=["C"]), r"'C' is in both outputs and mutates_args"),
    (dict(outputs=["C", "C"]), r"outputs names an argument twice"),
    (dict(outputs=["C"], out_shapes={"A": len}), r"out_shapes names 'A', which is not one of the outputs"),
])
def test_kernel_op_errors(gemm_f32, kwargs, message):
    with pytest.raises(torch_ops.TorchOpError, match=message):
        torch_ops.custom_op(op_name("bad"), gemm_f32, **kwargs)


def test_registration_errors(gemm_f32):
    scale = tawa.interpret(SCALE_INPLACE)
    with pytest.raises(torch_ops.TorchOpError, match=r"mutates_args names 'alpha', a scalar argument"):
        torch_ops.custom_op(op_name("bad"), scale, mutates_args=["alpha"])
    with pytest.raises(torch_ops.TorchOpError, match=r"an operator name is 'namespace::name'"):
        torch_ops.custom_op("no_namespace", gemm_f32, outputs=["C"])
    with pytest.raises(torch_ops.TorchOpError, match=r"as a decorator needs mutates_args"):
        torch_ops.custom_op(op_name("bad"))
    with pytest.raises(torch_ops.TorchOpError, match=r"expected a tawa Kernel \(from tawa.compile\) or a function"):
        torch_ops.custom_op(op_name("bad"), "examples/gemm.tawa")
    with pytest.raises(torch_ops.TorchOpError, match=r"cannot register the torch operator 'tawa_test::1x'"):
        torch_ops.custom_op("tawa_test::1x", gemm_f32, outputs=["C"])
    assert issubclass(torch_ops.TorchOpError, TawaError)


def test_interpreted_kernel_refuses_gpu_tensors(gemm_f32, monkeypatch):
    from tawa.runtime.kernel import _numpy_view

    class OnGpu(torch.Tensor):
        device = torch.device("cuda", 0)
    t = torch.zeros(2).as_subclass(OnGpu)
    with pytest.raises(LaunchError, match=r"argument 'A' is on cuda:0; a kernel compiled for the CPU interpreter"):
        _numpy_view(t, "A")


def test_autotuned_op_launches_the_tuned_configuration(tmp_path, monkeypatch):
    """An operator made from a `tawa.autotune` tuner: the schema comes from a candidate, the first call for a
    key tunes (here with the interpreter and wall-clock timing), later calls and torch.compile use the choice."""
    monkeypatch.setenv("TAWA_CACHE_DIR", str(tmp_path))
    tuner = tawa.autotune(GEMM, configs=[{"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
                                         {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}],
                          target="cpu", DTYPE="f32", show_progress=False)
    op = torch_ops.custom_op(op_name("tuned_gemm"), tuner, outputs=["C"])
    assert str(op._opoverload._schema).endswith("(Tensor A, Tensor B) -> Tensor")
    a, b = torch.randn(40, 24), torch.randn(24, 20)
    assert not tuner.choices
    c = op(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    assert list(tuner.choices) == [(40, 20, 24)]          # tuned once, for the key (M, N, K) of the call
    out = compiled_without_breaks(lambda x, y: op(x, y) * 2, a, b)
    torch.testing.assert_close(out, (a @ b) * 2, rtol=1e-5, atol=1e-5)
    assert list(tuner.choices) == [(40, 20, 24)]
    torch.library.opcheck(op, (a, b))
