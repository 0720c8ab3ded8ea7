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
import math
import hashlib
import struct
import sys
import threading
from typing import Any, Optional, Sequence

from tawa import hopper
from tawa.errors import DriverError, LaunchError, PositiveScaleError, TmaAlignmentError
from tawa.abi import POSITIVE_ARG_RANGE, TILE_COUNTER_BYTES, AbiParam, CompiledKernel
from tawa.runtime.arrays import ELEMENT_BYTES, ArrayInfo, array_info, dtype_matches
from tawa.runtime import driver as drv
from tawa.runtime import tensor_map as tm
from tawa.runtime.grid import F32_MAX, check_f32, check_requires, check_written, persistent_launch

#: Grid limits of compute capability 9.0.
MAX_GRID = (2**31 - 1, 65535, 65535)
#: Bytes of scratch device memory that stand in for an empty tensor a tensor map must still describe.
_SCRATCH_BYTES = 256


# -- parameter layout (pure) -------------------------------------------------------------------------------------

def param_size_align(p: AbiParam) -> tuple:
    """(size, alignment) in bytes of one kernel parameter, as the PTX `.param` declaration has it."""
    if p.kind == "tensormap":
        return (tm.TENSOR_MAP_BYTES, 64) if p.by_value else (8, 8)
    if p.kind in ("ptr", "stride", "workspace"):
        return 8, 8
    if p.kind in ("dim", "grid"):
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
        elif p.kind in ("ptr", "workspace"):
            fmt += "Q"
        elif p.kind == "stride":
            fmt += "q"
        elif p.kind in ("dim", "grid"):
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
    import numbers
    if isinstance(stream, bool) or type(stream).__name__ in ("bool_", "bool") or \
            (isinstance(stream, numbers.Real) and not isinstance(stream, numbers.Integral)):
        raise LaunchError(f"cannot use the {type(stream).__name__} {stream} as a CUDA stream: give a stream "
                          f"object (torch.cuda.Stream, a CuPy stream) or its handle as an int")
    if isinstance(stream, numbers.Integral):
        return _handle_in_range(int(stream))
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):            # torch.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):                    # cupy.cuda.Stream
        return int(stream.ptr)
    try:
        value = int(stream)                       # cuda.bindings CUstream
    except (TypeError, ValueError):
        raise LaunchError(f"cannot use {type(stream).__name__} as a CUDA stream") from None
    return _handle_in_range(value)


def _handle_in_range(value: int) -> int:
    if not 0 <= value < 1 << 64:
        raise LaunchError(f"stream handle {value} is not a CUDA stream: a handle is an unsigned 64-bit value")
    return value


_raw_stream = [None, None]      # [the torch module, its torch._C._cuda_getCurrentRawStream or None]


def _torch_stream(torch, device: int) -> int:
    """torch's current stream on `device` as a raw CUstream value, without building a torch.cuda.Stream."""
    if _raw_stream[0] is not torch:
        _raw_stream[:] = [torch, getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)]
    raw = _raw_stream[1]
    if raw is not None:
        return raw(device)
    return int(torch.cuda.current_stream(device).cuda_stream)


def _cupy_stream(args: Sequence[Any]) -> Optional[int]:
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        for a in args:
            if isinstance(a, cupy.ndarray):
                return int(cupy.cuda.get_current_stream().ptr)
    return None


class _NotATensor:
    """Stands in for torch.Tensor in isinstance checks while torch is not imported."""


# -- launch plans -----------------------------------------------------------------------------------------------

