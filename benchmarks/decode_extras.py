"""The parts of a full ``bench_decode.py`` run beside the matrix of rows (calls 3-8 of
benchmarks/NOTES.md, decode section): the pure-read kernel as CUDA-graph replays, the host's launch
path, the device-copy ceiling, the bottom-right causal chunk, and a paged cache beside the
contiguous one. They reuse ``bench_decode``'s timing helpers; ``bench_decode.main`` calls them.
"""
from __future__ import annotations

import _common
from bench_decode import D, _median, _step_inputs, checked_rounds, bench_us, graph_us, host_us, make_variants

LAUNCH_PATH_ROWS = ((1, 32, 32, 4096), (1, 32, 8, 4096), (4, 32, 8, 4096), (1, 32, 8, 32768))


def read_ceiling_graph(ceilings: dict, max_bytes: float = 3e8) -> dict:
    """At the byte counts under ``max_bytes``: the pure-read kernel's best config as a CUDA-graph
    replay of 10 launches (us per launch; consecutive launches overlap their fixed costs, and
    part of K and V may stay in L2 between them), beside its do_bench time."""
    import torch

    import read_roofline

    out = {}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for nbytes, c in sorted(ceilings.items()):
        if nbytes > max_bytes:
            continue
        block, warps, programs = (int(x) for x in c["config"].split("/"))
        k, v = (torch.randn(nbytes // 4, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        partial = torch.empty(16 * sms, device="cuda", dtype=torch.float32)
        out[str(nbytes)] = {"config": c["config"], "do_bench_us": c["us"],
                            "graph_us": graph_us(lambda: read_roofline.launch(k, v, partial, block, warps, programs))}
        del k, v
    return out


def launch_path() -> dict:
    """host_us of flash_decode at the small rows: the plan's direct launch of the compiled kernel
    vs every launch through Triton's JITFunction (``kernels.decode_plan.DIRECT_LAUNCH``), beside
    SDPA default; and whether the direct launch was in use at all (Triton version dependent)."""
    import torch

    import flashlab
    from flashlab import decode
    from flashlab.kernels import decode_plan as plans

    out = {"rows": [], "direct_launch_used": None}
    for B, H, Hkv, nk in LAUNCH_PATH_ROWS:
        q, k, v, lens, sdpa, row = _step_inputs(B, H, Hkv, nk, seed=7 * nk + B)
        with torch.no_grad():
            for direct in (True, False):
                plans.DIRECT_LAUNCH = direct
                wall, issue = host_us(lambda: flashlab.flash_decode(q, k, v, lens, check_lengths=False))
                row["direct" if direct else "jit"] = {"host_us": wall, "issue_us": issue}
            plans.DIRECT_LAUNCH = True
            wall, issue = host_us(lambda: flashlab.flash_decode(q, k, v, lens))  # the default: one sync per call
            row["checked"] = {"host_us": wall, "issue_us": issue}
            wall, issue = host_us(lambda: sdpa(q, k, v))
            row["sdpa_default"] = {"host_us": wall, "issue_us": issue}
        out["rows"].append(row)
        made = [plan for plan, _ in decode._CALLS.values()]
        out["direct_launch_used"] = bool(made) and all(plan.args is not None for plan in made)
        del q, k, v
    return out


def copy_ceiling() -> dict:
    import torch

    x = torch.randn(2**30, device="cuda", dtype=torch.bfloat16)  # 2 GiB
    y = torch.empty_like(x)
    us = bench_us(lambda: y.copy_(x))
    return {"bytes_read_plus_written": 2 * x.numel() * 2, "us": us, "tb_s": 2 * x.numel() * 2 / us / 1e6}


def bottom_right_chunk(B=1, H=32, Hkv=8, nq=2048, nk=32768) -> dict:
    """Bottom-right causal chunk vs a non-causal run of equal FLOPs (Nk' = Nk - Nq/2)."""
    import torch

    import flashlab

    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(B, H, nq, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, Nq, d)
    k = torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g)
    equal = nk - nq // 2
    flops = 4.0 * B * H * nq * D * (nk - nq + (nq + 1) / 2)  # visible (query, key) pairs x 4d
    with torch.no_grad():
        o = flashlab.flash_attention(q, k, v, causal=True, causal_align="bottom_right")
        from torch.nn.attention import SDPBackend, sdpa_kernel

        mask = torch.ones(nq, nk, dtype=torch.bool, device="cuda").tril(nk - nq)  # (Nq, Nk) bottom-right
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            k4, v4 = (t.repeat_interleave(H // Hkv, 1)[:, :4] for t in (k, v))  # (B, 4, Nk, d): heads 0-3
            ref = torch.nn.functional.scaled_dot_product_attention(q[:, :4], k4, v4, attn_mask=mask).float()
        err = _common.rel_err(o[:, :4], ref)
        t_br = bench_us(lambda: flashlab.flash_attention(q, k, v, causal=True, causal_align="bottom_right"))
        t_eq = bench_us(lambda: flashlab.flash_attention(q, k[:, :, :equal], v[:, :, :equal]))
        t_top = bench_us(lambda: flashlab.flash_attention(q, k, v, causal=True))
    return {"B": B, "H": H, "Hkv": Hkv, "Nq": nq, "Nk": nk, "dtype": "bfloat16", "rel_err_vs_sdpa_mask": err,
            "bottom_right_us": t_br, "noncausal_equal_flops_us": t_eq, "noncausal_equal_flops_Nk": equal,
            "ratio_bottom_right_over_equal": t_br / t_eq, "top_left_causal_us": t_top,
            "bottom_right_tflops": flops / t_br / 1e6}


# ---------------------------------------------------------------- a paged cache (call 7)

PAGED_ROWS = ((1, 32, 8, 32768), (1, 32, 32, 131072), (16, 32, 8, 32768), (64, 32, 32, 4096))
PAGE_SIZES = (16, 256)


def paged_cache(seed=3) -> dict:
    """At PAGED_ROWS: flash_decode on the contiguous cache beside the same cache paged (pages of
    PAGE_SIZES keys; the physical blocks in a shuffled order, so logically adjacent pages lie
    apart), SDPA default on the contiguous one. With pages smaller than the config's BLOCK_N the
    kernel looks a page up per key row (``paged16``); ``paged16_tile16`` shrinks the tile to the
    page instead (what the kernel did before call 7). ``paged{page}_late``: the block-table entries
    read in the step that uses them, not a step ahead (call 7's kernel). Paged calls with ``check_lengths=False``
    (no host copy of the table). Outputs checked against SDPA's; ROUNDS rotated rounds, median."""
    import dataclasses

    import torch

    import flashlab
    from flashlab import decode
    from flashlab.kernels import decode_plan as plans

    out = []
    for B, H, Hkv, nk in PAGED_ROWS:
        g = torch.Generator(device="cuda").manual_seed(seed * nk + B + Hkv)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        sdpa = make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
        choice = decode.choice_for(q, k)
        fns = {"sdpa_default": lambda: sdpa(q, k, v), "contiguous": lambda: flashlab.flash_decode(q, k, v)}
        caches = {}
        for page in PAGE_SIZES:
            blocks = B * nk // page
            perm = torch.randperm(blocks, generator=torch.Generator().manual_seed(seed + page)).cuda()  # (blocks,)
            table = perm.view(B, nk // page).to(torch.int32)  # (B, max_blocks): logical -> physical block
            paged = []
            for t in (k, v):
                logical = t.view(B, Hkv, nk // page, page, D).permute(0, 2, 1, 3, 4).reshape(blocks, Hkv, page, D)
                phys = torch.empty_like(logical)  # (num_blocks, Hkv, page, d)
                phys[perm] = logical
                paged.append(phys)
                del logical
            caches[page] = (paged[0], paged[1], table)
            kp, vp, tb = caches[page]
            fns[f"paged{page}"] = (lambda kp=kp, vp=vp, tb=tb: flashlab.flash_decode(
                q, kp, vp, block_table=tb, check_lengths=False))
            config = decode.config_of(q, choice)
            late = dataclasses.replace(config, page_prefetch=False)  # the table read in the step (call 7)
            fns[f"paged{page}_late"] = (lambda kp=kp, vp=vp, tb=tb: plans.forward(
                q, kp, vp, None, D ** -0.5, True, choice.splits, late, block_table=tb)[0])
            if page < config.block_n:
                small = dataclasses.replace(config, block_n=page)
                fns[f"paged{page}_tile{page}"] = (lambda kp=kp, vp=vp, tb=tb, small=small: plans.forward(
                    q, kp, vp, None, D ** -0.5, True, choice.splits, small, block_table=tb)[0])
        row = {"shape": [B, H, Hkv, nk], "rule": f"{'wide' if choice.wide else 'default'}@{choice.splits}",
               "kv_bytes": 2 * k.numel() * 2}
        with torch.no_grad():
            row["rel_err"], row["runs"] = checked_rounds(fns, sdpa(q, k, v).float())
        row["us"] = {name: _median(runs) for name, runs in row["runs"].items()}
        row["tb_s"] = {name: row["kv_bytes"] / us / 1e6 for name, us in row["us"].items()}
        print(f"paged {str((B, H, Hkv, nk)):>20} {row['rule']:>10} | "
              + " ".join(f"{n}={row['us'][n]:.1f}" for n in fns)
              + f" | max err {max(row['rel_err'].values()):.4f}")
        out.append(row)
        del q, k, v, caches, fns
        torch.cuda.empty_cache()
    return {"rows": out}
