"""A thin layer over the CUDA driver API (`cuda.bindings.driver`): contexts, modules, memory and launches.

Takes device ordinals, kernel images (cubin bytes or PTX text) and packed parameter buffers; gives loaded
functions and launches, and turns every failed driver call into one `DriverError` that names the call and the
driver's error. `cuda.bindings.driver` is imported on first use only, so `import tawa.runtime` works on machines
with no GPU or no CUDA driver. Contexts are the devices' primary contexts, the ones PyTorch, CuPy and the CUDA
runtime use, so pointers and streams from those libraries are valid here. Loaded modules are cached per
(image, context): a repeated launch costs a dictionary lookup, not a module load, and a kernel launched on
several devices is loaded once into each.

Two rules keep launches from disturbing the program around them:
- A launch makes its device's context current only for itself (`enter_context` / `restore_context`): the CUDA
  runtime, and so PyTorch, takes its current device from the current context, and a launch on GPU 1 that left
  GPU 1 current would send the caller's next `torch.empty(device="cuda")` there.
- The calls that are not stream-ordered (opening a context, module loads, allocations) run in the relaxed
  stream-capture mode (`relaxed_capture`), so a kernel first launched while a stream is being captured into a
  CUDA graph loads without invalidating the capture; none of them enqueues work, so the graph is unaffected.
"""
from __future__ import annotations

import contextlib
import sys
import threading
from dataclasses import dataclass
from typing import Any, Optional

from tawa.errors import DriverError

#: Dynamic shared memory a kernel may use without opting in through a function attribute.
DEFAULT_SHARED_LIMIT = 48 * 1024
#: tawa kernels are built for sm_90a, which only runs on compute capability 9.0 (H100, H200, GH200).
REQUIRED_CAPABILITY = (9, 0)

_lock = threading.RLock()
_cu: Any = None                     # the cuda.bindings.driver module once cuInit succeeded
_init_error: Optional[DriverError] = None
_contexts: dict = {}                # ordinal -> Context
_functions: dict = {}               # (image key, entry name, context handle) -> Function


def driver():
    """The initialised `cuda.bindings.driver` module (cuInit done); `DriverError` when there is no driver."""
    global _cu, _init_error
    if _cu is not None:
        return _cu
    with _lock:
        if _cu is not None:
            return _cu
        if _init_error is not None:
            raise _init_error
        try:
            from cuda.bindings import driver as cu
        except ImportError as exc:
            _init_error = DriverError(f"cuda-python is not installed ({exc}); install it with "
                                      "`pip install cuda-python` to run kernels on a GPU")
            raise _init_error
        try:
            result = cu.cuInit(0)
        except Exception as exc:   # the bindings raise when libcuda.so itself cannot be found
            _init_error = DriverError(f"cuInit failed: no NVIDIA driver found ({exc})")
            raise _init_error
        try:
            check(result, "cuInit", cu)
        except DriverError as exc:
            _init_error = exc
            raise
        _cu = cu
        return cu


def gpu_available() -> tuple[bool, str]:
    """(True, device name) when device 0 can be used for tawa kernels, else (False, why not)."""
    try:
        ctx = context_for(0)
    except DriverError as exc:
        return False, exc.message
    return True, ctx.name


def check(result, what: str, cu=None):
    """Unpack a `(CUresult, *values)` tuple; raise `DriverError` naming `what` when the call failed."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        cu = cu or _cu
        name = desc = ""
        try:
            e, n = cu.cuGetErrorName(err)
            name = n.decode() if int(e) == 0 else ""
            e, s = cu.cuGetErrorString(err)
            desc = s.decode() if int(e) == 0 else ""
        except Exception:
            pass
        name = name or f"CUresult {int(err)}"
        raise DriverError(f"{what} failed: {name}" + (f" ({desc})" if desc else ""))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


@dataclass
class Context:
    ordinal: int
    handle: Any                 # CUcontext
    key: int                    # the handle as an integer, for dictionary keys
    name: str
    capability: tuple
    shared_optin_limit: int     # most dynamic shared memory a block may opt in to, in bytes

    def make_current(self) -> None:
        cu = driver()
        current = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if current is None or int(current) != self.key:
            check(cu.cuCtxSetCurrent(self.handle), "cuCtxSetCurrent")


def default_device() -> int:
    """The device a launch uses when its arguments name none: PyTorch's current device, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                return int(torch.cuda.current_device())
        except Exception:
            pass
    return 0


def context_for(ordinal: Optional[int] = None) -> Context:
    """The primary context of device `ordinal` (retained once, made current), after checking it is sm_90."""
    if ordinal is None:
        ordinal = default_device()
    ctx = _contexts.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _contexts.get(ordinal)
            if ctx is None:
                ctx = _open_context(ordinal)
                _contexts[ordinal] = ctx
    ctx.make_current()
    return ctx