class _Plan:
    """Everything a launch derives from its argument signature (per array: type, dtype, shape, strides,
    device; per scalar: Python type; and the grid asked for), computed and checked once by the full path.
    A launch with the same signature only supplies data addresses and scalar values."""
    __slots__ = ("grid", "ordinal", "template", "ptr_slots", "scalar_slots", "map_slots", "tma_checks",
                 "workspace", "cluster")

    def __init__(self, grid, ordinal, template, ptr_slots, scalar_slots, map_slots, tma_checks, workspace=None,
                 cluster=1):
        self.grid = grid                    # (x, y, z); None when the grid is empty (nothing to launch)
        self.ordinal = ordinal              # device ordinal; None: the current context's, read per launch
        self.template = template            # parameter values, with dims and strides filled in
        self.ptr_slots = ptr_slots          # [(ABI index, argument index)]
        self.scalar_slots = scalar_slots    # [(ABI index, argument index, dtype, how errors name it)]
        self.map_slots = map_slots          # [(ABI index, argument index, Geometry, by_value, name)]; the
                                            #   rank instead of a Geometry for an empty tensor (the scratch)
        self.tma_checks = tma_checks        # [(argument index, name)]: pointers TMA reads, 16-byte aligned
        self.workspace = workspace          # (ABI index, bytes) of a split-K or stream-K kernel's workspace, else None
        self.cluster = cluster              # CTAs per thread-block cluster (1: a launch without clusters)


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
            if p.kind == "grid":          # the grid a persistent kernel was written for: no user argument
                if self.kernel.persistent and p.axis in (0, 1, 2):
                    continue
                raise LaunchError(f"kernel '{kernel.name}': ABI entry {p} needs a persistent kernel and an axis "
                                  f"0, 1 or 2")
            if p.kind == "workspace":     # split-K partials: the launcher's own memory, no user argument
                if (kernel.split_k > 1 or (kernel.stream_k and kernel.persistent)) and kernel.workspace_per_tile > 0:
                    continue
                if kernel.dynamic_tiles and kernel.persistent:
                    continue
                raise LaunchError(f"kernel '{kernel.name}': ABI entry {p} needs a split-K or stream-K kernel with a "
                                  f"workspace size, or a persistent kernel with dynamic tiles")
            if not 0 <= p.arg < len(self.params):
                raise LaunchError(f"kernel '{kernel.name}': ABI entry {p} names argument {p.arg}, but the kernel "
                                  f"has {len(self.params)}")
        self.tensor_maps = tensor_maps or tm.default_cache
        self._tma_args = {p.arg for p in self.abi if p.kind == "tensormap"}
        self._is_array = [p.get("kind") == "tensor" for p in self.params]
        self._names = [p["name"] for p in self.params]
        self._scratch: dict = {}           # context key -> device address of the empty-tensor stand-in
        self._workspaces: dict = {}        # (context key, stream) -> (device address, bytes) of split-K partials
        self._retired: list = []           # outgrown workspaces: a launch still queued may use one
        self.launches = 0                  # launches that reached the driver
        self._plans: dict = {}             # launch signature -> _Plan
        self._struct = param_struct(self.abi)
        self._pointer_array = ctypes.c_void_p * max(len(self.abi), 1)
        self._buffers: dict = {}           # thread id -> (packed-parameter buffer, address of its pointer array)
        self._functions: dict = {}         # context key -> loaded function (one module per device)
        self._resident_clusters: dict = {}  # (context key, CTAs per cluster) -> clusters resident at once
        self._streams: set = set()         # (stream, context key) pairs checked to belong together
        self._block = (kernel.num_threads, 1, 1)
        #: (argument index, name) of the scalars the code assumes positive, checked at every launch
        self._positive = [(i, self._names[i]) for i in kernel.positive_params]

    # Checks come first and touch no GPU state, so every argument error is raised before anything is launched. A
    # launch whose argument signature (array types, dtypes, shapes, strides, devices; scalar types; the grid)
    # matches an earlier one reuses that launch's checked plan and only reads what changes: data addresses (the
    # 16-byte alignment of those TMA reads is checked again) and scalar values (range-checked again).
    def launch(self, args: Sequence[Any], grid=None, stream=None) -> None:
        nparams = len(self.params)
        if len(args) != nparams:
            names = ", ".join(self._names)
            raise LaunchError(f"kernel '{self.kernel.name}' takes {nparams} arguments ({names}), got {len(args)}")
        signature, ptrs, stream_value = self.read_arguments(args, grid, stream)
        plan = self._plans.get(signature) if signature is not None else None
        if plan is None:
            plan = self._make_plan(args, grid, stream_value)
            if signature is not None:
                if len(self._plans) >= 256:
                    self._plans.clear()
                self._plans[signature] = plan
        self._launch_plan(plan, args, ptrs, stream_value or 0, stream is not None)

    __call__ = launch

    def launch_planned(self, signature, args: Sequence[Any], ptrs: list, stream_value) -> bool:
        """Launch on the default stream with the plan of an earlier launch of this `signature` (from
        `read_arguments` of a launcher of the same parameters: a `Kernel` reads its arguments once for itself and
        its shape variants); False, launching nothing, where there is no such plan."""
        plan = self._plans.get(signature)
        if plan is None:
            return False
        self._launch_plan(plan, args, ptrs, stream_value or 0)
        return True

    def read_arguments(self, args: Sequence[Any], grid=None, stream=None) -> tuple:
        """(signature, data addresses, stream value) of a launch: the signature (per array its type, dtype, shape,
        strides and device; per scalar its type; the grid asked for) keys the checked plan, and the stream value
        (None: the legacy default stream) is torch's or CuPy's current stream on the arrays' device where none is
        given. The signature is None where the arguments are not one per parameter or the grid is unhashable."""
        if len(args) != len(self.params):
            return None, None, None
        torch = sys.modules.get("torch")
        tensor_type = torch.Tensor if torch is not None else _NotATensor
        stream_value = stream_handle(stream) if stream is not None else None
        keys, ptrs, torch_device, generic = [], [], None, None
        is_array = self._is_array
        for i, a in enumerate(args):
            if not is_array[i]:
                keys.append(type(a))
                ptrs.append(0)
            elif isinstance(a, tensor_type):
                dev = a.get_device() if a.is_cuda else -1
                ptr = a.data_ptr() if dev >= 0 else 0
                keys.append((a.dtype, a.shape, a.stride(), dev))
                ptrs.append(ptr)
                if torch_device is None and dev >= 0:
                    torch_device = dev
            else:
                key, ptr = _cai_key(a)
                if key is None:                       # DLPack or not an array: read after the stream is known
                    generic = generic or []
                    generic.append(i)
                keys.append(key)
                ptrs.append(ptr)
        if stream is None:
            stream_value = _torch_stream(torch, torch_device) if torch_device is not None else _cupy_stream(args)
        if generic is not None:
            for i in generic:
                info = array_info(args[i], self._names[i], stream_value)
                if info is None:
                    keys[i] = type(args[i])
                else:
                    keys[i] = ("info", info.shape, info.strides, info.dtype, info.device, info.host)
                    ptrs[i] = info.ptr
        if grid is None or isinstance(grid, int):
            return (tuple(keys), grid), ptrs, stream_value
        signature = (tuple(keys), tuple(grid))
        try:
            hash(signature)
        except TypeError:                             # an unhashable grid: the full path says what is wrong
            signature = None
        return signature, ptrs, stream_value

    def _launch_plan(self, plan: _Plan, args, ptrs: list, stream_value: int, explicit_stream: bool = False) -> None:
        for i, name in plan.tma_checks:
            if ptrs[i] % hopper.TMA_ALIGN_BYTES:
                raise _misaligned(name, ptrs[i])
        values = plan.template.copy() if plan.template is not None else [None] * len(self.abi)
        for j, i in plan.ptr_slots:
            values[j] = ptrs[i]
        for j, i, dtype, where in plan.scalar_slots:
            values[j] = _scalar_value(args[i], dtype, where)
        for i, name in self._positive:
            if not POSITIVE_ARG_RANGE[0] <= float(args[i]) <= POSITIVE_ARG_RANGE[1]:     # (NaN fails too)
                raise _not_positive(self.kernel.name, name, args[i])
        if plan.grid is None:                         # an empty grid: checked, nothing to launch
            return
        ordinal = plan.ordinal
        if ordinal is None:
            ordinal = drv.current_context_device()
            if ordinal is None:
                ordinal = drv.default_device()
        # The device's context is current for this launch only (module load, tensor maps, the launch itself);
        # the caller's current device, which torch allocates on, is left as it was.
        ctx, previous = drv.enter_context(ordinal)
        try:
            if explicit_stream and stream_value > 2 and (stream_value, ctx.key) not in self._streams:
                self._check_stream(stream_value, ctx, args)
            fn = self._functions.get(ctx.key)
            if fn is None:
                fn = self._functions[ctx.key] = drv.load_function(ctx, self.image_key, self.image,
                                                                  self.kernel.name, self.kernel.shared_bytes)
            if plan.workspace is not None:
                j, nbytes = plan.workspace
                values[j] = self._workspace_for(ctx, stream_value, nbytes)
            if plan.map_slots:
                lookup = self.tensor_maps.lookup
                for j, i, geom, by_value, name in plan.map_slots:
                    if isinstance(geom, int):             # an empty tensor: the zeroed scratch element
                        geom, scratch = self._scratch_geometry(j, geom), self._scratch_for(ctx)
                        drv.memset_async(scratch, _SCRATCH_BYTES, stream_value)
                        values[j] = lookup(geom, ctx.ordinal, scratch, by_value, name)
                    else:
                        values[j] = lookup(geom, ordinal, ptrs[i], by_value, name)
            # cuLaunchKernel takes one pointer per parameter; they point into the packed buffer, which the driver
            # copies before returning, so one buffer per thread is refilled on every launch.
            buffers = self._buffers.get(threading.get_ident())
            if buffers is None:
                buffers = self._new_buffers()
            self._struct.pack_into(buffers[0], 0, *values)
            grid = plan.grid
            if plan.cluster > 1:
                # As many clusters as can be resident at once (the GPCs may hold fewer pairs than SMs / 2).
                key = (ctx.key, plan.cluster)
                most = self._resident_clusters.get(key)
                if most is None:
                    most = self._resident_clusters[key] = drv.max_active_clusters(
                        fn, grid, self._block, self.kernel.shared_bytes, plan.cluster)
                grid = (min(grid[0], max(most, 1) * plan.cluster), 1, 1)
            drv.launch(fn, grid, self._block, self.kernel.shared_bytes, stream_value, buffers[1], plan.cluster)
            self.launches += 1
        finally:
            if previous is not None:
                drv.restore_context(previous)

    def _check_stream(self, stream_value: int, ctx, args) -> None:
        """A stream passed by the caller must belong to the device the arguments are on: the driver would reject
        the launch with an unspecific error, or, for a stream of another context, not order it as asked. The
        special handles 0, 1 and 2 (default, legacy, per-thread) always name the current context's stream and are
        not checked; a checked (stream, context) pair is remembered."""
        try:
            owner = drv.stream_context(stream_value)
        except DriverError as error:
            raise LaunchError(f"kernel '{self.kernel.name}': 0x{stream_value:x} is not a CUDA stream the driver "
                              f"knows ({error.message})") from None
        if owner != ctx.key:
            where = drv.context_device(owner)
            arrays = [self._names[i] for i, a in enumerate(args) if self._is_array[i]]
            named = ", ".join(f"'{n}'" for n in arrays) or "the launch"
            owner_text = f"GPU {where}" if where is not None else "another CUDA context"
            raise LaunchError(f"kernel '{self.kernel.name}': the stream 0x{stream_value:x} belongs to {owner_text}, "
                              f"but the arguments ({named}) are on GPU {ctx.ordinal}",
                              note=f"pass a stream of GPU {ctx.ordinal} (torch.cuda.Stream(device={ctx.ordinal})), "
                                   "or none to use torch's current stream of that device")
        if len(self._streams) >= 256:
            self._streams.clear()
        self._streams.add((stream_value, ctx.key))

    def _new_buffers(self) -> tuple:
        holder = ctypes.create_string_buffer(max(self.params_size, 1))
        base = ctypes.addressof(holder)
        pointers = self._pointer_array(*[base + off for off in self.offsets])
        if len(self._buffers) >= 64:
            self._buffers.clear()
        buffers = (holder, ctypes.addressof(pointers), pointers)
        self._buffers[threading.get_ident()] = buffers
        return buffers

    def _scalar_where(self, p: AbiParam) -> str:
        return f"argument '{self._names[p.arg]}' (declared {self.params[p.arg].get('dtype')})"

    def _scratch_geometry(self, j: int, rank: int) -> tm.Geometry:
        p = self.abi[j]
        return self.tensor_maps.geometry(self.params[p.arg]["dtype"], (1,) * rank, (1,) * rank, tuple(p.box),
                                         p.swizzle)

    # -- the full path: every check, once per signature ----------------------------------------------------
    def _make_plan(self, args, grid, stream_value) -> _Plan:
        args = list(args)
        infos = self._read_arrays(args, stream_value)
        bindings = self._bind(args, infos)
        grid3 = self._grid(grid, bindings)
        tma_checks = [(i, self._names[i]) for i in sorted(self._tma_args) if 0 not in infos[i].shape]
        if 0 in grid3:
            scalars = [(j, p.arg, p.dtype, self._scalar_where(p)) for j, p in enumerate(self.abi)
                       if p.kind == "scalar"]
            for j, i, dtype, where in scalars:
                _scalar_value(args[i], dtype, where)
            return _Plan(None, None, None, (), scalars, (), tma_checks)
        ordinal, known = self._device(infos)
        self._check_tensor_maps(infos, ordinal)
        template = [None] * len(self.abi)
        ptr_slots, scalar_slots, map_slots = [], [], []
        workspace = None
        grid3 = self._split_grid(grid3)
        for j, p in enumerate(self.abi):
            if p.kind == "grid":
                template[j] = grid3[p.axis]
                continue
            if p.kind == "workspace":
                workspace = j
                continue
            info, name = infos[p.arg], self._names[p.arg]
            if p.kind == "tensormap":
                if 0 in info.shape:
                    map_slots.append((j, p.arg, len(info.shape), p.by_value, name))
                else:
                    geom = self.tensor_maps.geometry(self.params[p.arg]["dtype"], tuple(info.shape),
                                                     tuple(info.strides), tuple(p.box), p.swizzle)
                    map_slots.append((j, p.arg, geom, p.by_value, name))
            elif p.kind == "ptr":
                ptr_slots.append((j, p.arg))
            elif p.kind == "dim":
                template[j] = int(info.shape[p.axis])
            elif p.kind == "stride":
                template[j] = int(info.strides[p.axis])
            else:
                scalar_slots.append((j, p.arg, p.dtype, self._scalar_where(p)))
                _scalar_value(args[p.arg], p.dtype, scalar_slots[-1][3])
        # split-K: one workspace record per output tile (the programs of the grid it was written for)
        tiles = grid3[0] * grid3[1] * (grid3[2] // self.kernel.split_k)
        cluster = 1
        if self.kernel.persistent:
            grid3, cluster = persistent_launch(self.kernel.cluster, grid3, self._resident_ctas(grid3, ordinal))
        if workspace is not None:
            # stream-K: one record per boundary between two CTAs (`tawa.lowering.stream_k`), so one per CTA
            records = grid3[0] * grid3[1] * grid3[2] if self.kernel.stream_k else tiles
            nbytes = TILE_COUNTER_BYTES if self.kernel.dynamic_tiles else records * self.kernel.workspace_per_tile
            workspace = (workspace, nbytes)
        return _Plan(grid3, ordinal if known else None, template, ptr_slots, scalar_slots, map_slots, tma_checks,
                     workspace, cluster)

    def _split_grid(self, grid3: tuple) -> tuple:
        """A split-K kernel runs `split_k` programs for each program of the grid along axis 2."""
        splits = self.kernel.split_k
        if splits <= 1:
            return grid3
        z = grid3[2] * splits
        if z > MAX_GRID[2]:
            raise LaunchError(f"kernel '{self.kernel.name}' splits K {splits} ways: grid axis 2 of {grid3} becomes "
                              f"{z}, more than {MAX_GRID[2]}", note="use a smaller split_k")
        return grid3[:2] + (z,)

    def _workspace_for(self, ctx, stream_value: int, nbytes: int) -> int:
        """Device memory for split-K partials, per context and stream (launches on one stream run in order, so
        they can share it; streams that may overlap get their own), zeroed when allocated: the kernel keeps each
        tile's counter at zero between launches. Allocated on first use; inside a CUDA-graph capture the allocation
        is allowed (relaxed capture mode) and the zero fill becomes part of the graph."""
        key = (ctx.key, stream_value)
        have = self._workspaces.get(key)
        if have is not None and have[1] >= nbytes:
            return have[0]
        if have is not None:
            self._retired.append(have[0])
        ptr = drv.mem_alloc(nbytes)
        drv.memset_async(ptr, nbytes, stream_value)
        self._workspaces[key] = (ptr, nbytes)
        return ptr

    def _resident_ctas(self, grid3: tuple, ordinal) -> int:
        """The most CTAs a persistent kernel runs as (`grid.persistent_launch`: fewer when there are fewer
        programs), on a 1-D grid: one per SM, or the `ctas_per_sm` it was compiled for. It loops over the programs
        of `grid3`, which it receives in its "grid" parameters."""
        programs = grid3[0] * grid3[1] * grid3[2]
        if programs > MAX_GRID[0]:
            raise LaunchError(f"kernel '{self.kernel.name}' is persistent and its grid {grid3} has {programs} "
                              f"programs, more than the {MAX_GRID[0]} it can count")
        sms = drv.sm_count(ordinal if ordinal is not None else drv.default_device())
        return sms * max(self.kernel.ctas_per_sm, 1)

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
        # What refuses the launch outright comes before TMA's rules, whose breach only switches to the variant
        # without TMA (a compile and a warning for a launch that would be refused anyway).
        for i, (param, info) in enumerate(zip(self.params, infos)):
            if info is None:
                continue
            if any(s < 0 for s in info.strides):
                raise LaunchError(f"argument '{param['name']}' has negative strides {info.strides}")
            check_written(param, info.shape, info.strides)
            # Tile coordinates and shape symbols are 32-bit in the kernel (and TMA's coordinates are signed
            # 32-bit), so an extent past 2**31 - 1 cannot be addressed, whether the kernel receives it as an integer
            # or only inside a tensor map.
            for axis, extent in enumerate(info.shape):
                if extent >= 2**31:
                    raise LaunchError(f"argument '{param['name']}': dimension {axis} has {extent} elements, more "
                                      f"than a 32-bit index can address", note="split the launch along that dimension")
        check_requires(self.kernel, bindings)
        for i, (param, info) in enumerate(zip(self.params, infos)):
            if info is None or i not in self._tma_args or 0 in info.shape:
                continue
            # The tensor-map rules that depend on the argument, checked now rather than at encoding.
            where = f"argument '{param['name']}'"
            esize = ELEMENT_BYTES[param["dtype"]]
            if info.ptr % hopper.TMA_ALIGN_BYTES:
                raise _misaligned(param["name"], info.ptr)
            for axis in range(len(info.shape) - 1):
                if info.shape[axis] > 1 and (info.strides[axis] * esize) % hopper.TMA_ALIGN_BYTES:
                    raise TmaAlignmentError(
                        f"{where}: stride of dimension {axis} is {info.strides[axis]} elements "
                        f"({info.strides[axis] * esize} bytes); the kernel's TMA copies need a multiple of "
                        "16 bytes", note="pad rows to a multiple of 16 bytes, or pass a contiguous copy "
                                         "of a padded tensor")
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

    def _device(self, infos: list) -> tuple:
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
            # as CuPy leaves it (read again on every launch of the plan).
            ordinal = drv.current_context_device()
            if ordinal is None:
                ordinal = drv.default_device()
            return ordinal, False
        return ordinal, True

    # -- tensor maps ----------------------------------------------------------------------------------------
    @staticmethod
    def _map_geometry(info: ArrayInfo) -> tuple:
        if 0 in info.shape:
            # TMA cannot describe an empty tensor; describe a zeroed scratch element instead: every read is then
            # 0 (in bounds, the scratch) or out of bounds (filled with 0), which is what an empty tensor reads.
            return None, (1,) * len(info.shape), (1,) * len(info.shape)
        return info.ptr, tuple(info.shape), tuple(info.strides)

    def _check_tensor_maps(self, infos: list, ordinal) -> None:
        """Check every tensor map against the driver's rules before the GPU is used. Only the alignment of the
        address depends on more than the signature, and that is checked on every launch."""
        for p in self.abi:
            if p.kind != "tensormap":
                continue
            info, param = infos[p.arg], self.params[p.arg]
            ptr, shape, strides = self._map_geometry(info)
            tm.tensor_map_args(param["dtype"], ptr or 0, shape, strides, p.box, p.swizzle, param["name"])

    def _scratch_for(self, ctx) -> int:
        if ctx.key not in self._scratch:
            self._scratch[ctx.key] = drv.mem_alloc(_SCRATCH_BYTES)
        return self._scratch[ctx.key]


def _misaligned(name: str, ptr: int) -> LaunchError:
    return TmaAlignmentError(f"argument '{name}': its data address 0x{ptr:x} is not 16-byte aligned, as the "
                             "kernel's TMA copies need",
                             note="slice so that the start stays 16-byte aligned, or pass a copy")


def _not_positive(kernel: str, name: str, value) -> PositiveScaleError:
    low, high = (math.log2(v) for v in POSITIVE_ARG_RANGE)
    return PositiveScaleError(
        f"kernel '{kernel}' was compiled assuming its argument '{name}' is positive (it scales a tile whose row "
        f"maximum the kernel takes, which is then taken before scaling), and it is {value!r}; the assumption "
        f"needs 2^{low:.0f} <= {name} <= 2^{high:.0f}",
        note="compile the kernel with positive_scales=False for such values")


def _scalar_value(value, dtype: str, where: str):
    """A checked scalar's value as packed: float for f32, a range-checked int for i32, bool for i1. `where`
    names the argument as `grid.bind_shapes` does, so the error reads the same on either path."""
    if dtype == "f32":
        value = float(value)
        if abs(value) >= F32_MAX:                   # (rare: `check_f32` lets infinity through)
            check_f32(where, value)
        return value
    value = int(value)
    if dtype == "i32" and not -2**31 <= value < 2**31:
        raise LaunchError(f"{where}: {value} does not fit in i32")
    return bool(value) if dtype == "i1" else value


def _cai_key(obj) -> tuple:
    """(signature key, data address) of a `__cuda_array_interface__` producer, from the dictionary's raw fields;
    (None, 0) when `obj` has none or it is not well formed (the full path then reads it and says what is wrong)."""
    try:
        cai = obj.__cuda_array_interface__
        typestr = cai["typestr"]
        strides = cai.get("strides")
        descr = cai.get("descr") if "V" in typestr else None     # names the type of raw (bf16 / fp8) data only
        key = ("cai", typestr, tuple(cai["shape"]), None if strides is None else tuple(strides),
               cai.get("mask") is None, None if descr is None else tuple(tuple(f) for f in descr))
        hash(key)
        return key, int(cai["data"][0] or 0)
    except Exception:
        return None, 0
