"""The compiler driver: the one ordered list of passes, the one place schedule decisions are made, and the
function that runs them.

Source → frontend (Lark parse, lowering to the `tawa` dialect) → `decide` (target, warp specialization) → the
passes of `PIPELINE` that the decision selects, in order → `tawa.lowering.backend.build_kernel` (PTX, cubin) →
a `CompiledKernel`. Every pass is a module in `tawa/lowering/` with a `run(module, options)` function and a
docstring saying what it takes and gives. After every pass the `tawa` verifier runs when asked
(`CompileOptions.verify_each`, `--dump-ir-after-all`, or `TAWA_VERIFY_EACH=1`), so a pass that breaks an invariant
fails at that pass, by name. `--dump-ir-after-all` prints the IR after each pass that ran.

Which passes run depends on the target and on whether the kernel is warp specialized:
- WS: the kernel is split into a producer and consumer warp groups connected by arefs;
- UNIFORM: all warps run the same code, loads software-pipelined `num_stages` deep;
- CPU: the interpreter runs the tile IR as it stands after the tile-level passes.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable

from tawa import hopper
from tawa.abi import CompiledKernel
from tawa.errors import CompilationError, InternalCompilerError, SharedMemoryError, TawaError
from tawa.ir import attrs, kernel_info, verify
from tawa.ir.location import source_location, where
from tawa.ir.traversal import walk
from tawa.lowering import (aref_insertion, assign_layouts, assign_warp_groups, canonicalize, divide_by_row,
                           epilogue_prefetch, exp_base2, launch_order, lazy_rescale, loop_guards, loop_load_prefetch,
                           lower_to_llvm, mask_elision, masked_dots, occupancy, partition, persistent_tiles,
                           protocol_check, register_realloc, scalar_loads, scale_after_max, software_pipeline,
                           split_k, stream_k, to_nvvm, ws_analysis, ws_ir)
from tawa.options import PERSISTENT_SCHEDULES, CompileOptions


@dataclass(frozen=True)
class Plan:
    """The decisions taken before the pipeline runs, once per compile; each pass's `when` reads them."""
    target: str
    warp_specialize: bool
    #: Tile schedule of a specialized kernel: "tile" (one program per CTA), "persistent" (CTAs loop over tiles,
    #: the consumer warp groups sharing each), "pingpong" (persistent, each consumer warp group on its own tiles) or
    #: "streamk" (persistent, the tiles of a mostly idle last wave shared by K iterations).
    schedule: str = "tile"
    #: Programs each output tile's K loop is split over (1: not split).
    split_k: int = 1
    #: Thread-block cluster of a persistent kernel, "AxB" ("1x1": none).
    cluster: str = "1x1"
    #: CTAs kept resident per SM (`tawa.lowering.occupancy`): 2 splits the registers and shared memory in half.
    ctas_per_sm: int = 1
    #: Uniform warps chosen over a possible specialization (`occupancy.uniform_is_faster`), on the premise that
    #: two CTAs per SM fit: ptxas's report checks it.
    uniform_by_choice: bool = False


def _always(plan: Plan) -> bool: return True
def _ws(plan: Plan) -> bool: return plan.warp_specialize
def _gpu(plan: Plan) -> bool: return plan.target == "cuda"
def _gpu_ws(plan: Plan) -> bool: return plan.target == "cuda" and plan.warp_specialize
def _gpu_uniform(plan: Plan) -> bool: return plan.target == "cuda" and not plan.warp_specialize
def _persistent(plan: Plan) -> bool: return plan.warp_specialize and plan.schedule in PERSISTENT_SCHEDULES
def _stream_k(plan: Plan) -> bool: return plan.warp_specialize and plan.schedule == "streamk"
def _split(plan: Plan) -> bool: return plan.split_k > 1


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable                    # run(module, options) -> module
    when: Callable[[Plan], bool] = _always
    #: Tile-level passes keep the program in the `tawa` dialect and run for every target.
    tile_level: bool = True
    #: Normalizes the program the schedule is decided on (`decide` reads its output): these run first, in order.
    before_decide: bool = False


