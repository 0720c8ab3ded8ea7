"""Tawa kernels as PyTorch operators (`torch.library` custom ops): one graph under torch.compile, captured by CUDA
graphs.

Why operators: torch.compile cannot trace into a Tawa launch (Python that packs raw pointers and calls the CUDA
driver), so dynamo would break the graph at every launch. A custom operator is opaque to dynamo and inductor,
which need only its schema and a fake implementation giving the outputs' shapes, dtypes and devices from fake
tensors. This module derives both, so one call turns a kernel into an operator. Two forms, as users of
`torch.library.custom_op` and `torch.library.triton_op` know them:

    gemm = tawa.compile("examples/gemm.tawa", BLOCK_M=256)
    matmul = tawa.torch_ops.custom_op("mylib::matmul", gemm, outputs=["C"])      # (Tensor A, Tensor B) -> Tensor
    c = matmul(a, b)

One kernel, one operator: its arguments are the kernel's arguments other than `outputs`, in declaration order;
each output is allocated from its declared dtype and shape, whose symbols the inputs bind (`C: bf16[M, N]` takes
M from A and N from B), written by the launch and returned.

    @tawa.torch_ops.custom_op("mylib::attention", mutates_args=())
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        o = torch.empty_like(q)
        flash(q, k, v, o, scale)                  # any Tawa kernel launches, any torch ops
        return o

A Python function with type annotations, as for `torch.library.custom_op` (or `triton_op` with `wrap_triton`):
it allocates its outputs and launches kernels. Its fake implementation is the same function run on fake tensors
with every Tawa launch skipped (`tawa.runtime.kernel.dry_run`), so it must derive its outputs' shapes from the
inputs' shapes, never from their data.

Launches go to torch's current stream of the arguments' device (the launcher's default), so they are ordered
with the torch work around them and recorded by `torch.cuda.graph` and `torch.compile(mode="reduce-overhead")`;
nothing on the launch path synchronizes, and the first launch's module load may happen during a capture
(`tawa.runtime.driver.relaxed_capture`). The operators have no autograd formula: add one with the returned
operator's `register_autograd`.

torch is imported when an operator is made, never by `import tawa`.
"""
from __future__ import annotations

import functools
import keyword
from typing import Callable, Mapping, Optional, Sequence

from tawa.errors import TawaError
from tawa.runtime.kernel import Kernel, dry_run

__all__ = ["custom_op", "TorchOpError"]

#: Tawa element types and the torch dtypes (by attribute name) that carry them.
TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f8E4M3FN": "float8_e4m3fn",
                "f8E5M2": "float8_e5m2", "i32": "int32", "i1": "bool"}
#: Scalar kernel arguments and their types in an operator schema.
_SCHEMA_SCALARS = {"f32": "float", "i32": "int", "i1": "bool"}


class TorchOpError(TawaError):
    """A Tawa kernel cannot be made into a torch operator as asked."""


def custom_op(name: str, kernel=None, /, *, outputs: Sequence[str] = (), mutates_args=None,
              out_shapes: Optional[Mapping[str, Callable]] = None, grid: Optional[Callable] = None,
              device_types=None):
    """Register a torch operator `name` ("namespace::op") that launches Tawa kernels; return it (a
    `torch.library.CustomOpDef`, callable like `torch.ops.namespace.op`).

    With a `Kernel` (`custom_op(name, kernel, outputs=[...])`), or a `tawa.autotune` tuner in its place (the
    operator then launches the configuration tuned for each call's key; tuning happens on the first eager call
    for a key, never inside a CUDA-graph capture):
      - `outputs`: names of the kernel's tensor arguments that the operator allocates and returns (none: the
        operator returns nothing, and must write through `mutates_args`).
      - `mutates_args`: names of the other tensor arguments that the kernel writes in place (default none). It
        must be exact: torch.compile reorders and reuses memory by it.
      - `out_shapes`: {output name: fn(*inputs) -> shape} for outputs whose declared shape has a symbol no input
        declares.
      - `grid`: fn(*inputs) -> grid, instead of the kernel's `@grid`.
      - `device_types`: where the operator runs: "cuda" for a GPU kernel, "cpu" for an interpreted one
        (`tawa.interpret`, on CPU tensors), the default.
      Inputs whose innermost stride is not 1 are copied to contiguous memory first (mutated ones excepted).

    Without a kernel, a decorator for a function with type annotations (`@custom_op(name, mutates_args=())`);
    `mutates_args` is then required, as in `torch.library.custom_op`, and `device_types` is passed through.
    """
    if kernel is None:
        if mutates_args is None:
            raise TorchOpError(f"custom_op('{name}') as a decorator needs mutates_args: the names of the "
                               "arguments the function writes in place, or () for none")

        def decorate(fn):
            return _function_op(name, fn, mutates_args, device_types)
        return decorate
    if isinstance(kernel, Kernel):
        return _KernelOp(name, kernel, outputs, mutates_args or (), out_shapes or {}, grid,
                         device_types).register()
    tuner = _as_autotuner(kernel)
    if tuner is not None:
        return _KernelOp(name, _signature_kernel(tuner), outputs, mutates_args or (), out_shapes or {}, grid,
                         device_types, tuner=tuner).register()
    if callable(kernel):
        if mutates_args is None:
            raise TorchOpError(f"custom_op('{name}', fn) needs mutates_args: the names of the arguments the "
                               "function writes in place, or () for none")
        return _function_op(name, kernel, mutates_args, device_types)
    raise TorchOpError(f"custom_op('{name}', ...): expected a tawa Kernel (from tawa.compile) or a function, "
                       f"got {type(kernel).__name__}")


