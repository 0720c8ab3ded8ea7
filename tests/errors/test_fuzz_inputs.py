"""Fuzzing `tawac`: no input produces a Python traceback.

A seeded (deterministic) fuzzer feeds `tawac` random byte files (invalid UTF-8, NUL bytes, very long lines) and
mutations of the examples (lines deleted, duplicated or swapped; characters and tokens deleted or inserted;
indentation changed; odd `-D NAME=VALUE` constants). Most cases run `tawa.cli.main` in-process with
`--emit mlir` (tile level, fast), a subset with `--emit ptx`, and a handful as real `tawac` subprocesses.

The one acceptance rule: exit status 0 (it compiled), or exit status 1 or 2 with a clean error on stderr
(`error:` present, no `Traceback`, no `internal compiler error`: an internal compiler error is a bug too).

`TAWA_FUZZ_SEED=N` / `TAWA_FUZZ_SCALE=K` (environment) run other seeds / K times as many cases, for a longer
hunt; the default is what CI runs. Inputs that once crashed the compiler are kept below as regression cases.
"""
from __future__ import annotations

import os
import pathlib
import random
import subprocess
import sys
import traceback

import pytest

from tawa.cli import main as tawac

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tawa"))
EXAMPLE_TEXT = {p.name: p.read_text(encoding="utf-8") for p in EXAMPLES}

SEED = int(os.environ.get("TAWA_FUZZ_SEED", "20261122"))
SCALE = max(1, int(os.environ.get("TAWA_FUZZ_SCALE", "1")))

N_BYTES = 60 * SCALE           # random byte files
N_MUTANTS = 220 * SCALE        # mutated examples, --emit mlir
N_DEFINES = 30 * SCALE         # odd -D values on unmutated examples, --emit mlir
N_PTX = 30 * SCALE             # mutated examples (and odd -D values), --emit ptx
N_SUBPROCESS = 4               # real `tawac` processes

#: Tokens inserted by the mutator.
TOKENS = ["(", ")", ":", ",", "[", "]", "[None, :]", "0", "-1", "1", "2**40", "1e400", "-1e400", "0.5",
          "1e-400", "9" * 40, "0x10", "x", "acc", "pid_m", "BLOCK_M", "M", "K", "f32", "bf16", "f8e4m3", "i32",
          "const", "def", "if", "else", "for", "in", "range", "return", "while", "and", "or", "not", "None",
          "True", "lambda", "@grid(1)", "load", "store", "dot", "zeros", "program_id(0)", "inf", "-inf", "nan",
          "=", "==", "+", "-", "*", "/", "//", "%", "**", "<", "<=", "&", "|", "~", ".T", ".to(f32)", ".to(i8)",
          "\\", "#", "'", '"', ";", "\t", "\n", "    ", "@", "..."]
#: Odd values for -D NAME=VALUE.
ODD_VALUES = ["0", "-1", "1", "3", "7", "2**40", "1099511627776", "-128", "1e400", "-1e400", "inf", "nan", "0.5",
              "1e-400", "9" * 30, "", " ", "bf16", "f32", "i1", "f8e5m2", "i64", "const", "x", "None", "True",
              "=", "1=2", "💥", "\x01", "128.0", "-0", "0x80", "65536", "4096", "2", "16", "1024"]
CONST_NAMES = ["BLOCK_M", "BLOCK_N", "BLOCK_K", "HEAD_DIM", "CAUSAL", "DTYPE", "M", "N", "K", "S", "H", "HKV",
               "sm_scale", "NOPE", "", "1X", "A"]


def acceptable(status, err: str) -> str | None:
    """Why (status, stderr) breaks the acceptance rule, or None if it is fine."""
    if "Traceback" in err:
        return "a traceback on stderr"
    if "internal compiler error" in err:
        return "an internal compiler error"
    if status == 0:
        return None
    if status in (1, 2):
        return None if "error:" in err else f"exit status {status} without 'error:' on stderr"
    return f"exit status {status!r}"


def run_inprocess(capsys, path: pathlib.Path, args: list[str]) -> tuple[object, str]:
    """(exit status, stderr) of `tawac path *args` in this process; an escaping exception is a traceback."""
    capsys.readouterr()
    try:
        status = tawac([str(path), *args])
    except SystemExit as e:             # argparse's usage errors
        status = e.code
    except BaseException:               # noqa: BLE001 -- exactly what this test looks for
        return "exception", capsys.readouterr().err + "\nTraceback (in-process):\n" + traceback.format_exc()
    return status, capsys.readouterr().err


# --- generators -----------------------------------------------------------------------------------------------