# The pipeline. Read top to bottom: this is everything the compiler does after the frontend.
PIPELINE = [
    # Tile level, target independent.
    Pass("canonicalize", canonicalize.run, before_decide=True),
    # sum(load(X, i, 1)) of a tensor the kernel never writes becomes a scalar read (before the schedule is decided:
    # the producer warp group can then compute loop bounds and tile coordinates read from memory for itself).
    Pass("scalar-loads", scalar_loads.run, before_decide=True),
    # A loop whose body runs under `if <bound on the index>` loops over that range instead (before the schedule is
    # decided: warp specialization and launch order then see the loop as if written with that range).
    Pass("loop-guards", loop_guards.run, before_decide=True),
    # Programs whose loops run longer the larger their id (causal attention) start first: the short ones fill the
    # last wave.
    Pass("launch-order", launch_order.run),
    # Masks that a scalar test proves all-true on most iterations (attention's bounds and causal masks) are skipped.
    Pass("mask-elision", mask_elision.run),
    # An online softmax keeps a stale row maximum until it grows by 2^8, so its rescale multiplies are by exactly 1.0
    # on most iterations, and the GPU lowering skips them.
    Pass("lazy-rescale", lazy_rescale.run),
    # max(s * c) over a row becomes max(s) * c for a positive scalar c (an argument so assumed is checked at
    # launch): the scores are not multiplied before their maximum (GPU only).
    Pass("scale-after-max", scale_after_max.run, when=_gpu),
    # exp(s - m[:, None]) becomes exp2(s * log2e - (m * log2e)[:, None]): one FMA before the MUFU instead of a
    # subtract and a multiply (GPU only: the interpreter keeps exp as written).
    Pass("exp-base2", exp_base2.run, when=_gpu),
    # a / b[:, None] and a / scalar become a * (1 / b): one reciprocal per row instead of a division per element.
    Pass("divide-by-row", divide_by_row.run, when=_gpu),
    # Split-K: small grids split each tile's K loop over several programs; the last to finish sums and stores.
    Pass("split-k", split_k.run, when=_split),
    # A dot on a masked loaded tile (`dot(where(k < K, a, 0), b)`) reads the tile as loaded where the mask is
    # all-true (warp-specialized kernels: wgmma reads it from its ring slot).
    Pass("masked-dots", masked_dots.run, when=_ws),
    # Warp specialization (tile level): loads feeding dots become aref puts in a producer warp group.
    Pass("aref-insertion", aref_insertion.run, when=_ws),
    Pass("partition", partition.run, when=_ws),
    Pass("protocol-check", protocol_check.run, when=_ws),
    # An epilogue operand (a residual added to the accumulator) is prefetched before the main loop.
    Pass("epilogue-prefetch", epilogue_prefetch.run, when=_ws),
    # A consumer loop's register loads (an attention bias) are issued an iteration ahead, carried as loop arguments.
    Pass("loop-load-prefetch", loop_load_prefetch.run, when=_ws),
    # Persistent schedule: every warp group loops over the output tiles its CTA owns (about one CTA per SM).
    Pass("persistent-tiles", persistent_tiles.run, when=_persistent),
    # Stream-K: the tiles of a mostly idle last wave are shared by K iterations; two CTAs meet in a workspace.
    Pass("stream-k", stream_k.run, when=_stream_k),
    # Warp specialization on the GPU: setmaxnreg budgets, then warp-group placement, launch size and the loads
    # each aref put issues as TMA copies (the NVVM conversion lowers the regions and arefs to mbarrier rings).
    Pass("register-realloc", register_realloc.run, when=_gpu_ws, tile_level=False),
    Pass("assign-warp-groups", assign_warp_groups.run, when=_gpu_ws, tile_level=False),
    # GPU backend: distributed layouts, the uniform-warp software pipeline, then NVVM and LLVM.
    Pass("assign-layouts", assign_layouts.run, when=_gpu, tile_level=False),
    Pass("software-pipeline", software_pipeline.run, when=_gpu_uniform, tile_level=False),
    Pass("convert-to-nvvm", to_nvvm.run, when=_gpu, tile_level=False),
    Pass("lower-to-llvm", lower_to_llvm.run, when=_gpu, tile_level=False),
    # Then `tawa.lowering.backend.build_kernel`: NVPTX → PTX, ptxas → cubin, launch metadata.
]

#: Passes by name, for `tawa.opt` / `tawac FILE.mlir --passes a,b`.
PASSES = {p.name: p for p in PIPELINE}


