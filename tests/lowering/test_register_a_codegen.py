"""A dot whose A is computed in registers from its slot (`dot(a * s[:, None], b)`) in a warp-specialized consumer
loop (`to_nvvm/ws_register_a_loop.py`), checked in the SASS: the next iteration's A is read from shared memory
while this iteration's wgmmas run, and no instruction writes a register that an in-flight wgmma reads as its A
before the wait that completes it (ptxas does not know that wgmma reads register operands asynchronously). No
serialized wgmmas, no spills."""
import pathlib
import re

import pytest

import tawa
from ws_support import spill_bytes
from test_ws_gpu_codegen import sass

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCALE_A = ROOT / "tests" / "e2e" / "kernels" / "user" / "gemm_scale_a.tawa"
REGISTER_A = ROOT / "tests" / "e2e" / "kernels" / "gemm_register_a.tawa"
SERIALIZED = re.compile(r"C75\d\d|serializ", re.I)

#: `HGMMA.<shape> Rd, Ra, gdesc[...]`: a wgmma with A in registers Ra..Ra+3.
HGMMA_RA = re.compile(r"HGMMA\.\S+ R\d+, R(\d+), gdesc")
#: An instruction's opcode and first operand (its destination, for the instructions that write a register).
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Za-z0-9_.]*)\s*([^;]*);")
#: Opcodes whose first register operand is read, not written.
NO_DESTINATION = re.compile(r"^(ST|STS|STG|STL|RED|BAR|BRA|SYNCS|WARPGROUP|HGMMA|UTMA|MEMBAR|FENCE|EXIT|NOP|CALL|RET)")


def in_flight_writes(code: str) -> list:
    """(the wgmma's A register, the instruction writing it) for every instruction between a register-A wgmma and
    the next `WARPGROUP.DEPBAR.LE gsb0, 0x0` (in program order) that writes one of that wgmma's A registers."""
    lines = [INSTRUCTION.match(line) for line in code.splitlines()]
    lines = [m for m in lines if m]
    bad = []
    for i, m in enumerate(lines):
        a = HGMMA_RA.match(f"{m.group(1)} {m.group(2)}")
        if not a:
            continue
        regs = {f"R{int(a.group(1)) + j}" for j in range(4)}
        for later in lines[i + 1:]:
            op, operands = later.group(1), later.group(2)
            if op.startswith("WARPGROUP.DEPBAR") and operands.strip().endswith("0x0"):
                break
            dest = operands.split(",")[0].strip().split(".")[0]
            if NO_DESTINATION.match(op) or not re.fullmatch(r"R\d+", dest):
                continue
            # a wide result writes the registers after its first too (LDS.64, LDG.E.128, IMAD.WIDE)
            width = 4 if ".128" in op else 2 if (".64" in op or ".WIDE" in op) else 1
            written = {f"R{int(dest[1:]) + j}" for j in range(width)}
            if written & regs:
                bad.append((dest, f"{op} {operands.strip()}"))
    return bad


def loads_under_wgmma(code: str) -> int:
    """Shared loads between the last register-A wgmma of a group and the wait that completes it (the next A)."""
    lines = [m for m in (INSTRUCTION.match(line) for line in code.splitlines()) if m]
    count = 0
    for i, m in enumerate(lines):
        if HGMMA_RA.match(f"{m.group(1)} {m.group(2)}") and "gsb0" in m.group(2):
            for later in lines[i + 1:]:
                if later.group(1).startswith("WARPGROUP.DEPBAR"):
                    break
                count += later.group(1).startswith("LDS")
    return count


def test_the_checker_finds_a_write_into_an_inflight_a_register():
    code = """
        /*0100*/                   HGMMA.64x128x16.F32.BF16 R24, R88, gdesc[UR16].tnspB, R24, gsb0 ;
        /*0110*/                   LDS.U16 R120, [R4+0x400] ;
        /*0120*/                   HMUL2.BF16_V2 R90, R120, R3.H0_H0 ;
        /*0130*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0140*/                   HMUL2.BF16_V2 R89, R121, R3.H0_H0 ;
    """
    assert in_flight_writes(code) == [("R90", "HMUL2.BF16_V2 R90, R120, R3.H0_H0")]
    assert loads_under_wgmma(code) == 1
    wide = code.replace("HMUL2.BF16_V2 R90, R120, R3.H0_H0", "LDS.64 R87, [R4+0x40]")
    assert in_flight_writes(wide) == [("R87", "LDS.64 R87, [R4+0x40]")]