def _open_context(ordinal: int) -> Context:
    cu = driver()
    count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    if count == 0:
        raise DriverError("no CUDA device found")
    if not 0 <= ordinal < count:
        raise DriverError(f"CUDA device {ordinal} does not exist (this machine has {count})")
    dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    raw = check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = raw.split(b"\0", 1)[0].decode(errors="replace")
    attr = cu.CUdevice_attribute
    major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                  "cuDeviceGetAttribute")
    minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                  "cuDeviceGetAttribute")
    if (major, minor) != REQUIRED_CAPABILITY:
        raise DriverError(f"tawa kernels are compiled for sm_90a (Hopper: H100, H200, GH200); device {ordinal} "
                          f"({name}) is sm_{major}{minor}",
                          note="use target='cpu' to run kernels in the interpreter instead")
    optin = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
                  "cuDeviceGetAttribute")
    handle = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    return Context(ordinal, handle, int(handle), name, (major, minor), int(optin))


def sm_count(ordinal: int) -> int:
    """Streaming multiprocessors of device `ordinal` (a persistent kernel launches one CTA per SM)."""
    count = _sm_counts.get(ordinal)
    if count is None:
        cu = driver()
        dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        count = int(check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                                  dev), "cuDeviceGetAttribute"))
        _sm_counts[ordinal] = count
    return count


_sm_counts: dict = {}


def current_context_device() -> Optional[int]:
    """The ordinal of the device whose context is current on this thread, or None."""
    cu = driver()
    ctx = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        return None
    return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))


def enter_context(ordinal: int) -> tuple:
    """Make device `ordinal`'s primary context current for one launch. Returns (Context, the context to make
    current again after the launch, or None when there is nothing to restore)."""
    ctx = _contexts.get(ordinal)
    if ctx is None:
        with _lock, relaxed_capture():
            ctx = _contexts.get(ordinal)
            if ctx is None:
                ctx = _contexts[ordinal] = _open_context(ordinal)
    cu = driver()
    current = check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    key = 0 if current is None else int(current)
    if key == ctx.key:
        return ctx, None
    check(cu.cuCtxSetCurrent(ctx.handle), "cuCtxSetCurrent")
    if key == 0 and ordinal == 0:
        # With no context current the runtime takes device 0's primary context: leaving it current changes
        # nothing for the caller and spares the next launch the switch.
        return ctx, None
    return ctx, (current if current is not None else cu.CUcontext(0))


def restore_context(previous) -> None:
    """Make `previous` (from `enter_context`) current again."""
    check(driver().cuCtxSetCurrent(previous), "cuCtxSetCurrent")


def stream_context(stream: int) -> int:
    """The context that `stream` (a raw CUstream value, not one of the special handles 0, 1 and 2) belongs to,
    as an integer comparable with `Context.key`."""
    cu = driver()
    return int(check(cu.cuStreamGetCtx(cu.CUstream(stream)), "cuStreamGetCtx"))


def context_device(key: int) -> Optional[int]:
    """The ordinal of the device whose primary context is `key`, among the contexts opened here; None if none."""
    for ordinal, ctx in list(_contexts.items()):
        if ctx.key == key:
            return ordinal
    return None