def get_pass(name: str) -> Pass:
    try:
        return PASSES[name]
    except KeyError:
        raise CompilationError(f"unknown pass '{name}'", note=f"passes: {', '.join(PASSES)}") from None


def decide(module, options: CompileOptions) -> tuple[Plan, list[str]]:
    """Decide target and schedule, once: returns the plan and diagnostics for the user.

    Raises CompilationError when specialization was required (`warp_specialize=True`) but is impossible, or when
    the persistent schedule was required (`schedule="persistent"`) but the kernel is not specialized."""
    options.validate()
    func = kernel_info.kernel_function(module)
    split_k.check(func, options.split_k)
    if options.target == "cpu" and options.warp_specialize is None:
        return Plan(options.target, False, split_k=options.split_k), []
    loop_plans, note = ws_analysis.decide(func, options)
    faster = occupancy.uniform_is_faster(func, options, loop_plans)
    if faster:
        loop_plans, note = None, ws_analysis.uniform_note(kernel_info.kernel_name(func), faster)
    notes = [note] if note else []
    schedule, why_schedule = _tile_schedule(func, options, loop_plans, note)
    if why_schedule:
        notes.append(f"kernel '{kernel_info.kernel_name(func)}' uses the {schedule} schedule: {why_schedule}")
    cluster, why = _cluster(func, options, loop_plans, schedule)
    if why:
        notes.append(f"kernel '{kernel_info.kernel_name(func)}' {why}")
    name = kernel_info.kernel_name(func)
    share = 2 if schedule == "pingpong" else 1
    dynamic, why_dynamic = (persistent_tiles.dynamic_tiles(func, options, share) if schedule in PERSISTENT_SCHEDULES
                            else (False, f"it runs one program per CTA ({why_schedule or 'not warp-specialized'})"))
    if options.dynamic_tiles and not dynamic:
        why_dynamic = why_dynamic or f"the {schedule} schedule gives its tiles to fixed CTAs"
        raise CompilationError(f"cannot give kernel '{name}' dynamic tiles: {why_dynamic}", source_location(func),
                               note="dynamic tiles need the persistent schedule without clusters, stream-K or "
                                    "split-K")
    if schedule in PERSISTENT_SCHEDULES:
        group, why = persistent_tiles.tile_group([ld for p in loop_plans for ld in p.loads], options, share,
                                                 dynamic)
        order = {persistent_tiles.WHOLE_AXIS: "all of grid axis 0 for each tile along axis 1",
                 persistent_tiles.SNAKE: "all of grid axis 0 for each tile along axis 1, every other row "
                                         "backwards"}.get(
            group, f"runs of {group} along grid axis 0 for each tile along axis 1")
        notes.append(f"kernel '{name}' visits its tiles in {order} ({why})")
        if dynamic:
            notes.append(f"kernel '{name}' takes its tiles from a counter as its CTAs free up (dynamic tiles: "
                         f"{why_dynamic}), in that order")
    elif options.group_m:
        notes.append(f"kernel '{kernel_info.kernel_name(func)}' ignores group_m={options.group_m}: only a persistent "
                     f"schedule orders its tiles (this kernel runs one program per CTA, in the hardware's order)")
    if options.split_k > 1:
        notes.append(f"kernel '{kernel_info.kernel_name(func)}' splits its K loop over {options.split_k} programs "
                     f"per output tile (split_k={options.split_k})")
    ctas, why = occupancy.choose(func, options, loop_plans, schedule, cluster)
    if why:
        notes.append(f"kernel '{kernel_info.kernel_name(func)}' {why}")
    notes += [f"kernel '{name}': {n}" for n in masked_dots.masked_before_loop_notes(func)]
    return Plan(options.target, loop_plans is not None, schedule, options.split_k, cluster, ctas,
                bool(faster)), notes


def _cluster(func, options: CompileOptions, loop_plans, schedule: str) -> tuple[str, str]:
    """("AxB", what the kernel's notes say) for the `cluster` option: clusters are asked for, never chosen."""
    if options.cluster in (None, "1x1"):
        return "1x1", ""
    ok, why = persistent_tiles.can_cluster(func, loop_plans, options, schedule)
    if not ok:
        raise CompilationError(f"cannot run kernel '{kernel_info.kernel_name(func)}' in {options.cluster} clusters: "
                               f"{why}", source_location(func), note="compile without the cluster option")
    return options.cluster, f"runs in {options.cluster} thread-block clusters: {why}"


