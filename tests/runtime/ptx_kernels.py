"""Hand-written sm_90a PTX kernels with their `CompiledKernel` descriptions, for testing the runtime on a GPU
without the compiler: a vector add (pointers and a dim), a row-wise affine map (strides, padded scalar
parameters), a kernel that copies its by-value tensor map parameter to memory, and a TMA tile copy (tensor map
by value or through a pointer) that checks the encoded geometry and the zero fill of out-of-bounds elements.
"""
from __future__ import annotations

from tawa.abi import AbiParam, CompiledKernel

_HEADER = ".version 8.0\n.target sm_90a\n.address_size 64\n"

VADD_PTX = _HEADER + r"""
.visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [a];
    ld.param.u64 %rd2, [b];
    ld.param.u64 %rd3, [c];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra DONE;
    mul.wide.s32 %rd4, %r5, 4;
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}
"""


def vadd_kernel(ptx: str = VADD_PTX, cubin: bytes | None = None) -> CompiledKernel:
    return CompiledKernel(
        name="vadd", target="cuda",
        params=[{"name": n, "kind": "tensor", "dtype": "f32", "shape": ["N"]} for n in ("A", "B", "C")],
        grid=["cdiv(N, BLOCK)"], constants={"BLOCK": 128},
        abi=[AbiParam("ptr", 0), AbiParam("ptr", 1), AbiParam("ptr", 2), AbiParam("dim", 0, axis=0)],
        num_threads=128, ptx=None if cubin else ptx, cubin=cubin)


# y[m, n] = alpha * x[m, n] + bias, one program per row. The parameter order forces padding after the 4-byte
# entries, so a wrong layout shows up as wrong values.
AFFINE_PTX = _HEADER + r"""
.visible .entry affine_rows(.param .u64 x, .param .u32 M, .param .s64 sx, .param .f32 alpha,
                            .param .u64 y, .param .u32 N, .param .s64 sy, .param .s32 bias)
{
    .reg .pred %p<3>;
    .reg .b32 %r<12>;
    .reg .f32 %f<6>;
    .reg .b64 %rd<16>;
    ld.param.u64 %rd1, [x];
    ld.param.u32 %r1, [M];
    ld.param.s64 %rd2, [sx];
    ld.param.f32 %f1, [alpha];
    ld.param.u64 %rd3, [y];
    ld.param.u32 %r2, [N];
    ld.param.s64 %rd4, [sy];
    ld.param.s32 %r3, [bias];
    cvt.rn.f32.s32 %f2, %r3;
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd3, %rd3;
    mov.u32 %r4, %ctaid.x;
    setp.ge.u32 %p1, %r4, %r1;
    @%p1 bra DONE;
    cvt.u64.u32 %rd5, %r4;
    mul.lo.s64 %rd6, %rd5, %rd2;
    mul.lo.s64 %rd7, %rd5, %rd4;
    mov.u32 %r5, %tid.x;
    mov.u32 %r6, %ntid.x;
LOOP:
    setp.ge.u32 %p2, %r5, %r2;
    @%p2 bra DONE;
    cvt.u64.u32 %rd8, %r5;
    add.s64 %rd9, %rd6, %rd8;
    shl.b64 %rd9, %rd9, 2;
    add.s64 %rd10, %rd1, %rd9;
    ld.global.f32 %f3, [%rd10];
    fma.rn.f32 %f4, %f3, %f1, %f2;
    add.s64 %rd11, %rd7, %rd8;
    shl.b64 %rd11, %rd11, 2;
    add.s64 %rd12, %rd3, %rd11;
    st.global.f32 [%rd12], %f4;
    add.u32 %r5, %r5, %r6;
    bra LOOP;
DONE:
    ret;
}
"""


def affine_kernel() -> CompiledKernel:
    return CompiledKernel(
        name="affine_rows", target="cuda",
        params=[{"name": "X", "kind": "tensor", "dtype": "f32", "shape": ["M", "N"]},
                {"name": "Y", "kind": "tensor", "dtype": "f32", "shape": ["M", "N"]},
                {"name": "alpha", "kind": "scalar", "dtype": "f32"},
                {"name": "bias", "kind": "scalar", "dtype": "i32"}],
        grid=["M"], constants={},
        abi=[AbiParam("ptr", 0), AbiParam("dim", 0, axis=0), AbiParam("stride", 0, axis=0),
             AbiParam("scalar", 2, dtype="f32"), AbiParam("ptr", 1), AbiParam("dim", 0, axis=1),
             AbiParam("stride", 1, axis=0), AbiParam("scalar", 3, dtype="i32")],
        num_threads=64, ptx=AFFINE_PTX)


