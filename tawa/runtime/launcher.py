"""Launching a compiled kernel on the GPU: argument checks, parameter packing, the driver call.

Takes a `CompiledKernel` of target "cuda" and, per launch, the user's arguments (device arrays from PyTorch,
CuPy, any `__cuda_array_interface__` or DLPack producer; Python or NumPy scalars), an optional grid and stream.
Checks every argument against `tawa.params` before touching the GPU (kind, dtype, rank, fixed extents, one
extent per shape symbol across all arguments, innermost stride 1, and for arguments read through TMA the 16-byte
alignment of the base address and outer strides), evaluates the grid, encodes (or reuses) the tensor maps and
packs the parameters exactly in the order and layout of `CompiledKernel.abi` (docs: tawa/abi.py).
Nothing here needs MLIR, so a kernel loaded from the disk cache launches on a machine without it.
"""
from __future__ import annotations

import ctypes
import hashlib
import struct
import sys
from typing import Any, Optional, Sequence

from tawa import hopper
from tawa.errors import LaunchError
from tawa.abi import AbiParam, CompiledKernel
from tawa.runtime.arrays import ELEMENT_BYTES, ArrayInfo, array_info, dtype_matches
from tawa.runtime import tensor_map as tm

#: Grid limits of compute capability 9.0.
MAX_GRID = (2**31 - 1, 65535, 65535)
#: Bytes of scratch device memory that stand in for an empty tensor a tensor map must still describe.
_SCRATCH_BYTES = 256


# -- parameter layout (pure) -------------------------------------------------------------------------------------

def param_size_align(p: AbiParam) -> tuple:
    """(size, alignment) in bytes of one kernel parameter, as the PTX `.param` declaration has it."""
    if p.kind == "tensormap":
        return (tm.TENSOR_MAP_BYTES, 64) if p.by_value else (8, 8)
    if p.kind in ("ptr", "stride"):
        return 8, 8
    if p.kind == "dim":
        return 4, 4
    if p.kind == "scalar":
        if p.dtype in ("i32", "f32"):
            return 4, 4
        if p.dtype == "i1":
            return 1, 1
        raise LaunchError(f"unsupported scalar parameter type '{p.dtype}' in the kernel ABI")
    raise LaunchError(f"unknown kernel ABI parameter kind '{p.kind}'")


def param_layout(abi: Sequence[AbiParam]) -> tuple:
    """([byte offset of each parameter], total size) of the packed parameter buffer, each entry at its alignment."""
    offsets, end = [], 0
    for p in abi:
        size, align = param_size_align(p)
        end = -(-end // align) * align
        offsets.append(end)
        end += size
    return offsets, end


def param_struct(abi: Sequence[AbiParam]) -> struct.Struct:
    """A `struct.Struct` that packs one value per ABI entry (bytes for by-value tensor maps, ints or floats
    otherwise) at the offsets of `param_layout`, padding included."""
    fmt, end = "<", 0
    for p, off in zip(abi, param_layout(abi)[0]):
        if off > end:
            fmt += f"{off - end}x"
        size = param_size_align(p)[0]
        if p.kind == "tensormap":
            fmt += f"{tm.TENSOR_MAP_BYTES}s" if p.by_value else "Q"
        elif p.kind == "ptr":
            fmt += "Q"
        elif p.kind == "stride":
            fmt += "q"
        elif p.kind == "dim":
            fmt += "i"
        else:
            fmt += {"f32": "f", "i32": "i", "i1": "?"}[p.dtype]
        end = off + size
    return struct.Struct(fmt)


def pack_params(abi: Sequence[AbiParam], values: Sequence[Any]) -> bytes:
    """The packed parameter buffer for one value per ABI entry."""
    return param_struct(abi).pack(*values)


# -- streams ----------------------------------------------------------------------------------------------------

def stream_handle(stream) -> int:
    """A raw CUstream value from an int, a torch / CuPy stream, a `__cuda_stream__` object or a CUstream."""
    if stream is None:
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):            # torch.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):                    # cupy.cuda.Stream
        return int(stream.ptr)
    try:
        return int(stream)                        # cuda.bindings CUstream
    except (TypeError, ValueError):
        raise LaunchError(f"cannot use {type(stream).__name__} as a CUDA stream") from None


