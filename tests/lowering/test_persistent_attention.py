"""The persistent attention schedule on the CPU (its numerics: tests/interleavings and the GPU tests in
tests/e2e/test_examples_gpu.py): a dot operand loaded before the loop gets a ring of its own only where the
producer can copy it per tile, the consumer loop keeps FlashAttention-3's schedule inside the tile loop, and what
cannot be made persistent is refused with a located reason."""
import re

import pytest

import tawa
from tawa.compiler import compile_module, compile_source
from tawa.frontend import parse_and_lower
from tawa.errors import CompilationError
from tawa.options import CompileOptions
from ws_support import EXAMPLES

FA = EXAMPLES / "flash_attention.tawa"


def attention(emit="kernel", **options):
    constants = {k: options.pop(k) for k in list(options) if k.isupper()}
    return compile_source(FA.read_text(), str(FA), CompileOptions(constants=constants, **options), emit=emit)


@pytest.mark.parametrize("head_dim,causal", [(128, 0), (128, 1), (96, 0)])
def test_the_key_loop_keeps_the_softmax_pipeline_and_the_pingpong(head_dim, causal):
    """assign-warp-groups runs after persistent-tiles: it finds the key loop inside the tile loop, with Q's ring
    slot as the lookahead dot's A operand (without it the loop fell back to completing every dot in turn)."""
    def placed(schedule):
        module = parse_and_lower(FA.read_text(), str(FA), {"HEAD_DIM": head_dim, "CAUSAL": causal})
        return str(compile_module(module, CompileOptions(schedule=schedule), stop_after="assign-warp-groups"))
    text, tile = placed("persistent"), placed("tile")
    assert "tawa.persistent" in text
    for attr in ("tawa.lookahead", "tawa.pingpong"):
        assert text.count(attr) == tile.count(attr) == 1, attr


def test_q_takes_two_slots_where_the_key_ring_keeps_two():
    """Q's second slot comes before the K/V ring's third: at head dim 128 two of each fit beside O's staging."""
    text = str(attention(emit="mlir", HEAD_DIM=128, schedule="persistent"))
    depths = re.findall(r'"tawa.aref_create"\(\) : \(\) -> !tawa.aref<\[tensor<128x128xbf16>\], (\d) : i32>', text)
    assert sorted(depths) == ["2", "2", "2"], depths


@pytest.mark.parametrize("head_dim", [192, 256])
def test_persistent_refused_where_the_rings_do_not_fit(head_dim):
    with pytest.raises(CompilationError, match="do not fit in shared memory together") as info:
        attention(HEAD_DIM=head_dim, schedule="persistent")
    assert info.value.location is not None


@pytest.mark.parametrize("head_dim,causal,options,schedule,why", [
    (128, 0, {}, "persistent", "the dot operand loaded at"),
    (96, 0, {}, "persistent", "a ring of its own that the producer fills for the next tile"),
    (128, 1, {}, "persistent", "the dot operand loaded at"),
    (128, 1, {"dynamic_tiles": False}, "tile", "its loop's length depends on the program"),
    (64, 0, {"BLOCK_N": 64}, "tile", "two CTAs per SM already overlap"),
    (64, 1, {"BLOCK_N": 64}, "tile", "two CTAs per SM already overlap"),
])
def test_the_compiler_chooses_the_schedule_and_says_why(head_dim, causal, options, schedule, why):
    """Persistent where every query block's loop has the same length, and with causal masking where the CTAs take
    the unequal blocks from a counter (dynamic tiles); one block per CTA where dynamic tiles are off (the
    hardware's dynamic assignment evens out unequal blocks) and at two CTAs per SM."""
    k = attention(HEAD_DIM=head_dim, CAUSAL=causal, **options)
    assert k.persistent == (schedule == "persistent")
    assert k.dynamic_tiles == (schedule == "persistent" and bool(causal))
    note = next(n for n in k.notes if f"uses the {schedule} schedule" in n)
    assert why in note and "flash_attention.tawa:" in note
    if k.dynamic_tiles:
        assert any("takes its tiles from a counter" in n for n in k.notes)