@contextlib.contextmanager
def relaxed_capture():
    """Run the enclosed driver calls in the relaxed stream-capture mode, then restore the thread's mode.

    Under the default (global) mode, a call that is not stream-ordered (cuMemAlloc, cuModuleLoadData, a
    synchronous copy) made while any stream of the thread is capturing fails and invalidates the capture. The
    calls made here neither enqueue work nor touch memory the graph uses, so relaxing the rule for them is safe;
    PyTorch does the same around its own JIT module loads."""
    cu = driver()
    mode = cu.CUstreamCaptureMode
    previous = check(cu.cuThreadExchangeStreamCaptureMode(mode.CU_STREAM_CAPTURE_MODE_RELAXED),
                     "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        check(cu.cuThreadExchangeStreamCaptureMode(previous), "cuThreadExchangeStreamCaptureMode")


@dataclass
class Function:
    module: Any                 # CUmodule (kept so it is not unloaded)
    handle: Any                 # CUfunction
    shared_bytes: int


def load_function(ctx: Context, image_key: str, image, entry: str, shared_bytes: int) -> Function:
    """Load `image` (cubin `bytes` or PTX `str`) into `ctx` once and return its function `entry`.

    The function is ready to launch with `shared_bytes` of dynamic shared memory: above 48 KiB that takes the
    opt-in attribute, which is set here, once.
    """
    key = (image_key, entry, ctx.key)
    fn = _functions.get(key)
    if fn is not None and fn.shared_bytes >= shared_bytes:
        return fn
    with _lock, relaxed_capture():
        fn = _functions.get(key)
        if fn is None:
            module = _load_module(image)
            handle = check(driver().cuModuleGetFunction(module, entry.encode()),
                           f"cuModuleGetFunction('{entry}')")
            fn = Function(module, handle, DEFAULT_SHARED_LIMIT)
        if shared_bytes > fn.shared_bytes:
            if shared_bytes > ctx.shared_optin_limit:
                raise DriverError(f"kernel '{entry}' needs {shared_bytes} bytes of shared memory; device "
                                  f"{ctx.ordinal} ({ctx.name}) allows at most {ctx.shared_optin_limit}")
            cu = driver()
            check(cu.cuFuncSetAttribute(
                fn.handle, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_bytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
            # All of the SM's unified memory as shared memory: a kernel sized for two CTAs per SM needs both
            # halves (the driver may otherwise configure less and fit one).
            check(cu.cuFuncSetAttribute(
                fn.handle, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                int(cu.CUshared_carveout.CU_SHAREDMEM_CARVEOUT_MAX_SHARED)),
                "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)")
            fn.shared_bytes = shared_bytes
        _functions[key] = fn
        return fn


def _load_module(image):
    cu = driver()
    if isinstance(image, str):
        # PTX is JIT-compiled by the driver; keep its error log so a rejected PTX says why.
        data = image.encode() + b"\0"
        log = bytearray(16384)
        opt = cu.CUjit_option
        try:
            result = cu.cuModuleLoadDataEx(
                data, 2, [opt.CU_JIT_ERROR_LOG_BUFFER, opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES],
                [log, len(log)])
        except TypeError:
            result = cu.cuModuleLoadDataEx(data, 0, [], [])
        try:
            return check(result, "cuModuleLoadDataEx (PTX)")
        except DriverError as exc:
            text = bytes(log).split(b"\0", 1)[0].decode(errors="replace").strip()
            if text:
                exc.message += f"\nptxas: {text}"
                exc.args = (exc.message,)
            raise
    return check(cu.cuModuleLoadDataEx(bytes(image), 0, [], []), "cuModuleLoadDataEx (cubin)")


def launch(fn: Function, grid: tuple, block: tuple, shared_bytes: int, stream: int, params_addr: int,
           cluster: int = 1) -> None:
    """Launch `fn` on `stream` (a raw CUstream value, 0 = the legacy default stream), in thread-block clusters of
    `cluster` CTAs along x when it is above 1.

    `params_addr` is the address of a `void*[n]` array whose entries point at each parameter's bytes, as
    cuLaunchKernel's `kernelParams` takes them.
    """
    cu = driver()
    if cluster > 1:
        check(cu.cuLaunchKernelEx(_launch_config(grid, block, shared_bytes, stream, cluster), fn.handle,
                                  params_addr, 0), "cuLaunchKernelEx (clusters)")
        return
    check(cu.cuLaunchKernel(fn.handle, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                            shared_bytes, cu.CUstream(stream), params_addr, 0),
          "cuLaunchKernel")


#: Launch configurations of clustered launches by (grid, block, shared bytes, stream, cluster): building one through
#: cuda-python costs about as much as the launch itself, and a kernel launched in a loop asks for the same one.
_configs: dict = {}


def _launch_config(grid: tuple, block: tuple, shared_bytes: int, stream: int, cluster: int):
    key = (grid, block, shared_bytes, stream, cluster)
    config = _configs.get(key)
    if config is None:
        if len(_configs) >= 256:
            _configs.clear()
        config = _configs[key] = _new_launch_config(grid, block, shared_bytes, stream, cluster)
    return config


def _new_launch_config(grid: tuple, block: tuple, shared_bytes: int, stream: int, cluster: int):
    cu = driver()
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = cu.CUstream(stream)
    config.attrs = [attr]
    config.numAttrs = 1
    return config


def max_active_clusters(fn: Function, grid: tuple, block: tuple, shared_bytes: int, cluster: int) -> int:
    """Clusters of `cluster` CTAs of `fn` that the device can hold at once."""
    cu = driver()
    config = _launch_config(grid, block, shared_bytes, 0, cluster)
    return int(check(cu.cuOccupancyMaxActiveClusters(fn.handle, config), "cuOccupancyMaxActiveClusters"))


def mem_alloc(nbytes: int) -> int:
    cu = driver()
    with relaxed_capture():
        return int(check(cu.cuMemAlloc(nbytes), "cuMemAlloc"))


def mem_free(ptr: int) -> None:
    cu = driver()
    check(cu.cuMemFree(cu.CUdeviceptr(ptr)), "cuMemFree")


def memcpy_htod(dst: int, data: bytes) -> None:
    cu = driver()
    with relaxed_capture():
        check(cu.cuMemcpyHtoD(cu.CUdeviceptr(dst), data, len(data)), "cuMemcpyHtoD")


def memset_async(dst: int, nbytes: int, stream: int) -> None:
    cu = driver()
    check(cu.cuMemsetD8Async(cu.CUdeviceptr(dst), 0, nbytes, cu.CUstream(stream)), "cuMemsetD8Async")


def synchronize() -> None:
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize")