@pytest.mark.parametrize("path,options,ahead", [
    (SCALE_A, {"BLOCK_N": 256}, True),                      # persistent, cooperative 128x256 (the launch default)
    (SCALE_A, {"BLOCK_N": 128, "schedule": "tile"}, True),  # one program per tile
    (REGISTER_A, {"BLOCK_M": 64, "BLOCK_N": 256}, True),    # ping-pong, 64 rows a group
    # where three fragment sets do not fit beside the accumulators, the dot waits for its wgmmas: three consumer
    # groups (160 registers each; it spilled 24 bytes), 128 accumulators and 32 fragment registers a thread
    (REGISTER_A, {"BLOCK_M": 192, "BLOCK_N": 128}, False),
    (REGISTER_A, {"BLOCK_N": 128, "schedule": "pingpong"}, False),
    (SCALE_A, {"BLOCK_M": 256, "BLOCK_N": 128}, False),
], ids=["scale-coop256", "scale-tile128", "register-a-pp64x256", "register-a-192x128", "register-a-pp128",
        "scale-256x128"])
def test_next_a_is_read_under_the_wgmmas_and_never_written_in_flight(path, options, ahead):
    kernel = tawa.compile(str(path), cache=False, **options)
    report = [n for n in kernel.compiled.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report
    assert spill_bytes(kernel) == 0
    code = sass(kernel.compiled.cubin)
    if code is None:
        pytest.skip("cuobjdump/nvdisasm not installed")
    assert HGMMA_RA.search(code), "no wgmma takes A from registers"
    assert in_flight_writes(code) == []
    assert (loads_under_wgmma(code) > 0) == ahead, "the next A is read under the wgmmas only where it fits"


#: A chains that differ an iteration ahead: the loop's index, and a value carried by the loop.
INDEX_CHAIN = REGISTER_A.read_text().replace("acc = dot((a * 2.0).to(bf16), b, acc)",
                                             "acc = dot((a * (k + 1)).to(bf16), b, acc)")
CARRIED_CHAIN = REGISTER_A.read_text().replace("    acc = zeros((BLOCK_M, BLOCK_N), f32)\n",
                                               "    acc = zeros((BLOCK_M, BLOCK_N), f32)\n    sc = 1.0\n") \
    .replace("acc = dot((a * 2.0).to(bf16), b, acc)", "acc = dot((a * sc).to(bf16), b, acc)\n        sc = 2.0")


@pytest.mark.parametrize("source", [INDEX_CHAIN, CARRIED_CHAIN], ids=["loop-index", "carried-value"])
@pytest.mark.parametrize("options", [{"BLOCK_N": 256}, {"schedule": "persistent"}, {"schedule": "tile"}])
def test_a_chain_on_the_loop_index_or_a_carried_value_waits(source, options):
    """The next iteration's A cannot be computed ahead from a value the next iteration changes: such a loop keeps
    its dot waiting for its wgmmas (it was taken, and the compiler failed: "value used before it was lowered")."""
    assert "(k + 1)" in source or "sc = 2.0" in source
    kernel = tawa.compile(source, cache=False, **options)
    assert spill_bytes(kernel) == 0
    code = sass(kernel.compiled.cubin)
    if code is None:
        pytest.skip("cuobjdump/nvdisasm not installed")
    assert in_flight_writes(code) == [] and loads_under_wgmma(code) == 0


@pytest.mark.parametrize("options", [{}, {"BLOCK_N": 256}, {"schedule": "tile"}], ids=["auto", "n256", "tile"])
def test_an_fp8_a_is_read_two_bytes_a_load(options):
    """An fp8 A converted to bf16 in registers: wgmma's A layout holds pairs of consecutive K elements, read as one
    2-byte load each (`shape._row_runs`), not a byte at a time (112 `ld.shared.b8` a thread before)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "e2e" / "kernels" / "user" / "gemm_fp8_a.tawa"
    ptx = tawa.compile(str(path), cache=False, **options).ptx
    assert not re.search(r"\bld\.shared\.(u8|b8|s8)\b", ptx)
    assert re.search(r"\bld\.shared\.(b16|v2\.b8|u16)\b", ptx)