@pytest.mark.parametrize("head_dim", [128, 96])
def test_dynamic_tiles_codegen(head_dim):
    """Causal attention with dynamic tiles: the counter is the runtime's workspace (fetched with a relaxed atomic,
    reset by the launch's last fetch), the tile index goes to the consumers through mbarriers, and the consumer
    loop keeps its schedule inside the `scf.while` tile loop (lookahead, ping-pong: one copy of the softmax per
    body as in the static loop) with 0 spills and no serialized wgmma."""
    k = attention(HEAD_DIM=head_dim, CAUSAL=1)
    static = attention(HEAD_DIM=head_dim, CAUSAL=1, schedule="persistent", dynamic_tiles=False)
    assert k.dynamic_tiles and k.persistent and not static.dynamic_tiles
    assert [p.kind for p in k.abi].count("workspace") == 1 and k.workspace_per_tile == 0
    assert k.ptx.count("atom.add.relaxed.gpu.global.u32") == 1
    assert k.ptx.count("ex2.approx") == static.ptx.count("ex2.approx")
    assert k.ptx.count("mbarrier.try_wait") > static.ptx.count("mbarrier.try_wait")
    assert k.spill_bytes == 0 and not any("C75" in n for n in k.notes)
    module = parse_and_lower(FA.read_text(), str(FA), {"HEAD_DIM": head_dim, "CAUSAL": 1})
    text = str(compile_module(module, CompileOptions(), stop_after="assign-warp-groups"))
    assert "scf.while" in text and text.count("tawa.lookahead") == 1 and text.count("tawa.pingpong") == 1


def _barrier_counts(ptx: str) -> list:
    """The arrival counts the kernel initialises its mbarriers with (constants moved into registers first)."""
    consts = dict(re.findall(r"mov\.b32\s+(%r\d+), (\d+);", ptx))
    return [int(consts[r]) for r in re.findall(r"mbarrier\.init\.shared\.b64\s+\[[^]]+\], (%r\d+);", ptx)]


@pytest.mark.parametrize("constants,options,consumers", [
    ({"BLOCK_N": 256}, {}, 256),                                    # two consumer groups
    ({"BLOCK_M": 192, "BLOCK_N": 192}, {}, 384),                    # three
    ({"BLOCK_M": 64, "BLOCK_N": 128}, {"num_consumer_groups": 1}, 128),
])
def test_dynamic_gemm_codegen(constants, options, consumers):
    """A GEMM given dynamic tiles: the persistent schedule (not the ping-pong the compiler would pick for some
    tiles), one fetch and one reset of the counter, and the handover's `empty` barriers expecting every consumer
    thread."""
    gemm = EXAMPLES / "gemm.tawa"
    k = compile_source(gemm.read_text(), str(gemm), CompileOptions(constants=constants, dynamic_tiles=True,
                                                                   **options))
    assert k.persistent and k.dynamic_tiles
    assert k.ptx.count("atom.add.relaxed.gpu.global.u32") == 1 and k.ptx.count("st.relaxed.gpu.global.u32") == 1
    counts = _barrier_counts(k.ptx)
    assert counts.count(consumers) >= 2 and counts.count(1) >= 2, counts      # the handover's two slots
    assert k.spill_bytes == 0


def test_dynamic_tiles_asked_for_choose_the_persistent_schedule():
    """Where the compiler would pick ping-pong (a GEMM's 128x128 tiles) or one block per CTA (causal attention at
    head dim 64 with 64-key blocks, two CTAs per SM), `dynamic_tiles=True` makes it pick the persistent schedule
    instead."""
    gemm = EXAMPLES / "gemm.tawa"
    own = compile_source(gemm.read_text(), str(gemm), CompileOptions(constants={"BLOCK_N": 128}))
    assert any("uses the pingpong schedule" in n for n in own.notes)
    k = compile_source(gemm.read_text(), str(gemm), CompileOptions(constants={"BLOCK_N": 128}, dynamic_tiles=True))
    assert k.dynamic_tiles and any("uses the persistent schedule" in n for n in k.notes)
    assert not attention(HEAD_DIM=64, CAUSAL=1, BLOCK_N=64).persistent
    k = attention(HEAD_DIM=64, CAUSAL=1, BLOCK_N=64, dynamic_tiles=True)
    assert k.persistent and k.dynamic_tiles