def _tile_schedule(func, options: CompileOptions, loop_plans, uniform_note: str = "") -> tuple[str, str]:
    """("tile" | "persistent" | "pingpong" | "streamk", why) for one kernel; `loop_plans`: its `ws_analysis.plan` where it is
    warp-specialized, else None (`uniform_note` then says why)."""
    name = kernel_info.kernel_name(func)
    if options.schedule == "tile":
        return "tile", "one program per CTA (schedule='tile')"
    asked = options.schedule in PERSISTENT_SCHEDULES
    what = {"pingpong": "ping-pong", "streamk": "stream-K"}.get(options.schedule, "persistent")
    if loop_plans is None:
        if asked:
            reason = ws_analysis.uniform_reason(uniform_note)
            raise CompilationError(f"cannot make kernel '{name}' {what}: it is not warp-specialized" +
                                   (f" ({reason})" if reason else ""), source_location(func),
                                   note="the persistent schedules loop the producer and consumer warp groups over "
                                        "tiles; compile with schedule='tile' or let the kernel specialize")
        return "tile", ""
    ok, reason = persistent_tiles.can_persist(func, loop_plans, options)
    prologue = persistent_tiles.prologue_operand(func, loop_plans)
    skipped = next((p.loop for p in loop_plans if ws_ir.skipped_by_program(p.loop)), None)
    if ok and skipped is not None and options.schedule is None and not options.dynamic_tiles and \
            options.cluster_dims() == (1, 1):
        # Measured (H200, MoE in the capacity layout, 128x256 tiles; docs/performance.md): one program per CTA ran
        # 585-603 TFLOP/s where a fixed share of tiles per persistent CTA ran 524-527 and dynamic tiles 576-585:
        # the hardware hands the programs to SMs as they free up, and the skipped tiles are short.
        return "tile", (f"one program per CTA: its loop{where(skipped)} sits under a conditional that some programs "
                        f"skip, and the hardware hands programs to SMs as they free up, where persistent CTAs "
                        f"would take fixed shares of unequal tiles (schedule='persistent' makes it persistent)")
    if ok and prologue is not None and options.schedule is None:
        # Measured (docs/performance.md, persistent attention): where every tile's loop has the same length, the
        # persistent kernel runs level with one program per CTA on long loops and up to a fifth faster on short
        # ones. Loops whose length depends on the program (causal attention) take dynamic tiles: a fixed
        # assignment of tiles to CTAs left long causal grids 23% slower, and one block per CTA short ones 4-11%.
        # A kernel already at two CTAs per SM (attention at head dim 64) gets its overlap from the other CTA.
        why = None
        uneven = any(ws_ir.computed_from_program(p.loop.operands[:3]) for p in loop_plans)
        if uneven and options.dynamic_tiles is False:
            why = ("its loop's length depends on the program, and the hardware hands programs to SMs as they free "
                   "up, where persistent CTAs without dynamic tiles would take fixed shares of unequal tiles")
        elif uneven and persistent_tiles.takes_three_groups(persistent_tiles.carried_rows(func)) \
                and not options.dynamic_tiles:
            # Measured (H100, head dim 64, causal, 2x16x8192): 408-427 TFLOP/s with dynamic tiles against
            # 438-442 for one block per CTA.
            why = ("its loop's length depends on the program, and on three consumer warp groups dynamic tiles ran "
                   "slower than one block per CTA")
        elif occupancy.choose(func, options, loop_plans, "tile", "1x1")[0] > 1 and not options.dynamic_tiles:
            why = "two CTAs per SM already overlap one program's start and end with the other's loop"
        if why:
            return "tile", (f"one program per CTA: {why} (schedule='persistent' copies the dot operand loaded"
                            f"{where(prologue)} before the loop once per tile instead)")
        return "persistent", ("about one CTA per SM, each looping over tiles; the dot operand loaded"
                              f"{where(prologue)} before the loop comes through a ring of its own that the producer "
                              "fills for the next tile while the consumers finish this one")
    if ok and options.schedule == "streamk":
        ok, reason = stream_k.can_stream_k(func, options)
        if ok:
            return "streamk", ("about one CTA per SM, each looping over output tiles in grouped order; where the "
                               "last wave would leave more than an eighth of all the waves' slots idle, the last "
                               "tiles are shared by K iterations, two CTAs adding their partial sums in a workspace "
                               "(schedule='streamk')")
    if ok and (options.schedule == "pingpong" or (options.schedule is None and not options.dynamic_tiles)):
        pingpong, why_not = persistent_tiles.can_pingpong(func, loop_plans, options)
        if pingpong:
            return "pingpong", ("about one CTA per SM; each of the two consumer warp groups computes every other "
                                "output tile of its CTA on its own, their main loops in turn, so one group's "
                                "epilogue runs under the other's main loop" +
                                (" (schedule='pingpong')" if options.schedule else
                                 " (chosen where each group can hold a whole tile's accumulators)"))
        if options.schedule == "pingpong":
            ok, reason = False, why_not
    if not ok:
        if asked:
            raise CompilationError(f"cannot make kernel '{name}' {what}: {reason}", source_location(func),
                                   note="compile with schedule='tile'" if what == "persistent" else
                                   "compile with schedule='persistent' or 'tile'")
        return "tile", f"not persistent because {reason}"
    return "persistent", ("about one CTA per SM, each looping over output tiles in grouped order; the aref ring "
                          "runs across tiles and each epilogue's TMA store overlaps the next tile's main loop" +
                          (" (dynamic_tiles=True: the schedule that takes them)"
                           if options.dynamic_tiles and options.schedule is None else ""))


