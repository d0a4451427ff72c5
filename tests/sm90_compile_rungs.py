"""Compile the staged rungs for an sm90 GPU on a machine that has none; print one line per kernel.

    python tests/sm90_compile_rungs.py

The interpreter runs any Python inside a kernel; the compiler does not. This compiles (without
launching) the forward rung v2, the backward's dK/dV and dQ kernels and the Hopper rung with a
sliding window, bottom-right alignment and a ``@triton.jit`` mask_mod, so a kernel that only the
interpreter accepts fails here. The stand-in driver is tests/standin_gpu.py's (run in
its own process: it replaces Triton's active driver for the rest of the process).
"""
import sys

import torch
import triton
import triton.language as tl  # noqa: F401  (a @triton.jit mask_mod needs it among its globals)

from standin_gpu import target_gpu  # tests/standin_gpu.py (this script's folder is on sys.path)


@triton.jit
def sliding_window_33(q_idx, kv_idx):
    return (kv_idx <= q_idx) & (kv_idx > q_idx - 33)


def main() -> int:
    target_gpu(90)
    from triton.tools.tensor_descriptor import TensorDescriptor

    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import flash_bwd, flash_fwd, flash_fwd_hopper
    from flashlab.kernels.visible import block_lists, block_ranges

    n, d = 300, 64
    q = torch.zeros(1, 2, n, d, dtype=torch.float16)  # (B, H, N, d): only dtype and alignment matter
    lse = torch.zeros(1, 2, n, dtype=torch.float32)
    st = q.stride()
    specs = {"window+bottom_right": AttnSpec(causal=True, causal_align="bottom_right", window=33, scale=0.125),
             "mask_mod": AttnSpec(mask_mod=sliding_window_33, scale=0.125)}
    failed = 0
    for name, spec in specs.items():
        flags = dict(**spec.kernel_args(n, n), **spec.mask_args(), DOT_F32=False, DOT_PRECISION="tf32")
        _, _, args, consts = flash_fwd._out_and_args(q, q, q, spec)
        launches = {
            "v2": lambda: flash_fwd._fwd_v2_exp2_causal.warmup(
                *args, **consts, N_Q_BUCKET=512, N_K_BUCKET=512, BLOCKS=block_lists(spec, n, n, 128, 64, "cpu"),
                BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3, grid=(3, 2)),
            "bwd_dkdv": lambda: flash_bwd._bwd_dkdv.warmup(
                q, q, q, q, lse, lse, q, q, 0.125, *st, *st, *st, *st, *st, *st, 2, 1, n, n, HEAD_DIM=d, D_HEAD=d,
                **flags, RANGES=block_ranges(spec, n, n, 32, 64, "k", "cpu"), BLOCK_M=32, BLOCK_N=64,
                num_warps=4, num_stages=3, grid=(5, 2)),
            "bwd_dq": lambda: flash_bwd._bwd_dq.warmup(
                q, q, q, q, lse, lse, q, 0.125, *st, *st, *st, *st, *st, 2, 1, n, n, HEAD_DIM=d, D_HEAD=d,
                **flags, RANGES=block_ranges(spec, n, n, 64, 32, "q", "cpu"), BLOCK_M=64, BLOCK_N=32,
                num_warps=4, num_stages=3, grid=(5, 2)),
        }
        if spec.mask_mod is None:
            heads = q.view(-1, n, d)  # (B*H, N, d)
            desc_q = TensorDescriptor.from_tensor(heads, [1, 128, d])
            desc_kv = TensorDescriptor.from_tensor(heads, [1, 64, d])
            launches["v4_hopper"] = lambda: flash_fwd_hopper._flash_fwd_hopper_kernel.warmup(
                desc_q, desc_kv, desc_kv, q, lse, 0.18, n, n, 2, 1, HEAD_DIM=d, BLOCK_M=128, BLOCK_N=64,
                **spec.kernel_args(n, n), WARP_SPECIALIZE=False, PERSISTENT=False, num_warps=4, num_stages=2,
                grid=(3, 2))
        for kernel, launch in launches.items():
            try:
                launch()
                print(f"ok {kernel} {name}")
            except Exception as err:  # report every kernel, then fail
                failed += 1
                print(f"FAILED {kernel} {name}: {err!r}"[:2000])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