def test_dynamic_tiles_refused_where_the_kernel_cannot_persist(tmp_path):
    """Options that rule dynamic tiles out are refused by `CompileOptions.validate` (tests/test_options.py); a
    kernel that cannot take the persistent schedule gets one clear error at the kernel, saying why."""
    softmax = EXAMPLES / "softmax.tawa"
    with pytest.raises(CompilationError, match="cannot give kernel .* dynamic tiles: it runs one program per CTA") \
            as info:
        compile_source(softmax.read_text(), str(softmax), CompileOptions(dynamic_tiles=True))
    assert info.value.location is not None
    src = tmp_path / "staged.tawa"
    src.write_text(
        "@grid(cdiv(M, 128), cdiv(N, 128))\n"
        "def staged(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N]):\n"
        "    acc = zeros((128, 128), f32)\n"
        "    if K > 64:\n"
        "        a0 = load(A, (program_id(0), 0), (128, 64))\n"
        "        acc = dot(a0, load(B, (0, program_id(1)), (64, 128)), acc)\n"
        "    for k in range(1, cdiv(K, 64)):\n"
        "        acc = dot(load(A, (program_id(0), k), (128, 64)), load(B, (k, program_id(1)), (64, 128)), acc)\n"
        "    store(C, (program_id(0), program_id(1)), acc.to(bf16))\n")
    plain = compile_source(src.read_text(), str(src), CompileOptions())
    assert any("not persistent because the dot operand loaded at" in n for n in plain.notes), plain.notes
    with pytest.raises(CompilationError, match="dynamic tiles: it runs one program per CTA \\(not persistent "
                                               "because the dot operand loaded at .*staged.tawa:5"):
        compile_source(src.read_text(), str(src), CompileOptions(dynamic_tiles=True))


def test_split_k_and_a_prologue_operand_are_refused(tmp_path):
    src = tmp_path / "pre.tawa"
    src.write_text(
        "@grid(cdiv(M, BM), cdiv(N, BN))\n"
        "def pre(X: bf16[M, 64], W: bf16[K, 64], B: bf16[K, N], C: bf16[M, N], BM: const = 128, BN: const = 128):\n"
        "    x = load(X, (program_id(0), 0), (BM, 64))\n"
        "    acc = zeros((BM, BN), f32)\n"
        "    for k in range(cdiv(K, 64)):\n"
        "        w = load(W, (k, 0), (64, 64))\n"
        "        b = load(B, (k, program_id(1)), (64, BN))\n"
        "        acc = dot(dot(x, w.T).to(bf16), b, acc)\n"
        "    store(C, (program_id(0), program_id(1)), acc.to(bf16))\n")
    with pytest.raises(CompilationError, match="split-K and the dot operand loaded at .*pre.tawa:3:9"):
        tawa.compile(str(src), cache=False, schedule="persistent", split_k=2)


@pytest.mark.parametrize("constants,options", [
    # slots of tiles whose bytes are not a multiple of 1024 (112-element rows): each tile of a slot is 1024-aligned
    ({"HEAD_DIM": 112, "CAUSAL": 1}, {}),
    ({"HEAD_DIM": 144, "BLOCK_N": 112, "CAUSAL": 1}, {}),
    ({"HEAD_DIM": 80, "BLOCK_N": 48}, {}),                              # ... at two CTAs per SM
    # an explicit ring depth: Q's second slot only where it fits beside it
    ({"HEAD_DIM": 64, "BLOCK_N": 128}, {"schedule": "persistent", "num_buffers": 6}),
])
def test_the_chosen_rings_fit_in_shared_memory(constants, options):
    k = attention(**constants, **options)
    assert 0 < k.shared_bytes <= 232448