def _default_stream(args: Sequence[Any]) -> Optional[int]:
    """The stream the producing library would use: torch's current stream for torch tensors, CuPy's for CuPy
    arrays; None when no argument comes from either (then the legacy default stream)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        for a in args:
            if isinstance(a, torch.Tensor) and a.is_cuda:
                return int(torch.cuda.current_stream(a.device).cuda_stream)
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        for a in args:
            if isinstance(a, cupy.ndarray):
                return int(cupy.cuda.get_current_stream().ptr)
    return None


# -- the launcher ------------------------------------------------------------------------------------------------

class GpuLauncher:
    """Launches one compiled kernel; `launch(args, grid=None, stream=None)`."""

    def __init__(self, kernel: CompiledKernel, tensor_maps: Optional[tm.TensorMapCache] = None):
        if kernel.target != "cuda":
            raise LaunchError(f"kernel '{kernel.name}' was compiled for target '{kernel.target}', not 'cuda'")
        image = kernel.cubin if kernel.cubin else kernel.ptx
        if not image:
            raise LaunchError(f"kernel '{kernel.name}' has neither a cubin nor PTX to load")
        self.kernel = kernel
        self.image = image
        self.image_key = hashlib.sha256(image if isinstance(image, bytes) else image.encode()).hexdigest()
        self.abi = [p if isinstance(p, AbiParam) else AbiParam(**p) for p in kernel.abi]
        self.offsets, self.params_size = param_layout(self.abi)
        self.params = list(kernel.params)
        for p in self.abi:
            if not 0 <= p.arg < len(self.params):
                raise LaunchError(f"kernel '{kernel.name}': ABI entry {p} names argument {p.arg}, but the kernel "
                                  f"has {len(self.params)}")
        self.tensor_maps = tensor_maps or tm.default_cache
        self._tma_args = {p.arg for p in self.abi if p.kind == "tensormap"}
        self._scratch: dict = {}           # context key -> device address of the empty-tensor stand-in
        self.launches = 0                  # launches that reached the driver
        self._plans: dict = {}             # launch signature -> (grid, device, tensor-map keys)
        self._struct = param_struct(self.abi)
        self._pointer_array = ctypes.c_void_p * max(len(self.abi), 1)

    # Checks come first and touch no GPU state, so every argument error is raised before anything is launched. A
    # launch whose arrays (addresses, shapes, strides, types) and scalar types match an earlier one reuses that
    # launch's checked plan (grid, device, tensor-map keys) and goes straight to packing.
    def launch(self, args: Sequence[Any], grid=None, stream=None) -> None:
        args = list(args)
        name = self.kernel.name
        if len(args) != len(self.params):
            names = ", ".join(p["name"] for p in self.params)
            raise LaunchError(f"kernel '{name}' takes {len(self.params)} arguments ({names}), got {len(args)}")
        stream_value = stream_handle(stream) if stream is not None else _default_stream(args)
        infos = self._read_arrays(args, stream_value)
        signature = (tuple(type(a) if i is None else (i.ptr, i.shape, i.strides, i.dtype, i.device)
                           for a, i in zip(args, infos)),
                     grid if grid is None or isinstance(grid, int) else tuple(grid))
        plan = self._plans.get(signature)
        if plan is None:
            bindings = self._bind(args, infos)
            grid3 = self._grid(grid, bindings)
            if 0 in grid3:
                return
            ordinal = self._device(infos)
            plan = (grid3, ordinal, self._plan_tensor_maps(infos, ordinal))
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[signature] = plan
        grid3, ordinal, maps = plan

        from tawa.runtime import driver as drv
        ctx = drv.context_for(ordinal)
        stream_value = stream_value or 0
        fn = drv.load_function(ctx, self.image_key, self.image, name, self.kernel.shared_bytes)
        values = self._values(args, infos, maps, ctx, stream_value)
        # cuLaunchKernel takes one pointer per parameter; they point into the packed buffer, which the driver
        # copies before returning.
        holder = ctypes.create_string_buffer(max(self.params_size, 1))
        self._struct.pack_into(holder, 0, *values)
        base = ctypes.addressof(holder)
        pointers = self._pointer_array(*[base + off for off in self.offsets])
        drv.launch(fn, grid3, (self.kernel.num_threads, 1, 1), self.kernel.shared_bytes, stream_value,
                   ctypes.addressof(pointers))
        self.launches += 1

    __call__ = launch

    # -- argument checks ------------------------------------------------------------------------------------
    def _read_arrays(self, args: list, stream_value: Optional[int]) -> list:
        infos: list = []
        for param, arg in zip(self.params, args):
            info = None
            if param.get("kind") == "tensor":
                info = array_info(arg, param["name"], stream_value)
                if info is not None and info.host:
                    raise LaunchError(
                        f"argument '{param['name']}' is a host (CPU) array; a kernel compiled for the 'cuda' "
                        "target needs GPU memory (a CUDA torch tensor, a CuPy array, ...)",
                        note="compile with target='cpu' to run on NumPy arrays in the interpreter")
            infos.append(info)
        return infos

    def _bind(self, args: list, infos: list) -> dict:
        from tawa.runtime.grid import bind_shapes
        dtypes, shapes, inner = [], [], []
        for param, info in zip(self.params, infos):
            if info is None:
                dtypes.append(None)
                shapes.append(None)
                inner.append(True)
                continue
            # An untyped producer dtype (raw 2-byte elements) stands for whichever declared type it may carry.
            dtypes.append(param["dtype"] if dtype_matches(info.dtype, param.get("dtype")) else info.dtype)
            shapes.append(info.shape)
            inner.append(not info.shape or info.shape[-1] <= 1 or info.strides[-1] == 1)
        bindings = bind_shapes(self.params, args, dtypes, shapes, inner)
        for i, (param, info) in enumerate(zip(self.params, infos)):
            if info is None:
                continue
            where = f"argument '{param['name']}'"
            if any(s < 0 for s in info.strides):
                raise LaunchError(f"{where} has negative strides {info.strides}")
            if i in self._tma_args and 0 not in info.shape:
                # The tensor-map rules that depend on the argument, checked now rather than at encoding.
                esize = ELEMENT_BYTES[param["dtype"]]
                if info.ptr % hopper.TMA_ALIGN_BYTES:
                    raise LaunchError(f"{where}: its data address 0x{info.ptr:x} is not 16-byte aligned, as the "
                                      "kernel's TMA copies need",
                                      note="slice so that the start stays 16-byte aligned, or pass a copy")
                for axis in range(len(info.shape) - 1):
                    if info.shape[axis] > 1 and (info.strides[axis] * esize) % hopper.TMA_ALIGN_BYTES:
                        raise LaunchError(
                            f"{where}: stride of dimension {axis} is {info.strides[axis]} elements "
                            f"({info.strides[axis] * esize} bytes); the kernel's TMA copies need a multiple of "
                            "16 bytes", note="pad rows to a multiple of 16 bytes, or pass a contiguous copy "
                                             "of a padded tensor")
        for p in self.abi:
            if p.kind == "dim":
                extent = infos[p.arg].shape[p.axis]
                if extent >= 2**31:
                    raise LaunchError(f"argument '{self.params[p.arg]['name']}': dimension {p.axis} has "
                                      f"{extent} elements, more than a 32-bit index can address")
        return bindings

    def _grid(self, grid, bindings: dict) -> tuple:
        if grid is None:
            if not self.kernel.grid:
                raise LaunchError(f"kernel '{self.kernel.name}' declares no grid: launch it as kernel[grid](...)")
            from tawa.runtime.grid import eval_grid
            grid = eval_grid(self.kernel.grid, bindings, self.kernel.constants)
        elif isinstance(grid, int):
            grid = (grid,)
        grid = tuple(grid)
        if not 1 <= len(grid) <= 3 or not all(isinstance(g, int) and not isinstance(g, bool) for g in grid):
            raise LaunchError(f"a launch grid is 1 to 3 integers, got {grid!r}")
        grid = grid + (1,) * (3 - len(grid))
        for axis, (g, limit) in enumerate(zip(grid, MAX_GRID)):
            if g < 0 or g > limit:
                raise LaunchError(f"grid extent {g} along axis {axis} is outside 0..{limit}")
        return grid

    def _device(self, infos: list) -> int:
        ordinal, first = None, None
        for param, info in zip(self.params, infos):
            if info is None or info.device is None:
                continue
            if ordinal is None:
                ordinal, first = info.device, param["name"]
            elif info.device != ordinal:
                raise LaunchError(f"argument '{param['name']}' is on GPU {info.device} but '{first}' is on GPU "
                                  f"{ordinal}; all arguments must be on one device")
        if ordinal is None:
            # Producers without a device field (the CUDA array interface): the device whose context is current,
            # as CuPy leaves it.
            from tawa.runtime import driver as drv
            ordinal = drv.current_context_device()
            if ordinal is None:
                ordinal = drv.default_device()
        return ordinal

    # -- tensor maps ----------------------------------------------------------------------------------------
    @staticmethod
    def _map_geometry(info: ArrayInfo) -> tuple:
        if 0 in info.shape:
            # TMA cannot describe an empty tensor; describe a zeroed scratch element instead: every read is then
            # 0 (in bounds, the scratch) or out of bounds (filled with 0), which is what an empty tensor reads.
            return None, (1,) * len(info.shape), (1,) * len(info.shape)
        return info.ptr, tuple(info.shape), tuple(info.strides)

    def _plan_tensor_maps(self, infos: list, ordinal) -> dict:
        """Validate every tensor map not yet encoded, before the GPU is used; gives {abi index: pending args}."""
        plan = {}
        for i, p in enumerate(self.abi):
            if p.kind != "tensormap":
                continue
            info, param = infos[p.arg], self.params[p.arg]
            ptr, shape, strides = self._map_geometry(info)
            if ptr is None:
                plan[i] = "scratch"
                tm.tensor_map_args(param["dtype"], 0, shape, strides, p.box, p.swizzle, param["name"])
                continue
            key = (ordinal, param["dtype"], ptr, shape, strides, tuple(p.box), p.swizzle)
            if not self.tensor_maps.contains(key):
                tm.tensor_map_args(param["dtype"], ptr, shape, strides, p.box, p.swizzle, param["name"])
            plan[i] = key
        return plan

    def _values(self, args: list, infos: list, maps: dict, ctx, stream_value: int) -> list:
        values = []
        scratch_used = False
        for i, p in enumerate(self.abi):
            info = infos[p.arg]
            if p.kind == "tensormap":
                key = maps[i]
                param = self.params[p.arg]
                if key == "scratch":
                    scratch_used = True
                    rank = len(info.shape)
                    key = (ctx.ordinal, param["dtype"], self._scratch_for(ctx), (1,) * rank, (1,) * rank,
                           tuple(p.box), p.swizzle)
                values.append(self.tensor_maps.get(*key, by_value=p.by_value, name=param["name"]))
            elif p.kind == "ptr":
                values.append(info.ptr)
            elif p.kind == "dim":
                values.append(int(info.shape[p.axis]))
            elif p.kind == "stride":
                values.append(int(info.strides[p.axis]))
            elif p.dtype == "f32":
                values.append(float(args[p.arg]))
            else:
                value = int(args[p.arg])
                if p.dtype == "i32" and not -2**31 <= value < 2**31:
                    raise LaunchError(f"argument '{self.params[p.arg]['name']}': {value} does not fit in i32")
                values.append(bool(value) if p.dtype == "i1" else value)
        if scratch_used:
            from tawa.runtime import driver as drv
            drv.memset_async(self._scratch[ctx.key], _SCRATCH_BYTES, stream_value)
        return values

    def _scratch_for(self, ctx) -> int:
        if ctx.key not in self._scratch:
            from tawa.runtime import driver as drv
            self._scratch[ctx.key] = drv.mem_alloc(_SCRATCH_BYTES)
        return self._scratch[ctx.key]