def _verify_each(options: CompileOptions) -> bool:
    return bool(options.verify_each or options.dump_ir_after_all or os.environ.get("TAWA_VERIFY_EACH") == "1")


def run_pass(p: Pass, module, options: CompileOptions, timings: dict | None = None):
    """One pass: errors the user can act on pass through; anything else is an internal error naming the pass."""
    t0 = time.perf_counter()
    try:
        module = p.run(module, options)
    except InternalCompilerError as e:
        if e.pass_name is None:
            raise InternalCompilerError(e.message.removeprefix("internal compiler error: "), p.name, e.op,
                                        e.location) from e
        raise
    except TawaError:
        raise
    except Exception as e:  # a bug: say where, keep the traceback chained for developers
        raise InternalCompilerError(f"{type(e).__name__}: {e}", p.name) from e
    if timings is not None:
        timings[p.name] = time.perf_counter() - t0
    if options.dump_ir_after_all:
        print(f"// -----// IR Dump After {p.name} //----- //", file=sys.stderr)
        print(module, file=sys.stderr)
    if _verify_each(options):
        verify.verify(module, after=p.name)
    return module


def normalize(module, options: CompileOptions, stop_after: str | None = None, timings: dict | None = None):
    """Run the passes marked `before_decide`, in PIPELINE order: the program `decide` reads. Returns (module,
    whether `stop_after` named one of them)."""
    for p in PIPELINE:
        if p.before_decide:
            module = run_pass(p, module, options, timings)
            if p.name == stop_after:
                return module, True
    return module, False


def run_pipeline(module, options: CompileOptions, plan: Plan, stop_after: str | None = None,
                 timings: dict | None = None, tile_level_only: bool = False):
    """Run the passes the plan selects, in PIPELINE order, optionally stopping after the pass named."""
    for p in PIPELINE:
        if p.before_decide or not p.when(plan) or (tile_level_only and not p.tile_level):
            continue           # (the passes before the decision ran first: `normalize`)
        module = run_pass(p, module, options, timings)
        if p.name == stop_after:
            break
    return module


def compile_source(source: str, filename: str, options: CompileOptions, emit: str = "kernel"):
    """Compile a kernel source. `emit`: "tawa" (frontend output), "mlir" (after the tile-level passes),
    or "kernel" (a CompiledKernel for options.target)."""
    from tawa.frontend import parse_and_lower

    options.validate()
    module = parse_and_lower(source, filename, options.constants)
    if options.dump_ir_after_all:
        print("// -----// IR Dump After frontend //----- //", file=sys.stderr)
        print(module, file=sys.stderr)
    if _verify_each(options):
        verify.verify(module, after="frontend")
    if emit == "tawa":
        return module
    return compile_module(module, options, tile_level_only=(emit == "mlir"))