def test_clusters_refuse_a_prologue_ring():
    with pytest.raises(CompilationError, match="before the loop comes through a ring of its own, which clusters"):
        attention(HEAD_DIM=128, cluster="2x1")


def test_the_loop_traits_the_launch_rule_reads_are_recorded():
    """`CompiledKernel.uneven_programs` (causal attention needs longer sequences for 192-row blocks to pay) is set
    where a loop with a dot runs a program-dependent number of iterations; `chained_dots` where a loop's dot takes
    another's result (attention, not a GEMM, SwiGLU's two dots side by side, or X @ A @ B with the second dot after
    the loop)."""
    causal, full = attention(HEAD_DIM=64, CAUSAL=1), attention(HEAD_DIM=64, CAUSAL=0)
    assert causal.uneven_programs and not full.uneven_programs
    assert causal.chained_dots and full.chained_dots
    for name in ("gemm", "swiglu"):
        path = EXAMPLES / f"{name}.tawa"
        k = compile_source(path.read_text(), str(path), CompileOptions())
        assert not k.uneven_programs and not k.chained_dots
    after_loop = (
        "@grid(cdiv(M, BLOCK_M))\n"
        "def lora(X: bf16[M, K], A: bf16[K, 64], B: bf16[64, 64], Y: bf16[M, 64],\n"
        "         BLOCK_M: const = 128, BLOCK_K: const = 64):\n"
        "    pid_m = program_id(0)\n"
        "    acc = zeros((BLOCK_M, 64), f32)\n"
        "    for k in range(cdiv(K, BLOCK_K)):\n"
        "        acc = dot(load(X, (pid_m, k), (BLOCK_M, BLOCK_K)), load(A, (k, 0), (BLOCK_K, 64)), acc)\n"
        "    y = dot(acc.to(bf16), load(B, (0, 0), (64, 64)))\n"
        "    store(Y, (pid_m, 0), y.to(bf16))\n")
    assert not compile_source(after_loop, "lora.tawa", CompileOptions()).chained_dots


@pytest.mark.parametrize("head_dim,width", [(96, 64), (80, 32), (32, 64)])
@pytest.mark.parametrize("options", [{}, {"schedule": "persistent"}, {"CAUSAL": 1}, {"warp_specialize": False}],
                         ids=["auto", "persistent", "causal", "uniform"])
def test_rows_off_the_128_byte_grid_are_stored_through_narrower_staging_boxes(head_dim, width, options):
    """O's rows of 192, 160 or 64 bytes go through shared staging in 64- or 32-byte swizzled column boxes and TMA
    stores (a per-thread store wrote each row in 4-byte pieces: at 32x16x512x96 three times the L2 sectors of the
    output and a fifth of the kernel's time)."""
    k = attention(HEAD_DIM=head_dim, **options)
    o_map = [p for p in k.abi if p.kind == "tensormap" and p.arg == 3]
    assert len(o_map) == 1 and o_map[0].swizzle == width and o_map[0].box[-1] == width // 2
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in k.ptx or "cp.async.bulk.tensor.3d.global.shared::cta" \
        in k.ptx or "cp.async.bulk.tensor.4d.global.shared::cta" in k.ptx
    assert "st.global" not in k.ptx
    assert k.spill_bytes == 0