def random_bytes(rng: random.Random) -> bytes:
    kind = rng.randrange(7)
    n = rng.choice([0, 1, 2, 10, 100, 1000, 5000])
    if kind == 0:       # anything
        return bytes(rng.randrange(256) for _ in range(n))
    if kind == 1:       # printable ASCII with newlines
        return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz0123456789 ()[]:,.=+-*/\n\t#@_") for _ in range(n))
    if kind == 2:       # an example with invalid UTF-8 or a NUL byte spliced in
        text = bytearray(rng.choice(list(EXAMPLE_TEXT.values())).encode())
        pos = rng.randrange(len(text) + 1)
        text[pos:pos] = rng.choice([b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x80\x80"])
        return bytes(text)
    if kind == 3:       # a very long line
        unit = rng.choice([b"x", b"(", b"[", b"1+", b"a, ", b" ", b"\t", b"-", b"not ", b"acc.T"])
        body = unit * rng.choice([1000, 20000, 100000])
        head = rng.choice([b"", b"@grid(1)\ndef k(A: f32[M]):\n    x = ", b"x = "])
        return head + body + b"\n"
    if kind == 4:       # NUL bytes and control characters
        return bytes(rng.choice([0, 1, 7, 8, 11, 12, 13, 27, 127, 10, 32, 97]) for _ in range(n))
    if kind == 5:       # valid but unusual UTF-8 (BOM, non-ASCII identifiers, line separators)
        pieces = ["\ufeff", "é", "π", "\u2028", "\u0085", "\r", "\r\n", "\x0c", "𝔸", "x", "=", "1", "\n", " "]
        return "".join(rng.choice(pieces) for _ in range(max(n // 4, 1))).encode("utf-8")
    # deep nesting
    depth = rng.choice([50, 500, 5000])
    opener, closer = rng.choice([("(", ")"), ("[", "]"), ("-", ""), ("not ", ""), ("(", "")])
    return (f"@grid(1)\ndef k(A: f32[M]):\n    x = {opener * depth}1{closer * depth}\n").encode()


def mutate(rng: random.Random, text: str) -> str:
    """Apply 1-3 random mutations to kernel source text."""
    for _ in range(rng.choice([1, 1, 2, 3])):
        lines = text.split("\n")
        op = rng.randrange(9)
        i = rng.randrange(len(lines))
        if op == 0:                       # delete a line
            del lines[i]
        elif op == 1:                     # duplicate a line
            lines.insert(i, lines[i])
        elif op == 2:                     # swap two lines
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3:                     # re-indent a line
            stripped = lines[i].lstrip(" ")
            lines[i] = rng.choice(["", " ", "  ", "    ", "        ", "\t", "   ", " " * 12]) + stripped
        else:
            text = "\n".join(lines)
            pos = rng.randrange(len(text) + 1)
            if op == 4:                   # delete characters
                text = text[:pos] + text[pos + rng.choice([1, 1, 2, 5]):]
            elif op == 5:                 # insert a token
                text = text[:pos] + rng.choice(TOKENS) + text[pos:]
            elif op == 6:                 # replace a number with another
                nums = [k for k, c in enumerate(text) if c.isdigit() and (k == 0 or not text[k - 1].isalnum())]
                if nums:
                    k = rng.choice(nums)
                    end = k
                    while end < len(text) and (text[end].isalnum() or text[end] == "."):
                        end += 1
                    text = text[:k] + rng.choice(["0", "-1", "1", "3", "2**40", "1e400", "4096", "65536",
                                                  "0.0", "1023", "9" * 25, "-0", "16"]) + text[end:]
            elif op == 7:                 # replace an identifier with another word
                words = [k for k, c in enumerate(text) if (c.isalpha() or c == "_")
                         and (k == 0 or not (text[k - 1].isalnum() or text[k - 1] == "_"))]
                if words:
                    k = rng.choice(words)
                    end = k
                    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                        end += 1
                    text = text[:k] + rng.choice(TOKENS[7:46]) + text[end:]
            else:                         # insert a random character
                text = text[:pos] + rng.choice("()[]{}:,.;=+-*/%<>!&|^~@#'\"\\\t \n0a_é\x00") + text[pos:]
            continue
        text = "\n".join(lines)
    return text


#: Compile-option flags with odd values (only the PTX cases use them: the options act below the tile level).
ODD_FLAGS = [["--num-buffers", "0"], ["--num-buffers", "1"], ["--num-buffers", "-3"], ["--num-buffers", "99"],
             ["--num-stages", "0"], ["--num-stages", "1"], ["--num-stages", "-1"], ["--num-stages", "9999999999"],
             ["--num-warps", "5"], ["--num-warps", "8"], ["--consumer-registers", "0"],
             ["--consumer-registers", "1000"], ["--producer-registers", "24"], ["--num-consumer-groups", "3"],
             ["--num-consumer-groups", "2"], ["--warp-specialize", "on"], ["--warp-specialize", "off"],
             ["--consumer-pingpong", "on"], ["--consumer-lookahead", "on"], ["--target", "cpu"],
             ["--target", "gpu"], ["--num-buffers", "x"], ["--verify-each"]]


def odd_defines(rng: random.Random) -> list[str]:
    out = []
    for _ in range(rng.choice([1, 1, 2])):
        form = rng.randrange(10)
        name, value = rng.choice(CONST_NAMES), rng.choice(ODD_VALUES)
        out += ["-D", name if form == 0 else f"{name}={value}"]   # form 0: no '=' at all
    return out


def _cases():
    rng = random.Random(SEED)
    cases = []
    for n in range(N_BYTES):
        cases.append((f"bytes{n}", random_bytes(rng), ["--emit", "mlir"]))
    names = sorted(EXAMPLE_TEXT)
    for n in range(N_MUTANTS):
        name = rng.choice(names)
        args = ["--emit", "mlir"] + (odd_defines(rng) if rng.random() < 0.15 else [])
        cases.append((f"mutant{n}-{name}", mutate(rng, EXAMPLE_TEXT[name]).encode("utf-8", "surrogatepass"), args))
    for n in range(N_DEFINES):
        name = rng.choice(names)
        cases.append((f"define{n}-{name}", EXAMPLE_TEXT[name].encode(), ["--emit", "mlir"] + odd_defines(rng)))
    for n in range(N_PTX):
        name = rng.choice(names)
        if rng.random() < 0.7:
            data, args = mutate(rng, EXAMPLE_TEXT[name]).encode("utf-8", "surrogatepass"), ["--emit", "ptx"]
        else:
            data, args = EXAMPLE_TEXT[name].encode(), ["--emit", "ptx"] + odd_defines(rng)
        if rng.random() < 0.4:
            args += rng.choice(ODD_FLAGS)
        cases.append((f"ptx{n}-{name}", data, args))
    return cases


#: Minimised inputs that once crashed `tawac` (or made an internal compiler error): (id, source, args).
_GEMM = EXAMPLE_TEXT["gemm.tawa"].encode()
REGRESSIONS: list[tuple[str, bytes, list[str]]] = [
    # A constant beyond 64 bits reached ir.IntegerAttr.get (TypeError) when recorded in tawa.constants.
    ("define_beyond_i64", _GEMM, ["--emit", "mlir", "-D", "BLOCK_N=99999999999999999999"]),
    ("default_beyond_i64", _GEMM.replace(b"BLOCK_K: const = 64", b"BLOCK_K: const = 99999999999999999999"),
     ["--emit", "mlir"]),
    # ... and a literal tensor dim beyond 64 bits, in the tawa.params attribute.
    ("dim_beyond_i64", _GEMM.replace(b"A: DTYPE[M, K]", b"A: DTYPE[M, 99999999999999999999]"), ["--emit", "mlir"]),
]


def _check(capsys, tmp_path, cases):
    failures = []
    for case_id, data, args in cases:
        path = tmp_path / f"{case_id}.tawa"
        path.write_bytes(data)
        status, err = run_inprocess(capsys, path, args)
        why = acceptable(status, err)
        if why:
            failures.append(f"--- {case_id}: tawac {path.name} {' '.join(args)}: {why}\n"
                            f"input: {data[:400]!r}\nstderr:\n{err[-3000:]}")
    assert not failures, f"{len(failures)} of {len(cases)} fuzz inputs broke the rule:\n" + "\n".join(failures)


def test_fuzz_inputs_inprocess(capsys, tmp_path):
    _check(capsys, tmp_path, _cases())


def test_fuzz_regressions(capsys, tmp_path):
    _check(capsys, tmp_path, REGRESSIONS)
    for case_id, data, args in REGRESSIONS:     # and each is a located error, not a silent success
        path = tmp_path / f"{case_id}.tawa"
        status, err = run_inprocess(capsys, path, args)
        assert status == 1 and "does not fit in 64 bits" in err and f"{path}:" in err, (case_id, status, err)


def test_fuzz_subprocess(tmp_path):
    """A handful of real `tawac` processes: no traceback reaches the terminal either."""
    rng = random.Random(SEED + 1)
    cases = [("nul", b"\x00" * 10, ["--emit", "mlir"]),
             ("bad_utf8", b"@grid(1)\ndef k(A: f32[M]):\n    x = \xff\n", ["--emit", "ptx"])]
    while len(cases) < N_SUBPROCESS:
        name = rng.choice(sorted(EXAMPLE_TEXT))
        cases.append((f"mutant{len(cases)}", mutate(rng, EXAMPLE_TEXT[name]).encode(),
                      ["--emit", "mlir"] + odd_defines(rng)))
    for case_id, data, args in cases:
        path = tmp_path / f"{case_id}.tawa"
        path.write_bytes(data)
        proc = subprocess.run([sys.executable, "-m", "tawa.cli", str(path), *args], capture_output=True,
                              text=True, errors="replace", timeout=120, cwd=ROOT)
        why = acceptable(proc.returncode, proc.stderr)
        assert why is None, f"{case_id}: tawac {' '.join(args)}: {why}\ninput: {data[:400]!r}\n{proc.stderr}"