# out[0:16] (u64) = the 128 bytes of the tensor map parameter, which sits after a 4-byte parameter.
TMAP_BYTES_PTX = _HEADER + r"""
.visible .entry tmap_bytes(.param .u32 rows, .param .align 64 .b8 tm[128], .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<20>;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
""" + "".join(f"    ld.param.u64 %rd2, [tm+{8 * i}];\n    st.global.u64 [%rd1+{8 * i}], %rd2;\n"
              for i in range(16)) + r"""
DONE:
    ret;
}
"""


def tmap_bytes_kernel(dtype: str, box: list, swizzle: int) -> CompiledKernel:
    return CompiledKernel(
        name="tmap_bytes", target="cuda",
        params=[{"name": "A", "kind": "tensor", "dtype": dtype, "shape": ["M", "K"]},
                {"name": "OUT", "kind": "tensor", "dtype": "i32", "shape": [32]}],
        grid=["1"], constants={},
        abi=[AbiParam("dim", 0, axis=0), AbiParam("tensormap", 0, box=box, swizzle=swizzle),
             AbiParam("ptr", 1)],
        num_threads=32, ptx=TMAP_BYTES_PTX)


BOX = (16, 32)          # f32 rows x columns of one TMA tile (128-byte rows)


def _tma_copy_ptx(by_value: bool) -> str:
    if by_value:
        tm_decl = ".param .align 64 .b8 tm[128]"
        tm_addr = "    mov.b64 %rd1, tm;\n    cvta.param.u64 %rd2, %rd1;\n"
    else:
        tm_decl = ".param .u64 tm"
        tm_addr = "    ld.param.u64 %rd2, [tm];\n"
    rows, cols = BOX
    return _HEADER + f"""
.visible .entry tma_copy({tm_decl}, .param .u64 out, .param .s64 ld)
{{
    .reg .pred %p<4>;
    .reg .b32 %r<20>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<16>;
    .shared .align 128 .b8 tile[{rows * cols * 4}];
    .shared .align 8 .b64 bar;
{tm_addr}    ld.param.u64 %rd3, [out];
    ld.param.s64 %rd4, [ld];
    cvta.to.global.u64 %rd5, %rd3;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, bar;
    mov.u32 %r3, tile;
    mov.u32 %r4, %ctaid.x;
    shl.b32 %r5, %r4, {cols.bit_length() - 1};
    mov.u32 %r6, %ctaid.y;
    shl.b32 %r7, %r6, {rows.bit_length() - 1};
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra SYNC;
    mbarrier.init.shared::cta.b64 [%r2], 1;
    fence.mbarrier_init.release.cluster;
    fence.proxy.async.shared::cta;
SYNC:
    bar.sync 0;
    @%p1 bra WAIT;
    mov.u32 %r8, {rows * cols * 4};
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], %r8;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd2, {{%r5, %r7}}], [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
    @!%p2 bra WAIT;
    mov.u32 %r9, %r1;
    mov.u32 %r10, %ntid.x;
LOOP:
    setp.ge.u32 %p3, %r9, {rows * cols};
    @%p3 bra DONE;
    shl.b32 %r11, %r9, 2;
    add.u32 %r12, %r3, %r11;
    ld.shared.f32 %f1, [%r12];
    shr.u32 %r13, %r9, {cols.bit_length() - 1};
    and.b32 %r14, %r9, {cols - 1};
    add.u32 %r15, %r13, %r7;
    add.u32 %r16, %r14, %r5;
    cvt.u64.u32 %rd6, %r15;
    mul.lo.s64 %rd7, %rd6, %rd4;
    cvt.u64.u32 %rd8, %r16;
    add.s64 %rd9, %rd7, %rd8;
    shl.b64 %rd10, %rd9, 2;
    add.s64 %rd11, %rd5, %rd10;
    st.global.f32 [%rd11], %f1;
    add.u32 %r9, %r9, %r10;
    bra LOOP;
DONE:
    ret;
}}
"""


TMA_COPY_PTX = _tma_copy_ptx(True)
TMA_COPY_PTR_PTX = _tma_copy_ptx(False)


def tma_copy_kernel(by_value: bool = True) -> CompiledKernel:
    """OUT[r, c] = A[r, c] inside A, 0 outside, for OUT covering whole tiles: A f32[M, N], OUT f32[P, Q]."""
    rows, cols = BOX
    return CompiledKernel(
        name="tma_copy", target="cuda",
        params=[{"name": "A", "kind": "tensor", "dtype": "f32", "shape": ["M", "N"]},
                {"name": "OUT", "kind": "tensor", "dtype": "f32", "shape": ["P", "Q"]}],
        grid=[f"cdiv(N, {cols})", f"cdiv(M, {rows})"], constants={},
        abi=[AbiParam("tensormap", 0, box=list(BOX), swizzle=0, by_value=by_value), AbiParam("ptr", 1),
             AbiParam("stride", 1, axis=0)],
        num_threads=128, shared_bytes=0, ptx=TMA_COPY_PTX if by_value else TMA_COPY_PTR_PTX)
