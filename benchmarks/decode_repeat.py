"""Decode's time against SDPA's default, many rounds per row: how much of a 0.1-0.3 % gap is the machine.

``bench_decode.py`` times flash_decode and SDPA default in 3 interleaved rounds per row; rows within a
few tenths of a percent of SDPA then read as over or under by chance. This script times the same two
on the same inputs in ``--rounds`` rounds per row (the order alternating: flash_decode first in even
rounds, SDPA first in odd ones), each round a ``triton.testing.do_bench`` median with the L2 cleared
before every run, and reports per row: the ratio of medians, each round's ratio, how many rounds
flash_decode was the faster, and the two-sided sign-test p-value of that count (the chance of a split
at least that uneven if either were equally likely to win a round).

``--control`` adds an A/A column: SDPA default timed against itself (a second closure over the same
call, in the same alternating rounds). Its ratio and sign test are what the method reports for two
identical kernels: the resolution below which a row's gap says nothing.

Run on a GPU (bf16, d = 128, Nq = 1; rows as bench_decode's, or ``--only-over FILE``: the rows over
1.0x in a bench_decode results file)::

    python benchmarks/decode_repeat.py --rounds 12 --only-over results/bench_decode.json \
        --out results/decode_repeat.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import bench_decode  # noqa: E402


def sign_test_p(wins: int, rounds: int) -> float:
    """Two-sided binomial p-value of ``wins`` of ``rounds`` under p = 1/2 (ties, exact, counted as
    neither: the caller passes only decided rounds)."""
    if rounds == 0:
        return 1.0
    low = min(wins, rounds - wins)
    tail = sum(math.comb(rounds, i) for i in range(low + 1)) / 2 ** rounds
    return min(1.0, 2 * tail)


def row_entry(ours: list, base: list) -> dict:
    """Per-round times of flash_decode (``ours``) and SDPA default (``base``) as a results entry."""
    median = bench_decode._median
    ratios = [a / b for a, b in zip(ours, base)]
    decided = [r for r in ratios if r != 1.0]
    wins = sum(r < 1.0 for r in decided)
    return {"flash_decode_us": ours, "sdpa_default_us": base, "ratio_of_medians": median(ours) / median(base),
            "round_ratios": ratios, "median_round_ratio": median(ratios), "min_round_ratio": min(ratios),
            "max_round_ratio": max(ratios), "rounds_flash_decode_faster": wins, "rounds_decided": len(decided),
            "sign_test_p": sign_test_p(wins, len(decided))}


def time_row(B, H, Hkv, nk, rounds: int, control: bool = False) -> dict:
    import torch

    from flashlab import decode

    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
    q = torch.randn(B, H, 1, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
    k = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)
    variants = bench_decode.make_variants(H, Hkv, bench_decode.D ** -0.5)
    fns = {name: (lambda f=variants[name]: f(q, k, v)) for name in ("flash_decode", "sdpa_default")}
    if control:
        fns["sdpa_again"] = lambda f=variants["sdpa_default"]: f(q, k, v)
    order = list(fns)
    choice = decode.choice_for(q, k)
    runs = {name: [] for name in fns}
    with torch.no_grad():
        err = _common.rel_err(fns["flash_decode"](), fns["sdpa_default"]().float())
        for r in range(rounds):
            for name in (order if r % 2 == 0 else order[::-1]):
                runs[name].append(bench_decode.bench_us(fns[name]))
    entry = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "num_splits": choice.splits, "wide_config": choice.wide,
             "rel_err_vs_sdpa_default": err, **row_entry(runs["flash_decode"], runs["sdpa_default"])}
    if control:
        aa = row_entry(runs["sdpa_again"], runs["sdpa_default"])
        entry["control"] = {"sdpa_again_us": aa["flash_decode_us"], "ratio_of_medians": aa["ratio_of_medians"],
                            "min_round_ratio": aa["min_round_ratio"], "max_round_ratio": aa["max_round_ratio"],
                            "rounds_again_faster": aa["rounds_flash_decode_faster"],
                            "rounds_decided": aa["rounds_decided"], "sign_test_p": aa["sign_test_p"]}
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--only-over", type=Path, default=None,
                        help="a bench_decode results file: time only its rows over 1.0x SDPA default")
    parser.add_argument("--control", action="store_true",
                        help="also time SDPA default against itself (an A/A column: the method's resolution)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "decode_repeat.json")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error(f"--rounds {args.rounds}: at least 2")
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 1
    import torch

    todo = [(B, H, Hkv, nk) for B, H, Hkv, nk, skip in bench_decode.rows() if skip is None]
    if args.only_over is not None:
        rows = json.loads(args.only_over.read_text())["rows"]
        over = {(r["B"], r["H"], r["Hkv"], r["Nk"]) for r in rows if not r.get("skipped")
                and r["results"]["flash_decode"]["us"] > r["results"]["sdpa_default"]["us"]}
        todo = [row for row in todo if row in over]
    out = []
    for B, H, Hkv, nk in todo:
        entry = time_row(B, H, Hkv, nk, args.rounds, control=args.control)
        torch.cuda.empty_cache()  # the row's K and V, freed with time_row's frame
        out.append(entry)
        print(f"B={B:>2} H={H} Hkv={Hkv:>2} Nk={nk:>6}: ratio of medians {entry['ratio_of_medians']:.4f}, rounds "
              f"{entry['min_round_ratio']:.4f}-{entry['max_round_ratio']:.4f}, flash_decode faster in "
              f"{entry['rounds_flash_decode_faster']} of {entry['rounds_decided']} (sign test p = "
              f"{entry['sign_test_p']:.3f})" + (
                  f"; SDPA against itself {entry['control']['ratio_of_medians']:.4f} (p = "
                  f"{entry['control']['sign_test_p']:.3f})" if args.control else ""), flush=True)
    _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds, "control": args.control,
                                  "method": __doc__.split("\n\n")[1].replace("\n", " "), "rows": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
