"""A deterministic generator of Tawa kernels for the fuzz corpus: `generate(seed)` -> `Program`.

Every program comes with an independent numpy model (float64 math, with explicit bf16/f16/f32 rounding through
ml_dtypes wherever the program computes in or converts to that dtype) and with the shapes of its arguments.
Only constructs the GPU backend supports are generated (docs/language.md, "What the GPU backend supports today"),
so every program must also compile for sm_90a.

Families (seed % 4 picks one, the rest of the choices come from `random.Random(seed)`):
  ew      elementwise chains over a 2-D grid: + - * maximum minimum where exp exp2 abs sqrt sigmoid, .to()
          round trips, row and column vector broadcasts (`r[None, :]`, `c[:, None]`), a run-time f32 scalar
  reduce  a chain, masked with `where(cols < N, ...)`, reduced with sum/max/min over axis 1 or 0, the reduction
          stored (1-D) and optionally broadcast back and stored (2-D)
  dot     a ragged K loop of `dot` on bf16/f16 tiles (B row-major or a transposed load), f32 accumulator,
          BLOCK_M 64/128, BLOCK_N 64/128, BLOCK_K 64, an elementwise epilogue (bias vectors, scalar, .to())
  dotred  a dot whose whole N fits one tile, then a masked row reduction of the accumulator (and the tile)

Shapes are ragged (M anything, N and K multiples of 8 that are not multiples of the tiles, mostly), every tensor
row a multiple of 16 bytes (TMA-legal); 1-D tensors of length M only occur with M a multiple of 8.

Tolerances are derived from a bound on each value's magnitude (B) and on its absolute error against exact math (E),
propagated through the chain together with each rounding step.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

import ml_dtypes
import numpy as np

N_PROGRAMS = 240
FAMILIES = ["ew", "reduce", "dot", "dotred"]

NP_DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
BYTES = {"f32": 4, "bf16": 2, "f16": 2}
# rounding unit per dtype (f32 is loosened: the GPU's exp/exp2/sqrt/division are approximate to a few ulps)
EPS = {"f32": 2.0 ** -20, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}
# literals exactly representable in every float dtype
LITERALS = ["0.5", "0.25", "0.75", "1.5", "2.0", "3.0", "1.25", "0.125"]
BOUND_CAP = 48.0


def rnd(x, dtype: str):
    """Round float64 values to `dtype` and back (what storing into / computing in that dtype does)."""
    return np.asarray(x, dtype=np.float64).astype(NP_DTYPES[dtype]).astype(np.float64)


@dataclass
class Arg:
    name: str
    kind: str                 # "tensor" or "scalar"
    dtype: str
    shape: tuple = ()
    output: bool = False
    low: float = -2.0         # input range (uniform)
    high: float = 2.0
    dimnames: tuple = ()      # shape symbols in the source


@dataclass
class Program:
    seed: int
    family: str
    name: str
    source: str
    args: list
    model: Callable           # dict name -> float64 array (inputs, as stored) -> dict output name -> float64 array
    tol: dict                 # output name -> () -> absolute tolerance (evaluated while the model runs)
    notes: list = field(default_factory=list)

    def inputs(self, rng: np.random.Generator | None = None) -> dict:
        """Fresh inputs (numpy arrays in their storage dtypes; f32 scalars as np.float32) and NaN-filled outputs."""
        rng = rng or np.random.default_rng(self.seed)
        out = {}
        for a in self.args:
            if a.kind == "scalar":
                out[a.name] = np.float32(rng.choice([0.5, 0.75, 1.5, -1.25, 2.0]))
            elif a.output:
                out[a.name] = np.full(a.shape, np.nan, NP_DTYPES[a.dtype])
            else:
                out[a.name] = rng.uniform(a.low, a.high, a.shape).astype(NP_DTYPES[a.dtype])
        return out

    def reference(self, values: dict) -> tuple:
        """(outputs, tolerances): the numpy model's outputs (float64) and an absolute tolerance per output, from
        the error bounds propagated through the chain with the actual magnitudes of these inputs."""
        env = {k: (np.asarray(v).astype(np.float64) if np.ndim(v) else float(v)) for k, v in values.items()}
        outs = self.model(env)
        _Ctx.env = env
        try:
            tols = {k: float(t()) for k, t in self.tol.items()}
        finally:
            _Ctx.env = None
        return outs, tols

    @property
    def outputs(self):
        return [a for a in self.args if a.output]


# ---------------------------------------------------------------------------------------------------------------
# expression chains


class _Ctx:
    env = None                # while a model runs: its env, so that Val.B / Val.E are the actual bounds


class Val:
    """A value of a chain: its source, its model (env -> float64 array, already rounded to the value's dtype),
    its broadcast shape ("full", "row" = [1, BN], "col" = [BM, 1], "scalar"), a bound B on |value| and a bound E
    on its absolute error against exact math. At generation time B is the static bound (it steers the choice of
    operations and keeps values bounded); while a model runs (_Ctx.env set) B is the actual max |value| and E is
    the error rule evaluated on the operands' actual bounds, which gives tight tolerances."""

    def __init__(self, src, fn, shape, B, E):
        self.src, self.fn, self.shape, self.B0 = src, fn, shape, B
        self.Efn = E if callable(E) else (lambda E=E: E)

    @property
    def B(self):
        env = _Ctx.env
        if env is None:
            return self.B0
        key = ("B", id(self))
        if key not in env:
            env[key] = float(np.max(np.abs(self.fn(env)))) if np.size(self.fn(env)) else 0.0
        return env[key]

    @property
    def E(self):
        env = _Ctx.env
        if env is None:
            return self.Efn()
        key = ("E", id(self))
        if key not in env:
            env[key] = self.Efn()
        return env[key]


def _join(a: str, b: str) -> str:
    if a == b:
        return a
    if "scalar" in (a, b):
        return b if a == "scalar" else a
    return "full"


class Chain:
    """Emits `tN = ...` statements in one compute dtype and builds the matching model."""

    def __init__(self, rng: random.Random, cd: str, prefix: str = "t"):
        self.rng, self.cd, self.prefix = rng, cd, prefix
        self.lines: list[str] = []
        self.steps: list[tuple[str, Callable]] = []   # (name, fn(env)) evaluated in order into env
        self.n = 0

    def emit(self, expr: str, fn: Callable, shape: str, B: float, E: float) -> Val:
        name = f"{self.prefix}{self.n}"
        self.n += 1
        self.lines.append(f"{name} = {expr}")
        self.steps.append((name, fn))
        return Val(name, lambda env, name=name: env[name], shape, B, E)

    def run(self, env: dict) -> None:
        for name, fn in self.steps:
            env[name] = fn(env)

    def eps(self) -> float:
        return EPS[self.cd]

    # -- operations -------------------------------------------------------------------------------------------
    def binary(self, a: Val, b: Val) -> Val:
        r, cd, eps = self.rng, self.cd, self.eps()
        ops = ["+", "-", "maximum", "minimum"]
        if a.B * b.B <= BOUND_CAP:
            ops += ["*", "*"]
        if a.B + b.B > BOUND_CAP:
            ops = ["maximum", "minimum"] + (["*"] if a.B * b.B <= BOUND_CAP else [])
        op = r.choice(ops)
        shape = _join(a.shape, b.shape)
        fa, fb = a.fn, b.fn
        if op == "+":
            return self.emit(f"{a.src} + {b.src}", lambda e: rnd(fa(e) + fb(e), cd), shape, a.B + b.B, lambda:
                             a.E + b.E + (a.B + b.B) * eps)
        if op == "-":
            return self.emit(f"{a.src} - {b.src}", lambda e: rnd(fa(e) - fb(e), cd), shape, a.B + b.B, lambda:
                             a.E + b.E + (a.B + b.B) * eps)
        if op == "*":
            return self.emit(f"{a.src} * {b.src}", lambda e: rnd(fa(e) * fb(e), cd), shape, a.B * b.B, lambda:
                             a.E * b.B + b.E * a.B + a.E * b.E + a.B * b.B * eps)
        npf = np.maximum if op == "maximum" else np.minimum
        return self.emit(f"{op}({a.src}, {b.src})", lambda e: npf(fa(e), fb(e)), shape, max(a.B, b.B), lambda:
                         max(a.E, b.E))

    def literal_op(self, a: Val) -> Val:
        r, cd, eps = self.rng, self.cd, self.eps()
        lit = r.choice(LITERALS)
        c = float(lit)
        fa = a.fn
        op = r.choice(["*", "+", "-", "rsub"] if a.B * c <= BOUND_CAP else ["+", "-", "rsub"])
        if op == "*":
            return self.emit(f"{a.src} * {lit}", lambda e: rnd(fa(e) * c, cd), a.shape, a.B * c, lambda:
                             a.E * c + a.B * c * eps)
        if op == "+":
            return self.emit(f"{a.src} + {lit}", lambda e: rnd(fa(e) + c, cd), a.shape, a.B + c, lambda:
                             a.E + (a.B + c) * eps)
        if op == "-":
            return self.emit(f"{a.src} - {lit}", lambda e: rnd(fa(e) - c, cd), a.shape, a.B + c, lambda:
                             a.E + (a.B + c) * eps)
        return self.emit(f"{lit} - {a.src}", lambda e: rnd(c - fa(e), cd), a.shape, a.B + c, lambda: a.E + (a.B + c) * eps)

    def unary(self, a: Val) -> Val:
        r, cd, eps = self.rng, self.cd, self.eps()
        fa = a.fn
        ops = ["abs", "neg", "expneg", "exp2", "sqrt", "sigmoid", "clamp", "exp"]
        if cd == "f32":
            ops += ["roundtrip"]
        else:
            ops += ["viaf32"]
        op = r.choice(ops)
        if op == "abs":
            return self.emit(f"abs({a.src})", lambda e: np.abs(fa(e)), a.shape, a.B, lambda: a.E)
        if op == "neg":
            return self.emit(f"-{a.src}", lambda e: -fa(e), a.shape, a.B, lambda: a.E)
        if op == "expneg":      # exp of a non-positive value: in (0, 1]
            return self.emit(f"exp(-abs({a.src}))", lambda e: rnd(np.exp(-np.abs(fa(e))), cd), a.shape, 1.0, lambda:
                             a.E + 2 * eps)
        if op == "exp":         # exp of a value clamped to <= 2
            return self.emit(f"exp(minimum({a.src}, 2.0))", lambda e: rnd(np.exp(np.minimum(fa(e), 2.0)), cd),
                             a.shape, math.exp(2), lambda: a.E * math.exp(2) + 2 * math.exp(2) * eps)
        if op == "exp2":        # exp2 of a value clamped to <= 3
            return self.emit(f"exp2(minimum({a.src}, 3.0))", lambda e: rnd(np.exp2(np.minimum(fa(e), 3.0)), cd),
                             a.shape, 8.0, lambda: a.E * 8 * math.log(2) + 16 * eps)
        if op == "sqrt":        # sqrt of a value >= 1
            return self.emit(f"sqrt(abs({a.src}) + 1.0)", lambda e: rnd(np.sqrt(rnd(np.abs(fa(e)) + 1.0, cd)), cd),
                             a.shape, math.sqrt(a.B + 1), lambda: 0.5 * (a.E + (a.B + 1) * eps) + math.sqrt(a.B + 1) * eps)
        if op == "sigmoid":     # expanded to exp by the frontend: a few roundings in the compute dtype
            def sig(e):
                x = fa(e)
                return 1.0 / (1.0 + np.exp(-x))
            return self.emit(f"sigmoid({a.src})", sig, a.shape, 1.0, lambda: 0.25 * a.E + 6 * eps)
        if op == "clamp":
            return self.emit(f"minimum(maximum({a.src}, -4.0), 4.0)", lambda e: np.clip(fa(e), -4.0, 4.0), a.shape,
                             min(a.B, 4.0), lambda: a.E)
        if op == "roundtrip":   # f32 -> bf16/f16 -> f32
            mid = r.choice(["bf16", "f16"]) if a.B < 1000 else "bf16"
            return self.emit(f"{a.src}.to({mid}).to(f32)", lambda e: rnd(fa(e), mid), a.shape, a.B, lambda:
                             a.E + a.B * EPS[mid])
        # viaf32: a bf16/f16 value computed on in f32, then rounded back
        return self.emit(f"(exp(-abs({a.src}.to(f32))) * 2.0).to({cd})",
                         lambda e: rnd(2.0 * np.exp(-np.abs(fa(e))), cd), a.shape, 2.0, lambda:
                         2 * a.E + 2 * eps + 2 * EPS["f32"])

    def where(self, cond_src: str, cond_fn: Callable, a: Val, b: Val) -> Val:
        fa, fb = a.fn, b.fn
        return self.emit(f"where({cond_src}, {a.src}, {b.src})", lambda e: np.where(cond_fn(e), fa(e), fb(e)),
                         _join(a.shape, b.shape), max(a.B, b.B), lambda: max(a.E, b.E))

    def grow(self, pool: list, n_ops: int, conds: list) -> Val:
        """Apply n_ops random operations, operands drawn from the pool (recent values preferred); the result is
        a full tile."""
        r = self.rng
        tiles = [v for v in pool if v.shape != "scalar"]
        cur = r.choice(tiles)
        for _ in range(n_ops):
            kind = r.choices(["binary", "unary", "literal", "where"], [5, 3, 2, 1 if conds else 0])[0]
            other = r.choice(pool)
            if kind == "binary":
                if other.shape == "scalar" and cur.shape == "scalar":
                    other = r.choice(tiles)
                a, b = (cur, other) if r.random() < 0.6 else (other, cur)
                cur = self.binary(a, b)
            elif kind == "unary":
                cur = self.unary(cur)
            elif kind == "literal":
                cur = self.literal_op(cur)
            else:
                csrc, cfn = r.choice(conds)
                a, b = (cur, other) if r.random() < 0.5 else (other, cur)
                if a.shape == "scalar" and b.shape == "scalar":
                    b = r.choice(tiles)
                cur = self.where(csrc, cfn, a, b)
            pool.append(cur)
            tiles.append(cur)
        if cur.shape != "full":
            fulls = [v for v in pool if v.shape == "full"]
            cur = self.binary(cur, r.choice(fulls))
            if cur.shape != "full":
                cur = self.emit(f"{cur.src} + {r.choice(fulls).src}", None, "full", 0, lambda: 0)  # unreachable guard
        return cur


def _to(src: str, frm: str, to: str) -> str:
    return src if frm == to else f"{src}.to({to})"


def _ragged(r: random.Random, tile: int, multiple: int, lo: int = 1, max_tiles: int = 3) -> int:
    """A ragged extent: a multiple of `multiple`, mostly not a multiple of `tile`."""
    while True:
        n = r.randint(max(lo, 1), tile * max_tiles)
        n = max(multiple, (n // multiple) * multiple)
        if n % tile or r.random() < 0.1:
            return n


def _store_cast(chain: Chain, v: Val, out_dt: str):
    """Source and model of storing v (in chain.cd) into a tensor of out_dt, and the final error bound."""
    fn = v.fn
    E = lambda: v.E + (v.B * EPS[out_dt] if out_dt != chain.cd and EPS[out_dt] > EPS[chain.cd] else 0)
    return _to(v.src, chain.cd, out_dt), (lambda e: rnd(fn(e), out_dt)), E


def _tol(E: float, B: float, out_dt: str) -> float:
    return 3.0 * E + 2.0 * B * EPS[out_dt] + 1e-6


# ---------------------------------------------------------------------------------------------------------------
# families


def _gen_ew(seed: int, r: random.Random) -> Program:
    cd = r.choice(["f32", "bf16", "f16"])
    BM, BN = r.choice([(16, 64), (32, 32), (32, 64), (64, 64), (64, 32), (16, 128), (128, 32), (8, 128)])
    use_col = r.random() < 0.4
    M = _ragged(r, BM, 8 if use_col else 1)
    N = _ragged(r, BN, 8)
    x_dt, y_dt = r.choice(["f32", "bf16", "f16", cd]), r.choice(["f32", "bf16", "f16", cd])
    use_y, use_row, use_alpha = r.random() < 0.6, r.random() < 0.4, r.random() < 0.3
    out_dt = r.choice(["f32", "bf16", "f16", cd])
    args = [_arg("X", "tensor", x_dt, (M, N), ("M", "N"))]
    if use_y:
        args.append(_arg("Y", "tensor", y_dt, (M, N), ("M", "N")))
    if use_row:
        args.append(_arg("R", "tensor", r.choice(["f32", cd]), (N,), ("N",)))
    if use_col:
        args.append(_arg("C", "tensor", r.choice(["f32", cd]), (M,), ("M",)))
    if use_alpha:
        args.append(_arg("alpha", "scalar", "f32"))
    args.append(_arg("O", "tensor", out_dt, (M, N), ("M", "N"), output=True))
    second_out = r.random() < 0.25
    if second_out:
        args.append(_arg("P", "tensor", r.choice(["f32", "bf16", "f16"]), (M, N), ("M", "N"), output=True))
    dtypes = {a.name: a.dtype for a in args}

    chain = Chain(r, cd)
    head = ["pid_m = program_id(0)", "pid_n = program_id(1)"]
    pool, conds = [], []
    head.append("x = load(X, (pid_m, pid_n), (BM, BN))")
    pool.append(Val(_to("x", x_dt, cd), lambda e: rnd(e["X"], cd), "full", 2.0,
                    2.0 * EPS[cd] if EPS[x_dt] < EPS[cd] else 0.0))
    conds.append(("x > 0.0", lambda e: e["X"] > 0))
    if use_y:
        head.append("y = load(Y, (pid_m, pid_n), (BM, BN))")
        pool.append(Val(_to("y", y_dt, cd), lambda e: rnd(e["Y"], cd), "full", 2.0,
                        2.0 * EPS[cd] if EPS[y_dt] < EPS[cd] else 0.0))
        conds.append(("x < y", lambda e: e["X"] < e["Y"]) if x_dt == y_dt else ("y > 0.5", lambda e: e["Y"] > 0.5))
    if use_row:
        head.append(f"rv = {_to('load(R, pid_n, BN)', dtypes['R'], cd)}")
        pool.append(Val("rv[None, :]", lambda e: rnd(e["R"], cd)[None, :], "row", 2.0, 2.0 * EPS[cd]))
    if use_col:
        head.append(f"cv = {_to('load(C, pid_m, BM)', dtypes['C'], cd)}")
        pool.append(Val("cv[:, None]", lambda e: rnd(e["C"], cd)[:, None], "col", 2.0, 2.0 * EPS[cd]))
    if use_alpha:
        pool.append(Val("alpha", lambda e: rnd(e["alpha"], cd), "scalar", 2.0, 0.0))
    v = chain.grow(pool, r.randint(2, 9), conds)
    src_o, fn_o, E_o = _store_cast(chain, v, out_dt)
    body = head + chain.lines + [f"store(O, (pid_m, pid_n), {src_o})"]
    outs = {"O": fn_o}
    tol = {"O": lambda: _tol(E_o(), v.B, out_dt)}
    if second_out:
        w = chain.grow(pool, r.randint(1, 3), conds)
        body = head + chain.lines + [f"store(O, (pid_m, pid_n), {src_o})"]
        p_dt = dtypes["P"]
        src_p, fn_p, E_p = _store_cast(chain, w, p_dt)
        body.append(f"store(P, (pid_m, pid_n), {src_p})")
        outs["P"] = fn_p
        tol["P"] = lambda: _tol(E_p(), w.B, p_dt)
    name = f"ew_{seed}"
    sig = ", ".join(_param(a) for a in args) + f", BM: const = {BM}, BN: const = {BN}"
    source = f"@grid(cdiv(M, BM), cdiv(N, BN))\ndef {name}({sig}):\n" + "".join(f"    {l}\n" for l in body)

    def model(env, chain=chain, outs=outs):
        chain.run(env)
        return {k: np.broadcast_to(f(env), env[k].shape).copy() for k, f in outs.items()}
    return Program(seed, "ew", name, source, args, model, tol, [f"cd={cd}"])


def _param(a: Arg) -> str:
    if a.kind == "scalar":
        return f"{a.name}: {a.dtype}"
    return f"{a.name}: {a.dtype}[{', '.join(a.dimnames)}]"


def _arg(name, kind, dtype, shape=(), dims=(), output=False, low=-2.0, high=2.0) -> Arg:
    return Arg(name, kind, dtype, tuple(shape), output, low, high, tuple(dims))


def _gen_reduce(seed: int, r: random.Random) -> Program:
    cd = r.choice(["f32", "bf16", "f16"])
    axis = r.choice([1, 1, 0])
    rop = r.choice(["sum", "max", "min"])
    if axis == 1:
        BM, BN = r.choice([(4, 256), (8, 128), (16, 64), (32, 64), (16, 128), (64, 32), (2, 512), (32, 32)])
        M = _ragged(r, BM, 8)
        N = r.randint(1, BN // 8) * 8
    else:
        BM, BN = r.choice([(256, 4), (128, 16), (64, 32), (64, 64), (32, 64), (128, 32), (16, 128)])
        M = r.randint(1, BM)
        N = _ragged(r, BN, 8, lo=8)
    x_dt = r.choice(["f32", "bf16", "f16", cd])
    use_y = r.random() < 0.4
    y_dt = r.choice(["f32", "bf16", "f16", cd])
    out_dt = r.choice(["f32", cd]) if rop != "sum" else "f32"
    back = r.random() < 0.4                  # also store x - r (broadcast back)
    back_dt = r.choice(["f32", "bf16", "f16"])
    args = [_arg("X", "tensor", x_dt, (M, N), ("M", "N"))]
    if use_y:
        args.append(_arg("Y", "tensor", y_dt, (M, N), ("M", "N")))
    red_len, red_dim = (M, "M") if axis == 1 else (N, "N")
    args.append(_arg("O", "tensor", out_dt, (red_len,), (red_dim,), output=True))
    if back:
        args.append(_arg("P", "tensor", back_dt, (M, N), ("M", "N"), output=True))
    chain = Chain(r, cd)
    head = ["pid = program_id(0)"]
    coords = "(pid, 0)" if axis == 1 else "(0, pid)"
    head.append(f"x = load(X, {coords}, (BM, BN))")
    pool = [Val(_to("x", x_dt, cd), lambda e: rnd(e["X"], cd), "full", 2.0, 2.0 * EPS[cd])]
    conds = [("x > 0.0", lambda e: e["X"] > 0)]
    if use_y:
        head.append(f"y = load(Y, {coords}, (BM, BN))")
        pool.append(Val(_to("y", y_dt, cd), lambda e: rnd(e["Y"], cd), "full", 2.0, 2.0 * EPS[cd]))
    v = chain.grow(pool, r.randint(1, 6), conds)
    # reduce: sum in f32 (order-independent enough), max/min in the compute dtype (exact)
    rd = "f32" if rop == "sum" else cd
    fill = {"sum": "0.0", "max": "-inf", "min": "inf"}[rop]
    idx = "arange(0, BN)[None, :] < N" if axis == 1 else "arange(0, BM)[:, None] < M"
    lines = chain.lines + [f"m = where({idx}, {_to(v.src, cd, rd)}, {fill})",
                           f"red = {rop}(m, axis={axis})"]
    n_red = N if axis == 1 else M
    Bred = lambda: v.B * (n_red if rop == "sum" else 1)
    Ered = lambda: ((v.E + v.B * EPS[rd]) * (n_red if rop == "sum" else 1)
                    + Bred() * EPS["f32"] * (4 if rop == "sum" else 0))
    vfn = v.fn
    npred = {"sum": np.sum, "max": np.max, "min": np.min}[rop]
    red_fn = lambda e: npred(rnd(vfn(e), rd), axis=axis)
    lines.append(f"store(O, pid, {_to('red', rd, out_dt)})")
    outs = {"O": lambda e: rnd(red_fn(e), out_dt)}
    tol = {"O": lambda: _tol(Ered() + (Bred() * EPS[out_dt] if out_dt != rd else 0), Bred(), out_dt)}
    if back:
        bsrc = "red[:, None]" if axis == 1 else "red[None, :]"
        if rop == "sum":   # normalise by the sum of squares-ish (keep it bounded): v * (1 / (1 + abs(sum)))
            lines.append(f"back = {_to(v.src, cd, 'f32')} / (abs({bsrc}) + 1.0)")
            bfn = (lambda e: rnd(rnd(vfn(e), "f32") / (np.abs(np.expand_dims(red_fn(e), axis)) + 1.0), "f32"))
            Eb = lambda: v.E + Ered() + 4 * v.B * EPS["f32"]
            Bb, bd = lambda: v.B, "f32"
        else:
            lines.append(f"back = {v.src} - {bsrc}")
            bfn = lambda e: rnd(vfn(e) - np.expand_dims(red_fn(e), axis), cd)
            Eb = lambda: v.E + Ered() + 2 * v.B * EPS[cd]
            Bb, bd = lambda: 2 * v.B, cd
        lines.append(f"store(P, {coords}, {_to('back', bd, back_dt)})")
        outs["P"] = lambda e: rnd(bfn(e), back_dt)
        tol["P"] = lambda: _tol(Eb() + (Bb() * EPS[back_dt] if back_dt != bd else 0), Bb(), back_dt)
    name = f"reduce_{seed}"
    sig = ", ".join(_param(a) for a in args) + f", BM: const = {BM}, BN: const = {BN}"
    grid = "cdiv(M, BM)" if axis == 1 else "cdiv(N, BN)"
    source = f"@grid({grid})\ndef {name}({sig}):\n" + "".join(f"    {l}\n" for l in head + lines)

    def model(env, chain=chain, outs=outs):
        chain.run(env)
        return {k: f(env) for k, f in outs.items()}
    return Program(seed, "reduce", name, source, args, model, tol, [f"cd={cd} axis={axis} {rop}"])


def _gen_dot(seed: int, r: random.Random, reduce_rows: bool) -> Program:
    dt = r.choice(["bf16", "f16"])
    BM, BK = r.choice([64, 128]), 64
    BN = r.choice([64, 128])
    trans_b = r.random() < 0.3
    K = _ragged(r, BK, 8, max_tiles=4)
    if reduce_rows:
        N = r.randint(1, BN // 8) * 8
        M = _ragged(r, BM, 8)
    else:
        N = _ragged(r, BN, 8)
        M = _ragged(r, BM, 1 if r.random() < 0.5 else 8)
    use_row = r.random() < 0.5
    use_col = (M % 8 == 0) and r.random() < 0.4
    use_alpha = r.random() < 0.3
    accum = r.choice(["acc = dot(a, b, acc)", "acc = dot(a, b, acc)", "acc += dot(a, b)"])
    ecd = r.choice(["f32", "f32", dt])      # epilogue compute dtype
    out_dt = r.choice(["f32", dt, dt])
    args = [_arg("A", "tensor", dt, (M, K), ("M", "K"), low=-1, high=1)]
    if trans_b:
        args.append(_arg("Bt", "tensor", dt, (N, K), ("N", "K"), low=-1, high=1))
    else:
        args.append(_arg("B", "tensor", dt, (K, N), ("K", "N"), low=-1, high=1))
    if use_row:
        args.append(_arg("bias", "tensor", "f32", (N,), ("N",)))
    if use_col:
        args.append(_arg("scale", "tensor", "f32", (M,), ("M",)))
    if use_alpha:
        args.append(_arg("alpha", "scalar", "f32"))
    out_shape = (M,) if reduce_rows else (M, N)
    args.append(_arg("C", "tensor", out_dt, (M, N), ("M", "N"), output=True))
    rop = r.choice(["sum", "max", "min"])
    if reduce_rows:
        args.append(_arg("R", "tensor", "f32", (M,), ("M",), output=True))
    body = ["pid_m = program_id(0)", "pid_n = program_id(1)" if not reduce_rows else "pid_n = 0",
            "acc = zeros((BM, BN), f32)",
            "for k in range(cdiv(K, BK)):",
            "    a = load(A, (pid_m, k), (BM, BK))",
            "    b = load(Bt, (pid_n, k), (BN, BK)).T" if trans_b else "    b = load(B, (k, pid_n), (BK, BN))",
            "    " + accum]
    if trans_b:
        body[5] = "    b = load(Bt, (pid_n, k), (BN, BK)).T"
    Bacc = 2.5 * math.sqrt(K) / 3 * 3 + 1.0      # |acc| is ~ sqrt(K)/3 per element: a generous 7.5 sigma
    Eacc = K * 2.0 ** -22 * 1.0 + 1e-6

    def acc_fn(e):
        b = e["Bt"].T if trans_b else e["B"]
        return rnd(e["A"] @ b, "f32")
    chain = Chain(r, ecd)
    acc_val = Val(_to("acc", "f32", ecd), lambda e: rnd(acc_fn(e), ecd), "full", Bacc, 0.0)
    acc_val.Efn = lambda: Eacc + (acc_val.B * EPS[ecd] if ecd != "f32" else 0)
    pool = [acc_val]
    if use_row:
        body.append(f"bv = {_to('load(bias, pid_n, BN)', 'f32', ecd)}")
        pool.append(Val("bv[None, :]", lambda e: rnd(e["bias"], ecd)[None, :], "row", 2.0, 2.0 * EPS[ecd]))
    if use_col:
        body.append(f"sv = {_to('load(scale, pid_m, BM)', 'f32', ecd)}")
        pool.append(Val("sv[:, None]", lambda e: rnd(e["scale"], ecd)[:, None], "col", 2.0, 2.0 * EPS[ecd]))
    if use_alpha:
        pool.append(Val("alpha", lambda e: rnd(e["alpha"], ecd), "scalar", 2.0, 0.0))
    n_ops = r.randint(0, 4)
    v = pool[0] if n_ops == 0 and ecd == "f32" else chain.grow(pool, max(n_ops, 1), [])
    src_c, fn_c, E_c = _store_cast(chain, v, out_dt)
    body += chain.lines + [f"store(C, (pid_m, pid_n), {src_c})"]
    outs = {"C": fn_c}
    tol = {"C": lambda: _tol(E_c(), v.B, out_dt)}
    if reduce_rows:
        fill = {"sum": "0.0", "max": "-inf", "min": "inf"}[rop]
        body += [f"m = where(arange(0, BN)[None, :] < N, acc, {fill})", f"red = {rop}(m, axis=1)",
                 "store(R, pid_m, red)"]
        npred = {"sum": np.sum, "max": np.max, "min": np.min}[rop]
        outs["R"] = lambda e: rnd(npred(acc_fn(e), axis=1), "f32")
        nr = N if rop == "sum" else 1
        tol["R"] = lambda: _tol(Eacc * nr + nr * pool[0].B * EPS["f32"], pool[0].B * nr, "f32")
    name = f"{'dotred' if reduce_rows else 'dot'}_{seed}"
    sig = ", ".join(_param(a) for a in args) + f", BM: const = {BM}, BN: const = {BN}, BK: const = {BK}"
    grid = "cdiv(M, BM)" if reduce_rows else "cdiv(M, BM), cdiv(N, BN)"
    source = f"@grid({grid})\ndef {name}({sig}):\n" + "".join(f"    {l}\n" for l in body)

    def model(env, chain=chain, outs=outs):
        chain.run(env)
        return {k: np.broadcast_to(f(env), env[k].shape).copy() for k, f in outs.items()}
    fam = "dotred" if reduce_rows else "dot"
    return Program(seed, fam, name, source, args, model, tol,
                   [f"{dt} BM={BM} BN={BN} K={K} trans_b={trans_b} ecd={ecd} {accum.strip()}"])


def generate(seed: int) -> Program:
    r = random.Random(seed * 7919 + 17)
    family = FAMILIES[seed % len(FAMILIES)]
    if family == "ew":
        return _gen_ew(seed, r)
    if family == "reduce":
        return _gen_reduce(seed, r)
    return _gen_dot(seed, r, reduce_rows=(family == "dotred"))


def corpus(n: int = N_PROGRAMS) -> list:
    return [generate(s) for s in range(n)]


if __name__ == "__main__":
    import sys
    for s in (map(int, sys.argv[1:]) if len(sys.argv) > 1 else range(4)):
        p = generate(s)
        print(f"# seed {s} {p.family} {p.notes} {[(a.name, a.dtype, a.shape) for a in p.args]}")
        print(p.source)