def compile_module(module, options: CompileOptions, tile_level_only: bool = False, stop_after: str | None = None):
    """Run the pipeline on a tile-level module (from the frontend, or parsed from MLIR text).

    Returns the module when `tile_level_only` or `stop_after` is given, else the `CompiledKernel`."""
    module, stopped = normalize(module, options, stop_after)
    if stopped:
        return module
    plan, notes = decide(module, options)
    # (read on the tile-level module, before the passes rewrite it; only a compiled kernel records them)
    traits = {} if tile_level_only or stop_after else \
        {"uneven_programs": uneven_programs(module), "chained_dots": chained_dots(module),
         "skipping_programs": skipping_programs(module)}
    where = source_location(kernel_info.kernel_function(module))     # for errors of the backend's tools
    # Choices made automatically that ptxas may find too tight are checked below (two CTAs per SM; ping-pong, whose
    # groups each hold a whole tile's accumulators beside their epilogue): keep the input to compile again.
    fallback = None
    if not (tile_level_only or stop_after):
        if plan.ctas_per_sm > 1 and options.ctas_per_sm is None:
            fallback = (dataclasses.replace(options, ctas_per_sm=1), "keeps 1 CTA per SM: at 2, {why}")
        elif plan.warp_specialize and plan.schedule == "pingpong" and options.schedule is None:
            fallback = (dataclasses.replace(options, schedule="persistent"),
                        "shares each tile between its consumer warp groups: under ping-pong, {why}")
        elif plan.uniform_by_choice:
            fallback = (dataclasses.replace(options, warp_specialize=True),
                        "is warp-specialized after all: on the uniform-warp path {why}")
    # The ring depth chosen automatically is estimated before the passes too: where the backend lays out more
    # shared memory than estimated (a layout conversion's scratch), fewer slots are tried.
    fewer_slots = not (tile_level_only or stop_after) and plan.warp_specialize and options.num_buffers is None
    # The consumer lookahead (the next scores' dot issued before this block's softmax) holds a second score tile:
    # where ptxas spills with it, the kernel is compiled again without it, and kept so where that spills nothing.
    lookahead_retry = not (tile_level_only or stop_after) and plan.warp_specialize and \
        options.consumer_lookahead is None and plan.ctas_per_sm == 1
    # A uniform-warp kernel left at the default warps (one warp group) whose tiles ptxas spills heavily is compiled
    # again with two warp groups (each thread holds half of every tile), and kept so where that spills far less.
    warps_retry = not (tile_level_only or stop_after) and not plan.warp_specialize and \
        options.num_warps is None and not plan.uniform_by_choice and plan.target == "cuda" and \
        attrs.NUM_WARPS.get(kernel_info.kernel_function(module)) is None      # (no `@num_warps(n)` either)
    # (with its locations: an error of the second compile points into the source as the first's would)
    retry = module.operation.get_asm(enable_debug_info=True) \
        if fallback or fewer_slots or lookahead_retry or warps_retry else None
    try:
        module = run_pipeline(module, _decided(options, plan), plan, stop_after=stop_after,
                              tile_level_only=tile_level_only)
    except CompilationError as e:
        # The choice's shared memory, estimated before the passes, may fall short of what the backend lays out
        # (a layout conversion's scratch): compile again without the choice rather than refuse the kernel.
        if retry is None or "shared memory" not in e.message:
            raise
        if fallback is not None:
            return _compile_fallback(retry, module.context, fallback, e.message)
        if not fewer_slots or not isinstance(e, SharedMemoryError) or e.ring_depth <= 1:
            raise
        return _compile_with_fewer_slots(retry, module.context, options, e)
    if tile_level_only or stop_after:
        return module
    if plan.target == "cpu":
        info = kernel_info.launch_info(kernel_info.kernel_function(module))
        return CompiledKernel(name=info["name"], target="cpu", params=info["params"], grid=info["grid"],
                              requires=info["requires"],
                              constants=info["constants"], ir=str(module), notes=notes, **traits)
    from tawa.lowering.backend import build_kernel
    try:
        kernel = build_kernel(module)
        why = f"ptxas spilled {kernel.spill_bytes} bytes of registers" if kernel.spill_bytes else ""
        if plan.uniform_by_choice and not why:
            why = occupancy.uniform_residency(kernel)
    except CompilationError as e:
        if fallback is None:
            if e.location is None:
                e.location = where
            raise
        why = e.message
    if fallback is not None and why:
        # Half the register file, or a ping-pong group's share, was too little after all: compile again without.
        return _compile_fallback(retry, module.context, fallback, why)
    info = _kernel_info(module)
    if lookahead_retry and kernel.spill_bytes and info.get("lookahead"):
        without = _without_lookahead(retry, module.context, options, kernel.spill_bytes)
        if without is not None:
            return without
    if warps_retry and (kernel.spill_bytes or 0) > WARPS_RETRY_MIN_SPILL_BYTES and \
            kernel.num_threads == hopper.THREADS_PER_WARP_GROUP:    # (assign-layouts may have given it two already)
        wider = _with_two_warp_groups(retry, module.context, options, kernel.spill_bytes)
        if wider is not None:
            return wider
    if info.get("one_slot_ring"):
        notes = notes + [one_slot_note(kernel.name, info["one_slot_ring"])]
    overlaps = info.get("register_overlaps", [])        # (named)
    if overlaps:
        notes = notes + [f"kernel '{kernel.name}' holds registers to overlap work with the tensor cores: "
                         f"{', '.join(overlaps)} (register_overlap=False leaves them out)"]
    kernel.notes = notes + list(kernel.notes)
    for trait, value in traits.items():
        setattr(kernel, trait, value)
    if plan.uniform_by_choice and kernel.registers is not None:
        # (uniform_residency found two CTAs fit: say so to the launch rules, which weigh waves by it; without
        # ptxas's count the premise is unchecked, and the launch rules treat the kernel as any other)
        kernel.uniform_by_choice, kernel.ctas_per_sm = True, 2
    return kernel


