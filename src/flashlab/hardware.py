"""GPU numbers the course uses, each with where it comes from.

Two kinds of number live here and are never mixed silently:

* **measured** ceilings for the H200 the course was benchmarked on
  (``../shared/anchors/README.md``, measured 2026-11-29, torch 2.11 + cu130):
  ~4.3 TB/s for a device-to-device copy (bytes read + bytes written, divided by time) and
  ~790 TFLOP/s for one 8192 x 8192 x 8192 bf16 matmul;
* **datasheet** peaks (NVIDIA H200 product page / datasheet): 4.8 TB/s HBM3e bandwidth and
  ~990 TFLOP/s dense bf16 Tensor Core throughput (the datasheet's 1,979 TFLOP/s assumes 2:4 sparsity).

On-chip memory per streaming multiprocessor (SM), from NVIDIA's tuning guides:

* A100 (compute capability 8.0): 192 KB of combined L1 + shared memory per SM, of which up to
  164 KB can be shared memory ("NVIDIA Ampere GPU Architecture Tuning Guide", section
  *Unified Shared Memory/L1/Texture Cache*: carveouts 0, 8, 16, 32, 64, 100, 132 or 164 KB per SM).
  108 SMs on an A100 SXM.
* H100 / H200 (compute capability 9.0): 256 KB of combined L1 + shared memory per SM, of which up
  to 228 KB can be shared memory ("NVIDIA Hopper Tuning Guide", same section). 132 SMs on the
  H100 SXM and on the H200 (the anchors' machine reports 132).
* Register file: 64 K 32-bit registers = 256 KiB per SM on both (CUDA C++ Programming Guide,
  table *Technical Specifications per Compute Capability*).

NVIDIA's "KB" here means KiB (1024 bytes), as the CUDA attribute values in bytes show
(228 KB = 233,472 bytes). The *aggregate* over all SMs is per-SM x SM count: it is not one memory
that a single thread block can use; each thread block sees at most its own SM's shared memory.
"""
from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True)
class SramSpec:
    """On-chip memory of one GPU model."""

    name: str
    sms: int  # streaming multiprocessors on the part
    smem_per_sm: int  # bytes: the largest shared-memory carveout per SM
    l1_smem_per_sm: int  # bytes: combined L1 + shared memory per SM
    registers_per_sm: int  # bytes: register file per SM
    source: str

    @property
    def smem_aggregate(self) -> int:
        """Bytes of shared memory summed over all SMs (per SM x SMs; not one addressable pool)."""
        return self.smem_per_sm * self.sms


A100 = SramSpec("A100 SXM", sms=108, smem_per_sm=164 * KIB, l1_smem_per_sm=192 * KIB,
                registers_per_sm=256 * KIB, source="NVIDIA Ampere GPU Architecture Tuning Guide")
H100 = SramSpec("H100 SXM", sms=132, smem_per_sm=228 * KIB, l1_smem_per_sm=256 * KIB,
                registers_per_sm=256 * KIB, source="NVIDIA Hopper Tuning Guide")
H200 = SramSpec("H200", sms=132, smem_per_sm=228 * KIB, l1_smem_per_sm=256 * KIB,
                registers_per_sm=256 * KIB, source="NVIDIA Hopper Tuning Guide (same SM as H100)")
SRAM_SPECS = (A100, H100, H200)


@dataclass(frozen=True)
class Ceilings:
    """Peak compute and memory bandwidth of one GPU, with where the numbers come from."""

    name: str
    flops_per_s: float  # bf16 Tensor Core FLOP/s (2 FLOPs per multiply-add)
    hbm_bytes_per_s: float  # HBM bytes per second (reads + writes)
    source: str

    @property
    def ridge_point(self) -> float:
        """FLOPs per HBM byte above which a kernel can be compute-bound."""
        return self.flops_per_s / self.hbm_bytes_per_s

    def attainable(self, intensity):
        """Roofline: min(peak FLOP/s, intensity x bandwidth); works on floats and NumPy arrays."""
        import numpy as np

        return np.minimum(self.flops_per_s, np.asarray(intensity, dtype=float) * self.hbm_bytes_per_s)


H200_MEASURED = Ceilings(
    "H200 (measured)", flops_per_s=790e12, hbm_bytes_per_s=4.3e12,
    source="shared/anchors/README.md: 8192^3 bf16 matmul ~790 TFLOP/s; D2D copy ~4.3 TB/s")
H200_DATASHEET = Ceilings(
    "H200 (datasheet)", flops_per_s=989e12, hbm_bytes_per_s=4.8e12,
    source="NVIDIA H200 datasheet: 4.8 TB/s HBM3e, 989 TFLOP/s dense bf16")

H200_L2_BYTES = 60 * 1000 * 1000  # ~60 MB L2 (shared/anchors brief; Hopper whitepaper: 50 MB on H100 SXM)