def test_a_k_loop_under_a_conditional_in_the_body_persists():
    """MoE in the capacity layout (`if pid_m * BLOCK_M < count:` around the K loop): the persistent schedule wraps
    the conditional when asked for (its interleavings: tests/interleavings), taking its tiles from a counter by
    default, or in 1x2 clusters, whose pairs share pid_m and so the branch; ping-pong, 2x1 clusters (the condition
    reads pid_m), stream-K and split-K are refused with a located reason. The compiler's own choice is one program
    per CTA (the hardware balances the skipped tiles), and the kernel records why (`skipping_programs`)."""
    path = EXAMPLES.parent / "tests" / "e2e" / "kernels" / "user" / "moe_counts.tawa"

    def moe(**options):
        return compile_source(path.read_text(), str(path), CompileOptions(**options))
    auto = moe()
    assert not auto.persistent and auto.skipping_programs and not auto.uneven_programs
    assert any("uses the tile schedule" in n and "some programs skip" in n for n in auto.notes), auto.notes
    persistent = moe(schedule="persistent")
    assert persistent.persistent and persistent.dynamic_tiles
    assert not moe(schedule="persistent", dynamic_tiles=False).dynamic_tiles
    assert moe(dynamic_tiles=True).dynamic_tiles
    assert moe(schedule="persistent", cluster="1x2").cluster == [1, 2]
    assert moe(cluster="1x2").persistent                # (clusters asked for: the persistent schedule they need)
    gemm = EXAMPLES / "gemm.tawa"
    assert not compile_source(gemm.read_text(), str(gemm), CompileOptions()).skipping_programs
    for options, message in (({"schedule": "pingpong"}, "is nested in a conditional, which some tiles may skip"),
                             ({"schedule": "persistent", "cluster": "2x1"}, "depends on program_id(0)"),
                             ({"schedule": "streamk"}, "not at the top level of the kernel"),
                             ({"split_k": 2}, "not at the top level of the kernel")):
        with pytest.raises(CompilationError, match=re.escape(message)) as info:
            moe(**options)
        # (at the kernel, naming the loop; split-K's at the loop)
        assert info.value.location is not None and (info.value.location.line == 13 or
                                                    "moe_counts.tawa:13:9" in info.value.message), options


def test_skipping_programs_with_a_q_block_and_conditions_the_same_for_every_program():
    """A query block loaded before the `if` (a ring of its own in a persistent kernel) does not make a kernel whose
    programs skip the K loop persistent by default; a condition that is the same for every program (a flag passed
    in) skips no program's tile: the kernel takes the persistent schedule (ping-pong takes its groups' turns around
    a loop directly in the tile loop, and refuses any conditional around it)."""
    path = EXAMPLES.parent / "tests" / "e2e" / "kernels" / "user" / "attn_varlen.tawa"
    source = path.read_text()
    q_line = "        q = load(Q[h], (qb, 0), (BLOCK_M, D))\n"
    assert q_line in source
    source = source.replace(q_line, "").replace("    if pid_m * BLOCK_M < n:\n",
                                                "    qb = start // BLOCK_M + pid_m\n    q = load(Q[h], (qb, 0), "
                                                "(BLOCK_M, D))\n    if pid_m * BLOCK_M < n:\n")
    k = compile_source(source, "varlen_q_first.tawa", CompileOptions())
    assert k.skipping_programs and not k.persistent, k.notes
    flag = """
@grid(cdiv(M, BLOCK_M), cdiv(N, BLOCK_N))
def gemm_flag(A: bf16[M, K], B: bf16[K, N], C: bf16[M, N], FLAG: i32, BLOCK_M: const = 128, BLOCK_N: const = 128,
              BLOCK_K: const = 64):
    pid_m = program_id(0)
    pid_n = program_id(1)
    acc = zeros((BLOCK_M, BLOCK_N), f32)
    if FLAG > 0:
        for k in range(cdiv(K, BLOCK_K)):
            acc = dot(load(A, (pid_m, k), (BLOCK_M, BLOCK_K)), load(B, (k, pid_n), (BLOCK_K, BLOCK_N)), acc)
    store(C, (pid_m, pid_n), acc.to(bf16))
"""
    g = compile_source(flag, "gemm_flag.tawa", CompileOptions())
    assert not g.skipping_programs and any("uses the persistent schedule" in n for n in g.notes), g.notes
