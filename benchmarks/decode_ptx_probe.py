"""Decode: do L2 hints on the split-KV kernel's K/V copies close the last 0.3-0.5 % to SDPA's default?

The rows still over SDPA's default (cuDNN) read K and V at the HBM read ceiling, and the gap lives in
the run after ``do_bench``'s L2 flush, which leaves L2 full of dirty lines that are written back while
the kernel reads (benchmarks/NOTES.md, call 9: an ``evict_first`` hint on a pure read took back 3.4 of
those 8.2 us). ``flash_decode`` loads K and V with ``cp.async`` (Triton's software pipeline), which
Triton 3.6 emits with no L2 qualifier at all: an ``eviction_policy`` on the load is dropped, on TMA
copies and Gluon's ``async_copy`` too (checked in the sm90 PTX, compiled without a GPU). PTX has two
qualifiers for these copies that Triton cannot ask for:

* ``.L2::128B`` / ``.L2::256B``: fetch the whole 128 or 256 bytes around each copy into L2 (CUTLASS and
  cuDNN kernels issue their copies with ``.L2::128B``);
* ``.L2::cache_hint`` with a ``createpolicy.fractional.L2::evict_first`` policy: the streamed K/V lines
  are the first L2 gives up, so fewer dirty lines are written back during the read.

This probe compiles the library's kernel for each row (the split rule's own splits and config), takes
its PTX, adds a qualifier to every ``cp.async.cg.shared.global`` (16-byte copies: K, V and Q tiles), and
launches the patched PTX through Triton's ``ir_override`` compile option, the rest of the plan as it is.
Each variant's output is compared with the unpatched kernel's (they must be bit-identical: the hints
change no value). Then flash_decode, SDPA's default and the variants are timed in ``ROUNDS`` rotated
rounds (``do_bench`` median each, L2 flushed by its 256 MB write), median of the rounds.

    python benchmarks/decode_ptx_probe.py            # -> $OUT/decode_ptx_probe.json (or results/)

A probe, not the library's path: Triton has no supported way to ask for these qualifiers.
"""
from __future__ import annotations

import copy
import json
import os
import re
import tempfile

import _common
from bench_decode import D, make_variants, rotated_rounds, rounds_entry

# the rows over SDPA's default in call 10 and call 19 (all but the first run one wave of unsplit or
# 4-split programs), and the 134 MB row of target 2 (B = 1 GQA 32k)
ROWS = ((4, 32, 32, 32768), (4, 32, 32, 131072), (16, 32, 8, 4096), (64, 32, 8, 4096), (16, 32, 8, 32768),
        (16, 32, 8, 131072), (1, 32, 32, 131072), (4, 32, 8, 131072), (1, 32, 8, 32768))
VARIANTS = ("l2_128", "l2_256")  # "evict_first", "evict_first_l2_256": an illegal instruction on the H200
ROUNDS = 5
_COPY = re.compile(r"cp\.async\.cg\.shared\.global(\s+\[[^\]]*\],\s*\[[^\]]*\],\s*[^;]*);")


def patch_ptx(ptx: str, variant: str) -> str:
    """``ptx`` with every 16-byte ``cp.async`` copy given the variant's L2 qualifiers."""
    prefetch = {"l2_128": ".L2::128B", "l2_256": ".L2::256B", "evict_first_l2_256": ".L2::256B"}.get(variant, "")
    hint = variant.startswith("evict_first")
    qualifiers = (".L2::cache_hint" if hint else "") + prefetch
    out, count = _COPY.subn(lambda m: f"cp.async.cg.shared.global{qualifiers}{m.group(1)}"
                            + (", %rd_flashlab_policy;" if hint else ";"), ptx)
    if count == 0:
        raise ValueError("no cp.async.cg.shared.global copy in the PTX")
    if hint:  # one policy register, made at the kernel's entry
        entry = re.search(r"\.visible \.entry [^{]*\{\n", out)
        policy = (".reg .b64 %rd_flashlab_policy;\n"
                  "createpolicy.fractional.L2::evict_first.b64 %rd_flashlab_policy, 1.0;\n")
        out = out[:entry.end()] + policy + out[entry.end():]
    return out


def _plan_of_last_call():
    from flashlab.kernels import decode_plan

    return next(reversed(decode_plan._PLANS.values()))


def probe(rows=ROWS, rounds=ROUNDS, variants=VARIANTS) -> dict:
    import torch

    from flashlab.kernels import decode_plan

    folder = tempfile.mkdtemp(prefix="flashlab_ptx_")
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": rounds, "rows": []}
    for B, H, Hkv, nk in rows:
        g = torch.Generator(device="cuda").manual_seed(17)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        scale = D ** -0.5
        base = make_variants(H, Hkv, scale)
        decode_plan.clear_plans()
        with torch.no_grad():
            ours = base["flash_decode"](q, k, v)
        plan = _plan_of_last_call()
        ptx = plan.kernel.asm["ptx"]
        fns = {"flash_decode": base["flash_decode"], "sdpa_default": base["sdpa_default"]}
        copies = {}
        for name in variants:
            path = os.path.join(folder, f"{B}_{H}_{Hkv}_{nk}_{name}.ptx")
            with open(path, "w") as f:
                f.write(patch_ptx(ptx, name))
            variant = copy.copy(plan)
            variant.options = dict(plan.options, ir_override=path)
            variant.kernel = variant.args = None  # the first call compiles the patched PTX through the JIT
            fns[name] = (lambda q, k, v, p=variant: p(q, k, v, None, None, scale, False)[0])
            copies[name] = len(_COPY.findall(ptx))
        calls = {name: (lambda fn=fn: fn(q, k, v)) for name, fn in fns.items()}
        with torch.no_grad():
            ref = calls["sdpa_default"]()
            errors = {name: _common.rel_err(fn(), ref) for name, fn in calls.items()}
            same = {name: bool(torch.equal(calls[name](), ours)) for name in variants}
            runs = rotated_rounds(calls, rounds=rounds)
        row = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "kv_bytes": 2 * k.numel() * k.element_size(),
               "grid": list(plan.grid), "options": {k_: v_ for k_, v_ in plan.options.items()},
               "copies_patched": copies, "variants": {}}
        sdpa = _median(runs["sdpa_default"])
        rule = _median(runs["flash_decode"])
        for name in calls:
            entry = rounds_entry(runs[name])
            entry["rel_err"] = errors[name]
            entry["vs_sdpa"] = entry["us"] / sdpa
            entry["vs_flash_decode"] = entry["us"] / rule
            entry["tb_s"] = row["kv_bytes"] / entry["us"] / 1e6
            if name in same:
                entry["bitwise_equal_to_flash_decode"] = same[name]
            row["variants"][name] = entry
        out["rows"].append(row)
        print(B, H, Hkv, nk, plan.grid, {n: (round(e["us"], 1), round(e["vs_sdpa"], 4)) for n, e in
                                         row["variants"].items()}, same, flush=True)
    return out


def _median(runs):
    from bench_decode import _median as median

    return median(runs)


if __name__ == "__main__":
    import sys

    if "--check" in sys.argv:  # one variant at one row, one round: does the patched kernel run?
        name, row = sys.argv[sys.argv.index("--check") + 1], int(sys.argv[sys.argv.index("--check") + 2])
        probe((ROWS[row],), 1, (name,))
        sys.exit(0)
    result = probe()
    folder = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "results")
    with open(os.path.join(folder, "decode_ptx_probe.json"), "w") as f:
        json.dump(result, f, indent=1)