def _without_lookahead(retry: str, context, options: CompileOptions, spilled: int):
    """The kernel compiled again with `consumer_lookahead=False`, if ptxas spills none of it where the compile
    with the lookahead spilled `spilled` bytes (a 64-row attention tile of one consumer warp group, whose lookahead
    holds a second score tile beside the first: 624 bytes against none at 64x256 blocks), else None: where both
    spill, which runs faster is not known here, and the lookahead stays."""
    kernel = _rebuilt(retry, context, dataclasses.replace(options, consumer_lookahead=False))
    if kernel is None or kernel.spill_bytes != 0:
        return None
    kernel.notes = list(kernel.notes) + [
        f"kernel '{kernel.name}' runs its consumer loops without the lookahead (the next block's dot issued before "
        f"this block's math), and so without the schedules built on it (the softmax pipeline, ping-pong between "
        f"consumer groups): with it, ptxas spilled {spilled} bytes of registers, without it none "
        f"(consumer_lookahead=True keeps it)"]
    return kernel


#: Bytes of spill stores and loads of a one-warp-group uniform kernel above which it is compiled again with two. Two
#: warp groups measured (H200, same process): 1.49x on a 128x256 score tile that spilled 1280 bytes and 2.66x on a
#: 16384-wide row that spilled 8508 (284 at 8 warps); but 0.71x, 0.87x and 0.85x where one spilled 168, 88 and 32
#: bytes (RMSNorm of 4 rows, RoPE, a 128x128 GEMM), and level at 348 (a GEMM converting fp8 operands).
WARPS_RETRY_MIN_SPILL_BYTES = 512


def _with_two_warp_groups(retry: str, context, options: CompileOptions, spilled: int):
    """The uniform-warp kernel compiled again with `num_warps=8`, if ptxas spills at most a quarter of the
    `spilled` bytes of the one-warp-group compile, else None. Each thread then holds half of every tile: a
    128x256 f32 score tile takes 128 registers a thread instead of 256 (1280 bytes of spills and serialized wgmmas
    against none). Where eight warps still spill about as much, the tiles are the user's to shrink, and the
    first compile stands."""
    kernel = _rebuilt(retry, context, dataclasses.replace(options, num_warps=8))
    if kernel is None or kernel.spill_bytes is None or kernel.spill_bytes * 4 > spilled:
        return None
    kernel.notes = list(kernel.notes) + [
        f"kernel '{kernel.name}' runs two warp groups (8 warps): with one, ptxas spilled {spilled} bytes of "
        f"registers, with two {kernel.spill_bytes} (num_warps=4 keeps one)"]
    return kernel


