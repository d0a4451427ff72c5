"""Compile the split-KV decode kernel's TMA path for an sm90 GPU on a machine that has none.

    python tests/sm90_compile_decode.py

For each query-tile height (16, 32, 64 rows) the kernel is compiled with the wide config's
128-key tiles at d = 128 in bf16, with the ring depth ``tma_stages`` gives a one-wave grid (the
deepest it asks for), unsplit and split (fused combine). Prints one JSON line: a list of
{"block_m", "stages", "split", "shared"} (bytes of shared memory). Run in its own process: the
stand-in replaces Triton's driver for the rest of the process (tests/standin_gpu.py).
"""
import json

from standin_gpu import target_gpu  # tests/standin_gpu.py (this script's folder is on sys.path)


def main() -> None:
    import torch

    target_gpu(90)
    from triton.tools.tensor_descriptor import TensorDescriptor

    from flashlab.kernels.flash_decode import _decode_split_kv, config_for, tma_stages

    d, n = 128, 1024
    config = config_for(d, torch.bfloat16, wide=True)
    out = []
    for block_m in (16, 32, 64):
        for split in (1, 4):
            stages = tma_stages(config, 1, 132, block_m)
            q = torch.zeros(2, 2, 1, d, dtype=torch.bfloat16)  # CPU tensors: only dtypes and alignment matter
            k, v = (torch.zeros(2, 2, n, d, dtype=torch.bfloat16) for _ in range(2))
            lse, part = torch.zeros(2, 2, 1), torch.zeros(4, 4)
            kd, vd = (TensorDescriptor(t.view(-1, d), [4 * n, d], [d, 1], [config.block_n, d]) for t in (k, v))
            strides = dict(zip(("stride_qz", "stride_qh", "stride_qm", "stride_qk"), q.stride()))
            strides.update(zip(("stride_kz", "stride_kh", "stride_kn", "stride_kk"), k.stride()))
            strides.update(zip(("stride_vz", "stride_vh", "stride_vn", "stride_vk"), v.stride()))
            strides.update(zip(("stride_oz", "stride_oh", "stride_om", "stride_ok"), q.stride()))
            compiled = _decode_split_kv.warmup(
                Q=q, K=k, V=v, SeqLens=lse, BlockTable=lse, Out=q, LSE=lse, OPart=part, LSEPart=part,
                Counters=torch.zeros(4, dtype=torch.int32), sm_scale=0.1, KDesc=kd, VDesc=vd, **strides,
                stride_bz=0, stride_bb=0, H_KV=2, GROUP=1, N_Q=1, N_MAX=n, NUM_SPLITS=split, NUM_BLOCKS=1,
                HEAD_DIM=d, D_HEAD=d, BLOCK_M=block_m, BLOCK_N=config.block_n, PAGED=False, PAGE_SIZE=1,
                PAGE_PREFETCH=True, EVICT_FIRST=False, TMA=True, HAS_SEQLENS=True, CAUSAL=True, SPLIT=split > 1,
                FUSED_COMBINE=split > 1, COMBINE_STEP=8, DOT_F32=False, DOT_PRECISION="tf32",
                grid=(1,), num_warps=config.num_warps, num_stages=stages)
            out.append(dict(block_m=block_m, stages=stages, split=split, shared=compiled.metadata.shared))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
