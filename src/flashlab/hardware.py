"""GPU numbers the course uses, each with where it comes from.

Two kinds of number live here and are never mixed silently:

* **measured** ceilings for the H200 the course was benchmarked on
  (``benchmarks/anchors/README.md``, measured 2026-11-29, torch 2.11 + cu130):
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
  H100 SXM and on the H200 (the course's H200 reports ``sm_count`` 132 in the ``environment``
  block of every ``benchmarks/results/*.json``).
* Register file: 64 K 32-bit registers = 256 KiB per SM on both (CUDA C++ Programming Guide,
  table *Technical Specifications per Compute Capability*).

NVIDIA's "KB" here means KiB (1024 bytes), as the CUDA attribute values in bytes show. Queried
on the course's H200 (``torch.cuda.get_device_properties(0)``, torch 2.11, 2026-11-29):
132 SMs, ``shared_memory_per_multiprocessor`` = 233,472 B (228 KiB),
``shared_memory_per_block_optin`` = 232,448 B (227 KiB: one thread block may use 1 KiB less
than the SM holds; the Hopper Tuning Guide gives the same 227 KB), ``regs_per_multiprocessor`` =
65,536 (x 4 B = 256 KiB), ``L2_cache_size`` = 62,914,560 B (60 MiB). Caveat: only the SM count
of that query is saved in the repository (above); the other attribute values were read in the
session that benchmarked the course and are not in a results file, so re-query them
(the call above) before relying on them. The *aggregate* over all SMs
is per-SM x SM count: it is not one memory that a single thread block can use; each thread
block sees at most its own SM's shared memory.

Notebook 00 prints these numbers with :func:`memory_table` and :func:`ceilings_table`.
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
    source="benchmarks/anchors/README.md: 8192^3 bf16 matmul ~790 TFLOP/s; D2D copy ~4.3 TB/s")
H200_DATASHEET = Ceilings(
    "H200 (datasheet)", flops_per_s=989e12, hbm_bytes_per_s=4.8e12,
    source="NVIDIA H200 datasheet: 4.8 TB/s HBM3e, 989 TFLOP/s dense bf16")

H200_L2_BYTES = 60 * MIB  # queried on the course's H200 (L2_cache_size = 62,914,560 B)
H200_SMEM_PER_BLOCK = 227 * KIB  # queried: shared_memory_per_block_optin = 232,448 B


@dataclass(frozen=True)
class DramMeasurement:
    """DRAM bytes of one forward pass measured with Nsight Compute on the course's H200."""

    name: str
    read_bytes: int
    write_bytes: int
    batch: int
    heads: int
    n: int
    d: int
    itemsize: int
    source: str = ("benchmarks/anchors/h200_ncu_naive_vs_flash.csv (ncu dram__bytes_read/write.sum, fp16, "
                   "forward, not causal; ncu flushes caches between replays and under-counts writes "
                   "still in L2 at kernel end)")

    @property
    def matmul_flops(self) -> int:
        """4 B H N^2 d: S = Q K^T and O = P V, 2 FLOPs per multiply-add."""
        return 4 * self.batch * self.heads * self.n * self.n * self.d

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes


# B=1, H=16, N=4096, d=64; sums of the csv rows of each implementation's kernels.
NCU_NAIVE = DramMeasurement(
    "naive (4 kernels: QKᵀ, scale, softmax, PV)",
    read_bytes=17_019_136 + 536_902_656 + 536_883_456 + 545_294_080,
    write_bytes=507_552_768 + 511_039_744 + 516_609_792 + 25_856, batch=1, heads=16, n=4096, d=64, itemsize=2)
# the second of them alone: S * scale in an elementwise kernel of its own (Algorithm 0 has no such pass)
NCU_NAIVE_SCALE = DramMeasurement(
    "naive's scale kernel (S * scale)", read_bytes=536_902_656, write_bytes=511_039_744,
    batch=1, heads=16, n=4096, d=64, itemsize=2)
NCU_FLASH = DramMeasurement(
    "FlashAttention-2 (pytorch_flash kernel, 128 x 128 tiles)",
    read_bytes=25_243_136, write_bytes=248_064, batch=1, heads=16, n=4096, d=64, itemsize=2)
H200_HBM_BYTES = 141 * 10**9  # NVIDIA H200 datasheet: 141 GB of HBM3e (decimal GB)


# -- tables for notebook 00 ------------------------------------------------------------------------
def memory_table() -> str:
    """The H200's memory hierarchy, one level a line: its size and where the number comes from.

    Registers and shared memory per SM, shared memory summed over all SMs (not one pool: a thread
    block sees only its own SM's), the L2 cache and the HBM.
    """
    from .viz.style import format_bytes

    rows = [
        ("registers, per SM", format_bytes(H200.registers_per_sm), "CUDA programming guide"),
        ("shared memory (SRAM), per SM", format_bytes(H200.smem_per_sm), H200.source),
        ("shared memory, all SMs together", format_bytes(H200.smem_aggregate), f"{H200.sms} SMs x per-SM"),
        ("L2 cache", format_bytes(H200_L2_BYTES), "queried on the course's H200"),
        ("HBM3e", f"{H200_HBM_BYTES / 1e9:.0f} GB", "NVIDIA H200 datasheet"),
    ]
    return "\n".join(f"{name:<34} {size:>12}   ({source})" for name, size, source in rows)


def _ceiling_line(name: str, tflops: float, tbps: float, source: str) -> str:
    return (f"{name:<18} {tflops:6.0f} TFLOP/s bf16   {tbps:4.1f} TB/s HBM   "
            f"ridge point {tflops / tbps:5.0f} FLOP/byte   ({source})")


def ceilings_table(bench: dict | None = None, ceilings=(H200_MEASURED, H200_DATASHEET)) -> str:
    """Peak bf16 FLOP/s, HBM bandwidth and their ratio, the ridge point, one ceiling a line.

    ``ceilings``: :class:`Ceilings` to list (the measured H200 and its datasheet by default).
    ``bench``: the ``"bench_attention"`` entry of ``benchmarks/results/bench_attention.json``
    (``course.load_results``), or None; when given, a last line shows the same two ceilings as
    re-measured in that run (its matmul and copy anchors), dated.
    """
    if not ceilings or not all(isinstance(c, Ceilings) for c in ceilings):
        raise ValueError(f"ceilings={ceilings!r} must be a non-empty sequence of hardware.Ceilings")
    lines = [_ceiling_line(c.name, c.flops_per_s / 1e12, c.hbm_bytes_per_s / 1e12, c.source) for c in ceilings]
    if bench is not None:
        try:
            tflops = float(bench["ceilings"]["matmul_bf16_8192_tflops"])
            tbps = float(bench["ceilings"]["copy_tb_per_s_read_plus_write"])
            date = str(bench["environment"]["date_utc"])[:10]
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError("bench must be the 'bench_attention' entry of bench_attention.json, with "
                             "ceilings.matmul_bf16_8192_tflops, ceilings.copy_tb_per_s_read_plus_write and "
                             f"environment.date_utc; reading it failed at {error!r}") from None
        lines.append(_ceiling_line("H200 (bench run)", tflops, tbps,
                                   f"benchmarks/results/bench_attention.json, {date}"))
    return "\n".join(lines)