def _as_autotuner(obj):
    """`obj` if it is a `tawa.autotune` tuner (imported only when one could be), else None."""
    if type(obj).__name__ != "Autotuner":
        return None
    from tawa.autotune.tuner import Autotuner
    return obj if isinstance(obj, Autotuner) else None


def _signature_kernel(tuner) -> Kernel:
    """A compiled candidate of the tuner, for the operator's schema: every candidate of one source has the same
    arguments (constants and options change the code, not the signature). A kernel-cache hit when the space was
    compiled ahead of time."""
    from tawa.autotune import compiling
    errors = []
    for config in tuner.configs:
        outcome = compiling.compile_one(tuner.source, tuner.filename, config, tuner.target, tuner.info.get(
            "constants"))
        if outcome.kernel is not None:
            return Kernel(outcome.kernel, outcome.from_cache)
        errors.append(outcome.error)
    raise TorchOpError(f"no candidate of the tuner for '{tuner.name}' compiles: {errors[0] if errors else '?'}")


def _torch():
    try:
        import torch
    except ImportError as exc:
        raise TorchOpError(f"tawa.torch_ops needs PyTorch ({exc})") from None
    return torch


def _define(torch, name: str, fn, mutates_args, device_types, schema=None):
    """torch.library.custom_op, with torch's complaints about the name or the annotations as a TorchOpError."""
    if not isinstance(name, str) or name.count("::") != 1:
        raise TorchOpError(f"an operator name is 'namespace::name', got {name!r}")
    try:
        return torch.library.custom_op(name, fn, mutates_args=mutates_args, device_types=device_types,
                                       schema=schema)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise TorchOpError(f"cannot register the torch operator '{name}': {exc}") from None


# -- a function that launches kernels --------------------------------------------------------------------------

def _function_op(name: str, fn, mutates_args, device_types):
    torch = _torch()
    op = _define(torch, name, fn, mutates_args, device_types)

    @functools.wraps(fn)
    def fake(*args, **kwargs):
        # The function itself on fake tensors: its torch allocations give the outputs, its launches are skipped.
        with dry_run():
            return fn(*args, **kwargs)
    op.register_fake(fake)
    return op


# -- one kernel, one operator ---------------------------------------------------------------------------------