def _rebuilt(retry: str, context, options: CompileOptions):
    """An optional second build of the tile-level module `retry` (its text) with other options, or None where
    anything stops it (the first build then stands)."""
    from mlir import ir
    try:
        return compile_module(ir.Module.parse(retry, context), options)
    except TawaError:
        return None


def _compile_fallback(retry: str, context, fallback: tuple, why: str):
    """Compile the tile-level module `retry` (its text) again with the fallback's options, noting why."""
    from mlir import ir
    retry_options, note = fallback
    kernel = compile_module(ir.Module.parse(retry, context), retry_options)
    kernel.notes = list(kernel.notes) + [f"kernel '{kernel.name}' " + note.format(why=why)]
    return kernel


def _compile_with_fewer_slots(retry: str, context, options: CompileOptions, error):
    """Compile the tile-level module `retry` again with the deepest ring's depth lowered one slot at a time, down
    to one; the first that fits is kept (and noted), else the first error stands."""
    from mlir import ir
    for depth in range(error.ring_depth - 1, 0, -1):
        try:
            kernel = compile_module(ir.Module.parse(retry, context), dataclasses.replace(options, num_buffers=depth))
        except SharedMemoryError:
            continue
        kernel.notes = list(kernel.notes) + [
            f"kernel '{kernel.name}' keeps {depth} slots per aref ring: with the {error.ring_depth} chosen "
            f"beforehand, {error.message}"]
        return kernel
    raise error


def one_slot_note(name: str, slot: int) -> str:
    """The note for a pipelined loop whose ring has room for one slot beside the kernel's other tiles."""
    return (f"kernel '{name}' has room for one slot ({slot // 1024} KiB) of its loop's aref ring beside its other "
            f"tiles: the producer copies the next blocks only once the consumers release these, so the copies do "
            f"not overlap the math; smaller blocks (BLOCK_N or BLOCK_K) that leave room for two slots usually run "
            f"faster (attention at head dim 256: 80-key blocks ran 1.2-1.4x 128-key ones, docs/performance.md)")


def _kernel_info(module) -> dict:
    """What `convert-to-nvvm` recorded of the kernel (`tawa.kernel_info`)."""
    import json
    attr = module.operation.attributes
    return json.loads(attr["tawa.kernel_info"].value) if "tawa.kernel_info" in attr else {}


def chained_dots(module) -> bool:
    """Whether a loop's dot takes math on another dot's result of the same iteration (attention), in the
    tile-level module (`occupancy.chains_dots`)."""
    return any(op.name == "scf.for" and occupancy.chains_dots(op)
               for func in kernel_info.kernels(module) for op in walk(func))


def uneven_programs(module) -> bool:
    """Whether some loop with a dot runs a number of iterations that depends on the program (causal attention's
    key loop), in the tile-level module."""
    return any(ws_ir.uneven_dot_loops(func) for func in kernel_info.kernels(module))


def skipping_programs(module) -> bool:
    """Whether some loop with a dot sits under a conditional that some programs skip, in the tile-level module."""
    return any(ws_ir.skipped_dot_loops(func) for func in kernel_info.kernels(module))


def _decided(options: CompileOptions, plan: Plan) -> CompileOptions:
    """The options the passes see: the plan's schedule, cluster and CTAs per SM (aref-insertion sizes the ring
    next to a persistent epilogue's staging and to the CTA's share of shared memory); at two CTAs per SM the
    consumer lookahead is off unless asked for (`tawa.lowering.occupancy`)."""
    lookahead = options.consumer_lookahead
    if plan.ctas_per_sm > 1 and lookahead is None:
        lookahead = False
    # The uniform-warp path taken by choice runs the two warp groups of math the specialized kernel would have had
    # (at head dim 32 one group would hold its 128x128 scores and output in 226 registers a thread: two CTAs of
    # four warps per SM instead of eight)
    warps = options.num_warps or (2 * hopper.WARPS_PER_GROUP if plan.uniform_by_choice else None)
    return dataclasses.replace(options, schedule=plan.schedule if plan.warp_specialize else options.schedule,
                               cluster=plan.cluster, ctas_per_sm=plan.ctas_per_sm, consumer_lookahead=lookahead,
                               num_warps=warps)
