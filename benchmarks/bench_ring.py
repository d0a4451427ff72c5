"""Ring attention on several GPUs against one GPU, at the same total sequence length.

Run with one process per GPU (NVLink multicast off, as the machine's notes ask):

    NCCL_NVLS_ENABLE=0 PYTHONPATH=src python -m torch.distributed.run --nproc_per_node 2 \\
        benchmarks/bench_ring.py --out benchmarks/results/bench_ring.json

For each total length N (B = 1, H = 32, d = 128, bf16; causal with the zigzag layout, non-causal
with the contiguous one), in one run:
- ``one_gpu_ms``: flashlab.flash_attention over the whole sequence on rank 0's GPU (the baseline);
- ``ring_ms``: ring_attention over all ranks (slowest rank's median);
- ``compute_only_ms``: the same ring steps with no communication (each rank reuses its own K/V
  shard), so ``ring_ms - compute_only_ms`` is the communication time left exposed;
- ``naive_one_gpu``: whether naive attention (materialising S and P) fits one GPU at that N
  ("ok" or "out of memory"), with the bytes its S and P need.
Every variant is checked first on the same inputs: the ring's output shard against the one-GPU
output's shard. ``--dry-run`` runs tiny sizes on CPU processes (gloo, Triton interpreter).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from _common import environment, write_json  # noqa: E402  (puts src/ on sys.path)


def _median_ms(fn, dist, sync, reps: int) -> float:
    """Median over ``reps`` of the slowest rank's wall time of ``fn()`` (all ranks start together)."""
    import torch

    times = []
    for _ in range(reps):
        dist.barrier()
        sync()
        start = time.perf_counter()
        fn()
        sync()
        t = torch.tensor([time.perf_counter() - start], dtype=torch.float64,
                         device="cuda" if torch.cuda.is_available() else "cpu")  # NCCL reduces CUDA tensors
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(float(t) * 1e3)
    return sorted(times)[len(times) // 2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[32768, 65536, 131072])
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", default=None)
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on CPU processes (gloo)")
    args = parser.parse_args(argv)
    if args.dry_run:
        from flashlab.distributed import run_gloo

        rows = run_gloo(2, _dry_run_rank, ())
        print(rows[0])
        return 0

    import torch
    import torch.distributed as dist

    from flashlab.distributed import ring_attention, shard
    from flashlab.kernels.attention import flash_attention

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # before NCCL picks a device
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    sync = torch.cuda.synchronize
    rows = []
    for n in args.seq_lens:
        for causal, layout in ((True, "zigzag"), (False, "contiguous")):
            g = torch.Generator(device="cuda").manual_seed(n)
            shape = (1, args.heads, n, args.head_dim)
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
            local = [shard(x, rank, world, layout).contiguous() for x in (q, k, v)]
            flops = 4 * args.heads * n * n * args.head_dim * (0.5 if causal else 1.0)
            row = dict(n=n, causal=causal, layout=layout, world_size=world, heads=args.heads, d=args.head_dim)
            # -- correctness first: the ring's shard against the one-GPU output's shard
            with torch.no_grad():
                o_ring = ring_attention(*local, causal=causal, layout=layout)
                o_one = flash_attention(q, k, v, causal=causal)
            ref = shard(o_one, rank, world, layout).float()
            err = torch.tensor([float((o_ring.float() - ref).norm() / ref.norm())], device="cuda")
            dist.all_reduce(err, op=dist.ReduceOp.MAX)
            row["rel_err_vs_one_gpu"] = float(err)
            del o_ring, o_one, ref
            # -- timing: the ring, the ring without communication, one GPU (rank 0; others wait)
            with torch.no_grad():
                row["ring_ms"] = _median_ms(lambda: ring_attention(*local, causal=causal, layout=layout),
                                            dist, sync, args.reps)
                row["compute_only_ms"] = _median_ms(lambda: _compute_only(local, causal, layout, rank, world),
                                                    dist, sync, args.reps)
                one = torch.zeros(1, device="cuda")
                if rank == 0:
                    one[0] = _median_one(lambda: flash_attention(q, k, v, causal=causal), sync, args.reps)
                dist.broadcast(one, 0)
                row["one_gpu_ms"] = float(one)
            row["exposed_comm_ms"] = row["ring_ms"] - row["compute_only_ms"]
            row["speedup_vs_one_gpu"] = row["one_gpu_ms"] / row["ring_ms"]
            row["ring_tflops"] = flops / row["ring_ms"] / 1e9
            row["one_gpu_tflops"] = flops / row["one_gpu_ms"] / 1e9
            row["naive_s_and_p_gib"] = 2 * args.heads * n * n * 2 / 2**30  # S and P in bf16
            row["naive_one_gpu"] = _naive_fits(q, k, v, causal) if rank == 0 else None
            del q, k, v, local
            torch.cuda.empty_cache()
            if rank == 0:
                print({k2: (round(v2, 3) if isinstance(v2, float) else v2) for k2, v2 in row.items()}, flush=True)
            rows.append(row)
    if rank == 0 and args.out:
        write_json(args.out, dict(environment=environment(), world_size=world, rows=rows))
    dist.destroy_process_group()
    return 0


def _median_one(fn, sync, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def _compute_only(local, causal, layout, rank, world):
    """The ring's attention work without its messages: each step computes against the chunk
    indices of the shard it would hold, on this rank's own K/V data (same shapes, same work)."""
    from flashlab.distributed import _block_attention, chunks_of, merge_partials, pair_kind

    q, k, v = local
    mine = chunks_of(rank, world, layout)
    size = q.shape[-2] // len(mine)
    scale = 1.0 / math.sqrt(q.shape[-1])
    states = [None] * len(mine)
    for step in range(world):
        source = (rank - step) % world
        for i, a in enumerate(mine):
            for j, b in enumerate(chunks_of(source, world, layout)):
                kind = pair_kind(a, b, causal)
                if kind is None:
                    continue
                o, lse = _block_attention(q[..., i * size:(i + 1) * size, :], k[..., j * size:(j + 1) * size, :],
                                          v[..., j * size:(j + 1) * size, :], kind == "diagonal", scale)
                states[i] = (o, lse) if states[i] is None else merge_partials(*states[i], o, lse)
    return states


def _naive_fits(q, k, v, causal) -> str:
    import torch

    from _common import naive_attention

    try:
        with torch.no_grad():
            naive_attention(q, k, v, causal, 1.0 / math.sqrt(q.shape[-1]))
        torch.cuda.synchronize()
        return "ok"
    except torch.cuda.OutOfMemoryError:
        return "out of memory"
    finally:
        torch.cuda.empty_cache()


def _dry_run_rank(rank, world):
    from flashlab.distributed import check_against_single_device

    return check_against_single_device(rank, world, [((1, 2, 64, 16), True, "zigzag"), ((1, 2, 64, 16), False,
                                                                                         "contiguous")])


if __name__ == "__main__":
    sys.exit(main())