class _KernelOp:
    """The operator for one kernel: schema, output allocation, launch; built once, at registration."""

    def __init__(self, name, kernel: Kernel, outputs, mutates_args, out_shapes, grid, device_types, tuner=None):
        self.name, self.kernel, self.tuner = name, kernel, tuner
        params = kernel.compiled.params
        self.params = params
        index = {p["name"]: i for i, p in enumerate(params)}
        tensors = {p["name"] for p in params if p.get("kind") == "tensor"}
        outputs = [outputs] if isinstance(outputs, str) else list(outputs)
        mutated = [mutates_args] if isinstance(mutates_args, str) else list(mutates_args)
        listed = ", ".join(p["name"] for p in params)
        for what, names in (("outputs", outputs), ("mutates_args", mutated)):
            for n in names:
                if n not in index:
                    raise TorchOpError(f"{what} names '{n}', which is not an argument of kernel '{kernel.name}' "
                                       f"({listed})")
                if n not in tensors:
                    raise TorchOpError(f"{what} names '{n}', a scalar argument of kernel '{kernel.name}'; only "
                                       "tensor arguments can be outputs or written in place")
            if len(set(names)) != len(names):
                raise TorchOpError(f"{what} names an argument twice: {names}")
        both = sorted(set(outputs) & set(mutated))
        if both:
            raise TorchOpError(f"'{both[0]}' is in both outputs and mutates_args: an output is allocated by the "
                               "operator, a mutated argument is passed in by the caller")
        unknown = sorted(set(out_shapes) - set(outputs))
        if unknown:
            raise TorchOpError(f"out_shapes names '{unknown[0]}', which is not one of the outputs {outputs}")
        for n in params:
            if not n["name"].isidentifier() or keyword.iskeyword(n["name"]):
                raise TorchOpError(f"kernel argument '{n['name']}' cannot name an operator argument")
        self.outputs = [index[n] for n in outputs]
        self.inputs = [i for i in range(len(params)) if i not in self.outputs]
        self.mutated = {index[n] for n in mutated}
        self.grid = grid
        if device_types is None:
            device_types = "cuda" if kernel.target == "cuda" else "cpu"
        self.device_types = device_types
        self.device_from = next((pos for pos, i in enumerate(self.inputs) if params[i].get("kind") == "tensor"),
                                None)
        if self.outputs and self.device_from is None:
            raise TorchOpError(f"kernel '{kernel.name}' has no tensor input to take the outputs' device from")
        # Where each output extent comes from: a fixed int, or (input position, axis) of the first input that
        # declares the symbol; or the whole shape from out_shapes.
        bound = {}
        for pos, i in enumerate(self.inputs):
            if params[i].get("kind") == "tensor":
                for axis, sym in enumerate(params[i]["shape"]):
                    if isinstance(sym, str):
                        bound.setdefault(sym, (pos, axis))
        self.out_specs = []
        for i in self.outputs:
            p = params[i]
            dtype = TORCH_DTYPES.get(p["dtype"])
            if dtype is None:
                raise TorchOpError(f"output '{p['name']}' has element type {p['dtype']}, which torch has no "
                                   "dtype for")
            if p["name"] in out_shapes:
                self.out_specs.append((out_shapes[p["name"]], dtype))
                continue
            dims = []
            for sym in p["shape"]:
                if isinstance(sym, str):
                    if sym not in bound:
                        raise TorchOpError(
                            f"output '{p['name']}' has the shape symbol '{sym}', which no input of kernel "
                            f"'{kernel.name}' declares",
                            note=f"pass out_shapes={{'{p['name']}': lambda *inputs: shape}}")
                    dims.append(bound[sym])
                else:
                    dims.append(int(sym))
            self.out_specs.append((dims, dtype))
        self.schema = self._schema()

    def _schema(self) -> str:
        args = []
        aliases = {i: n for n, i in enumerate(sorted(self.mutated))}
        for i in self.inputs:
            p = self.params[i]
            if p.get("kind") == "tensor":
                kind = f"Tensor(a{aliases[i]}!)" if i in aliases else "Tensor"
            else:
                kind = _SCHEMA_SCALARS.get(p.get("dtype"))
                if kind is None:
                    raise TorchOpError(f"scalar argument '{p['name']}' of type {p.get('dtype')} has no operator "
                                       "schema type")
            args.append(f"{kind} {p['name']}")
        n = len(self.outputs)
        returns = "()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"
        return f"({', '.join(args)}) -> {returns}"

    def register(self):
        torch = _torch()
        self.torch = torch
        mutated_names = [self.params[i]["name"] for i in sorted(self.mutated)]
        op = _define(torch, self.name, self.run, mutated_names, self.device_types, schema=self.schema)
        op.register_fake(self.fake)
        return op

    def _allocate(self, args):
        torch = self.torch
        device = args[self.device_from].device if self.device_from is not None else None
        outs = []
        for spec, dtype in self.out_specs:
            if callable(spec):
                shape = tuple(spec(*args))
            else:
                shape = tuple(d if isinstance(d, int) else args[d[0]].shape[d[1]] for d in spec)
            outs.append(torch.empty(shape, dtype=getattr(torch, dtype), device=device))
        return outs

    @staticmethod
    def _result(outs):
        return None if not outs else outs[0] if len(outs) == 1 else tuple(outs)

    def fake(self, *args):
        return self._result(self._allocate(args))

    def run(self, *args):
        args = list(args)
        torch = self.torch
        for pos, i in enumerate(self.inputs):
            a = args[pos]
            if i not in self.mutated and isinstance(a, torch.Tensor) and a.dim() and a.shape[-1] > 1 \
                    and a.stride(-1) != 1:
                args[pos] = a.contiguous()          # the launcher needs unit innermost strides
        outs = self._allocate(args)
        full = [None] * len(self.params)
        for pos, i in enumerate(self.inputs):
            full[i] = args[pos]
        for out, i in zip(outs, self.outputs):
            full[i] = out
        launcher = self.kernel if self.tuner is None else self._tuned(full)
        if self.grid is not None:
            launcher[tuple(self.grid(*args))](*full)
        else:
            launcher(*full)
        return self._result(outs)

    def _tuned(self, full):
        """The tuner, after checking that it will not tune inside a CUDA-graph capture: tuning times candidates
        with events and synchronizes, which a capture forbids. A key tuned before (in this process, or stored on
        disk) only looks its choice up."""
        torch = self.torch
        tuner = self.tuner
        key = tuner.key_of(full)
        if key not in tuner.choices and tuner.target == "cuda" and torch.cuda.is_current_stream_capturing():
            shape = ", ".join(f"{k}={v}" for k, v in zip(tuner.key, key))
            raise TorchOpError(
                f"operator '{self.name}' would tune kernel '{tuner.name}' for {shape} inside a CUDA-graph capture",
                note="run the operator once on these shapes before capturing (torch.compile's reduce-overhead "
                     "mode does so in its warm-up runs), or set TAWA_AUTOTUNE=0 to take the first candidate")
        return tuner

