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
            if not NO_DESTINATION.match(op) and dest in regs:
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


@pytest.mark.parametrize("path,options", [
    (SCALE_A, {"BLOCK_N": 256}),                            # persistent, cooperative 128x256 (the launch default)
    (SCALE_A, {"BLOCK_N": 128, "schedule": "tile"}),        # one program per tile
    (REGISTER_A, {}),                                       # ping-pong 128x128
    (REGISTER_A, {"BLOCK_M": 64, "BLOCK_N": 256}),
], ids=["scale-coop256", "scale-tile128", "register-a-pingpong", "register-a-64x256"])
def test_next_a_is_read_under_the_wgmmas_and_never_written_in_flight(path, options):
    kernel = tawa.compile(str(path), cache=False, **options)
    report = [n for n in kernel.compiled.notes if n.startswith("ptxas")]
    assert report and not any(SERIALIZED.search(n) for n in report), report
    assert spill_bytes(kernel) == 0
    code = sass(kernel.compiled.cubin)
    if code is None:
        pytest.skip("cuobjdump/nvdisasm not installed")
    assert HGMMA_RA.search(code), "no wgmma takes A from registers"
    assert in_flight_writes(code) == []
    assert loads_under_wgmma(code) > 0, "the next A is not read while the wgmmas run"
