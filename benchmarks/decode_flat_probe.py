"""A persistent decode kernel that walks several key ranges in one pipelined loop: does it beat the waves
of one program per range at the multi-wave rows?

Where a decode step has more (sequence, kv head) ranges (*lanes*) than SMs, flash_decode launches one
program per lane, in waves (512 lanes of the wide config: 3.9 waves on an H200's 132 SMs). A program that
ends leaves its SM idle until the next one has loaded its first tiles, and the last wave fills 116 of the
132 SMs. The warp-specialised Gluon forward, whose producer runs ahead, was level with cuDNN at the
512-program row where flash_decode was 0.6-0.7 % behind (benchmarks/NOTES.md, decode, session 16).

This probe's kernel launches ``programs`` programs (default: the largest divisor of the lane count that
fits the SMs once) and gives program p the lanes p, p + programs, ... Its key loop runs over all of them
end to end: iteration i reads block ``i % blocks`` of its ``i // blocks``-th lane, so Triton's software
pipeline issues the next lane's first tiles while the current lane's last tiles are in use. At a lane's
last block the program writes that lane's o and lse and starts the online softmax afresh (no partial
states: each lane is one program's). The walk order within a lane is the wide config's (odd lanes start
halfway).

Scope: a probe, not a library path: a contiguous cache with every sequence at full length, no causal mask,
one row block (group x Nq <= 64). ``--check`` compares it with attention computed in float64 on fresh
random inputs (run it under ``TRITON_INTERPRET=1`` on a CPU, or on a GPU).

Run on a GPU (bf16, d = 128, Nq = 1)::

    python benchmarks/decode_flat_probe.py --rounds 5 --out results/decode_flat_probe.json
    python benchmarks/decode_flat_probe.py --library --rounds 8 --out results/decode_flat_library.json
    python benchmarks/decode_flat_probe.py --library --rounds 6 --flat-max-keys 16384 \
        --rows "16,32,32,8192;64,32,8,16384" --out results/decode_flat_library_8k16k.json

(``--library``: the library's ``flash_decode`` against the same call in waves; its rule takes the flat walk
at the rows of at most 4k keys, ``flashlab.split_rule.flat_programs``, and the waves elsewhere.)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from flashlab.kernels import _mode  # noqa: E402

triton = _mode.triton()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from flashlab.kernels.flash_decode import block_m_for, config_for  # noqa: E402
from flashlab.kernels.flash_fwd import _dot, dot_precision, head_dim_padded  # noqa: E402


@triton.jit(do_not_specialize=["H_KV", "GROUP", "N_Q", "N_KEYS", "LANES"])
def _flat_decode(
    Q, K, V, Out, LSE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H_KV, GROUP, N_Q, N_KEYS, LANES,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    STAGGER: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    NB = tl.cdiv(N_KEYS, BLOCK_N)  # key blocks of a lane
    mine = tl.cdiv(LANES - pid, nprog)  # lanes pid, pid + nprog, ...
    qk_scale = sm_scale * 1.4426950408889634
    offs_r = tl.arange(0, BLOCK_M)
    row_ok = offs_r < GROUP * N_Q
    off_i = offs_r % N_Q
    offs_d = tl.arange(0, HEAD_DIM)
    d_ok = offs_d[None, :] < D_HEAD
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for it in range(0, mine * NB):
        blk = it % NB
        lane = pid + (it // NB) * nprog
        off_z = (lane // H_KV).to(tl.int64)
        off_hkv = (lane % H_KV).to(tl.int64)
        off_h = off_hkv * GROUP + offs_r // N_Q  # (BLOCK_M,) GQA packing, as flash_decode
        if STAGGER > 1:  # odd lanes from their middle block, round to it
            blk_read = blk + (lane % STAGGER) * (NB // STAGGER)
            blk_read = tl.where(blk_read >= NB, blk_read - NB, blk_read)
        else:
            blk_read = blk
        offs_n = blk_read * BLOCK_N + tl.arange(0, BLOCK_N)
        key_ok = offs_n < N_KEYS
        q = tl.load(Q + off_z * stride_qz + off_h[:, None] * stride_qh + off_i[:, None] * stride_qm
                    + offs_d[None, :] * stride_qk, mask=row_ok[:, None] & d_ok, other=0.0)  # (BLOCK_M, HEAD_DIM), L2
        k = tl.load(K + off_z * stride_kz + off_hkv * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk,
                    mask=key_ok[:, None] & d_ok, other=0.0)  # (BLOCK_N, HEAD_DIM)
        v = tl.load(V + off_z * stride_vz + off_hkv * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=key_ok[:, None] & d_ok, other=0.0)  # (BLOCK_N, HEAD_DIM)
        qk = _dot(q, tl.trans(k), DOT_F32, DOT_PRECISION) * qk_scale
        qk = tl.where(key_ok[None, :], qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)
        m_i = m_ij
        last = blk == NB - 1
        if last:  # the lane is done: its o and lse, then a fresh state for the next lane
            row = (off_z * H_KV * GROUP + off_h) * N_Q + off_i
            tl.store(LSE + row, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, mask=row_ok)
            tl.store(Out + off_z * stride_oz + off_h[:, None] * stride_oh + off_i[:, None] * stride_om
                     + offs_d[None, :] * stride_ok, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok)
        m_i = tl.where(last, float("-inf"), m_i)  # the next lane's first step rescales l_i and acc by exp2(-inf) = 0


def default_programs(lanes: int, sms: int) -> int:
    """The largest divisor of ``lanes`` that fits the SMs once (every program the same number of lanes)."""
    return max(p for p in range(1, min(lanes, sms) + 1) if lanes % p == 0)


class FlatPlan:
    """The flat kernel's launch for q (B, H, Nq, d), k, v (B, Hkv, N, d), every key valid; ``programs``:
    None for :func:`default_programs`; ``wide``: the wide config (else flash_decode's default one)."""

    def __init__(self, q, k, programs: int | None = None, wide: bool = True, stagger: int | None = None):
        B, H, Nq, d = q.shape
        Hkv, n = k.shape[1], k.shape[2]
        group = H // Hkv
        if group * Nq > 64:
            raise ValueError(f"group x Nq = {group * Nq}: the probe takes one row block (at most 64 rows)")
        self.config = config_for(head_dim_padded(d), q.dtype, wide=wide)
        lanes = B * Hkv
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        self.programs = default_programs(lanes, sms) if programs is None else programs
        if not 1 <= self.programs <= lanes:
            raise ValueError(f"programs = {self.programs}: between 1 and the {lanes} lanes")
        self.consts = dict(H_KV=Hkv, GROUP=group, N_Q=Nq, N_KEYS=n, LANES=lanes, HEAD_DIM=head_dim_padded(d), D_HEAD=d,
                           BLOCK_M=block_m_for(group * Nq), BLOCK_N=self.config.block_n,
                           STAGGER=self.config.stagger if stagger is None else stagger,
                           DOT_F32=_mode.dot_upcast(q.dtype), DOT_PRECISION=dot_precision(q.dtype))
        self.shape = (B, H, Nq, d)

    def __call__(self, q, k, v, scale: float):
        o = torch.empty(self.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty(self.shape[:3], dtype=torch.float32, device=q.device)
        _flat_decode[(self.programs,)](q, k, v, o, lse, scale, *q.stride(), *k.stride(), *v.stride(), *o.stride(),
                                       **self.consts, num_warps=self.config.num_warps,
                                       num_stages=self.config.num_stages)
        return o, lse


def check(device: str) -> list[str]:
    """The flat kernel against attention in float64 (no mask: the probe's scope) on seeded random inputs:
    MHA and GQA, Nq 1 and 3, lengths not a multiple of the block, one lane per program and several, lanes
    not a multiple of the programs, both walk orders. Returns the failures (empty: all passed)."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    d = 128 if device == "cuda" else 16
    scale_n = 64 if device == "cuda" else 1
    failures = []
    cases = [  # B, H, Hkv, Nq, N, programs, stagger
        (2, 4, 4, 1, 40 * scale_n, None, 2),
        (2, 4, 2, 3, 37 * scale_n + 5, 1, 0),
        (3, 8, 2, 1, 70 * scale_n, 4, 2),
        (5, 4, 1, 1, 33 * scale_n, 2, 2),
        (2, 2, 2, 1, 9, None, 0),  # one block per lane, shorter than it
    ]
    for n_case, (B, H, Hkv, Nq, n, programs, stagger) in enumerate(cases):
        g = torch.Generator().manual_seed(7300 + n_case)
        q = torch.randn(B, H, Nq, d, generator=g).to(device, dtype)
        k = torch.randn(B, Hkv, n, d, generator=g).to(device, dtype)
        v = torch.randn(B, Hkv, n, d, generator=g).to(device, dtype)
        kk, vv = (t.double().cpu().repeat_interleave(H // Hkv, 1) for t in (k, v))  # (B, H, N, d)
        s = q.double().cpu() @ kk.transpose(-1, -2) * d ** -0.5  # (B, H, Nq, N), every key seen (no mask)
        ref_lse = torch.logsumexp(s, -1)
        ref_o = torch.softmax(s, -1) @ vv
        plan = FlatPlan(q, k, programs, stagger=stagger)
        o, lse = plan(q, k, v, d ** -0.5)
        err_o = (o.double().cpu() - ref_o).abs().max().item()
        err_lse = (lse.double().cpu() - ref_lse).abs().max().item()
        if not (err_o < (2e-2 if dtype == torch.bfloat16 else 1e-5) and err_lse < 1e-3):
            failures.append(f"case {n_case} (B={B} H={H} Hkv={Hkv} Nq={Nq} N={n} programs={plan.programs} "
                            f"stagger={stagger}): o off by {err_o:.2e}, lse by {err_lse:.2e}")
    return failures


ROWS = [  # B, H, Hkv, Nk: the multi-wave rows of bench_decode, and one one-wave row as a control
    (16, 32, 32, 4096), (64, 32, 8, 4096), (16, 32, 32, 32768), (64, 32, 8, 32768), (64, 32, 32, 4096),
    (16, 32, 32, 131072), (4, 32, 32, 32768),
]


def time_rows(rounds: int) -> list:
    import bench_decode

    import flashlab
    from flashlab import decode

    out = []
    for B, H, Hkv, nk in ROWS:
        g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
        q = torch.randn(B, H, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        scale = 128 ** -0.5
        choice = decode.choice_for(q, k)
        variants = bench_decode.make_variants(H, Hkv, scale)
        fns = {"rule": lambda: flashlab.flash_decode(q, k, v, scale=scale),
               "sdpa_default": lambda f=variants["sdpa_default"]: f(q, k, v)}
        lanes = B * Hkv
        plans = {"flat": FlatPlan(q, k), "flat_default_config": FlatPlan(q, k, wide=False)}
        if lanes > 256:
            plans["flat_2_per_sm_default_config"] = FlatPlan(q, k, default_programs(lanes, 264), wide=False)
        ref = fns["sdpa_default"]().float()
        errs = {"rule": _common.rel_err(fns["rule"](), ref)}
        for name, plan in plans.items():
            fns[name] = lambda p=plan: p(q, k, v, scale)[0]
            errs[name] = _common.rel_err(fns[name](), ref)
        order = list(fns)
        runs = {name: [] for name in fns}
        with torch.no_grad():
            for r in range(rounds):
                for name in order[r % len(order):] + order[:r % len(order)]:  # rotated
                    runs[name].append(bench_decode.bench_us(fns[name]))
        med = {name: bench_decode._median(ts) for name, ts in runs.items()}
        entry = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "rule": {"splits": choice.splits, "wide": choice.wide},
                 "programs": {name: p.programs for name, p in plans.items()}, "us": runs, "median_us": med,
                 "over_sdpa": {name: med[name] / med["sdpa_default"] for name in med},
                 "over_rule": {name: med[name] / med["rule"] for name in med}, "rel_err_vs_sdpa": errs}
        out.append(entry)
        print(f"B={B:>2} H={H} Hkv={Hkv:>2} Nk={nk:>6} (rule: {choice.splits} split(s), wide {choice.wide}): rule/SDPA "
              f"{entry['over_sdpa']['rule']:.4f}; " + ", ".join(
                  f"{name}/rule {entry['over_rule'][name]:.4f} (/SDPA {entry['over_sdpa'][name]:.4f})" for name in plans),
              flush=True)
        plans.clear()
        fns.clear()
    return out


def time_library(rounds: int, rows=None) -> list:
    """The library's flash_decode (its rule: the flat walk at these rows) beside the same call in waves of
    one program per range (its config with ``flat=False``) and SDPA's default, in rotated rounds; ``rows``:
    (B, H, Hkv, Nk) tuples, default ``ROWS``."""
    import dataclasses

    import bench_decode

    import flashlab
    from flashlab import decode
    from flashlab.kernels import decode_plan

    out = []
    for B, H, Hkv, nk in rows or ROWS:
        g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
        q = torch.randn(B, H, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
        scale = 128 ** -0.5
        choice = decode.choice_for(q, k)
        config = decode.config_of(q, choice)
        flat = decode_plan.plan_for(q, k, v, None, None, True, choice.splits, config)
        waves = decode_plan.plan_for(q, k, v, None, None, True, choice.splits, dataclasses.replace(config, flat=False))
        variants = bench_decode.make_variants(H, Hkv, scale)
        fns = {"flash_decode": lambda: flashlab.flash_decode(q, k, v, scale=scale),
               "waves": lambda: waves(q, k, v, None, None, scale, False)[0],
               "sdpa_default": lambda f=variants["sdpa_default"]: f(q, k, v)}
        ref = fns["sdpa_default"]().float()
        errs = {name: _common.rel_err(fns[name](), ref) for name in ("flash_decode", "waves")}
        order = list(fns)
        runs = {name: [] for name in fns}
        with torch.no_grad():
            for r in range(rounds):
                for name in order[r % len(order):] + order[:r % len(order)]:  # rotated
                    runs[name].append(bench_decode.bench_us(fns[name]))
        med = {name: bench_decode._median(ts) for name, ts in runs.items()}
        entry = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "grid": {"flash_decode": list(flat.grid), "waves": list(waves.grid)},
                 "us": runs, "median_us": med, "over_sdpa": {name: med[name] / med["sdpa_default"] for name in med},
                 "flat_over_waves": med["flash_decode"] / med["waves"], "rel_err_vs_sdpa": errs}
        out.append(entry)
        print(f"B={B:>2} H={H} Hkv={Hkv:>2} Nk={nk:>6}: grid {flat.grid} vs {waves.grid}; flash_decode/waves "
              f"{entry['flat_over_waves']:.4f}, flash_decode/SDPA {entry['over_sdpa']['flash_decode']:.4f}, waves/SDPA "
              f"{entry['over_sdpa']['waves']:.4f}; rel errors {errs['flash_decode']:.1e} {errs['waves']:.1e}", flush=True)
        fns.clear()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the reference and stop (CPU or GPU)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--library", action="store_true",
                        help="time the library's flash_decode (the flat walk by its rule) against its waves and SDPA")
    parser.add_argument("--rows", default=None, help="with --library: rows 'B,H,Hkv,Nk;...' instead of ROWS")
    parser.add_argument("--flat-max-keys", type=int, default=None,
                        help="with --library: the rule's flashlab.split_rule.FLAT_MAX_KEYS for this run (the longest "
                             "ranges it walks flat)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "decode_flat_probe.json")
    args = parser.parse_args(argv)
    if args.check:
        device = "cuda" if torch.cuda.is_available() and not _mode.is_interpreter() else "cpu"
        failures = check(device)
        print("\n".join(failures) or f"flat kernel: every case matches the reference ({device})")
        return 1 if failures else 0
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 1
    if args.library:
        from flashlab import split_rule

        if args.flat_max_keys is not None:
            split_rule.FLAT_MAX_KEYS = args.flat_max_keys
        picked = [tuple(int(x) for x in row.split(",")) for row in args.rows.split(";")] if args.rows else None
        rows = time_library(args.rounds, picked)
        _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds, "library": True,
                                      "flat_max_keys": split_rule.FLAT_MAX_KEYS,
                                      "time": "median of triton.testing.do_bench (warmup 25 ms, rep 100 ms, L2 "
                                              "cleared before every run) per round; variants in rotated order",
                                      "rows": rows})
        return 0
    failures = check("cuda")
    if failures:
        print("\n".join(failures))
        return 1
    rows = time_rows(args.rounds)
    _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds,
                                  "time": "median of triton.testing.do_bench (warmup 25 ms, rep 100 ms, L2 cleared "
                                          "before every run) per round; variants in rotated order", "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
