"""Roofline of attention: FLOPs per HBM byte against a GPU's ridge point.

Each point is one kernel: its FLOPs (:mod:`flashlab.flops`) over the HBM bytes it moves
(:mod:`flashlab.traffic`). Attainable throughput is ``min(peak, intensity x bandwidth)``; a kernel
left of the ridge point (peak / bandwidth) is memory-bound. Default ceilings: the H200 *measured*
ones in ``benchmarks/anchors/README.md`` (~790 TFLOP/s bf16 matmul, ~4.3 TB/s copy), ridge ~184 FLOP/B;
the datasheet roof (989 TFLOP/s, 4.8 TB/s) is drawn dashed for comparison.

Naive attention runs as three kernels (paper Algorithm 0): ``S = Q K^T`` (writes S to HBM),
``P = softmax(S)`` (reads S, writes P), ``O = P V`` (reads P and V). Their bytes follow the
accounting rules of docs/ARCHITECTURE.md and sum to :func:`flashlab.traffic.naive_traffic`.
Softmax is not a matmul: it is counted by :func:`flashlab.flops.softmax_flops` (5 element
operations per score, a rough count), and it runs on CUDA cores, not Tensor Cores,
so the bf16 Tensor Core roof overstates what it could reach; it is memory-bound either way.

In this model each K, V byte loaded by the FA2 forward serves ``block_q`` query rows, so its
intensity is about 2 x block_q / itemsize FLOPs per byte (a tile does 2 block_q block_k (d + dv)
FLOPs on block_k (d + dv) x itemsize loaded bytes): 128 x 128 tiles at 2 bytes (the FA2 kernel measured in
``benchmarks/anchors/h200_ncu_naive_vs_flash.csv`` uses ``Flash_fwd_kernel_traits<64, 128, 128, ...>``)
put it at ~128 FLOP/B, under the ridge. A real GPU does better: thread blocks running at the same
time share K, V through the 60 MiB L2, and ncu measured the whole FA2 forward reading only Q, K, V
once from DRAM (25.2 MB at B=1, H=16, N=4096, d=64). When the figure's shape is that one, the two
measured points (naive's 4 kernels and FA2, DRAM bytes) are drawn hollow beside the model's.

Decode is one query row against a KV cache of N keys (``nq=1``): every K and V byte is read for
about 4 FLOPs per (key, feature) pair, so its intensity stays near 1 FLOP/byte at 2-byte elements
whatever the algorithm. That is why FlashAttention's saving (never writing S and P) helps prefill
(many query rows share each K, V tile) far more than decode. The figure states it as a number:
the roofline time of naive's kernels over the flash kernel's, for prefill (N queries) and for
decode (1 query), each kernel taking ``max(FLOPs / peak, bytes / bandwidth)``
(:func:`roofline_seconds`).
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import hardware
from . import style


@dataclass(frozen=True)
class RooflinePoint:
    name: str
    kind: str  # "naive", "fa2", "backward", "decode": picks the colour
    flops: float
    hbm_bytes: float
    intensity: float  # FLOPs per HBM byte
    attainable: float  # FLOP/s: min(peak, intensity x bandwidth)


@dataclass(frozen=True)
class RooflineData:
    points: tuple[RooflinePoint, ...]
    ceilings: hardware.Ceilings
    n: int
    d: int
    itemsize: int
    causal: bool
    block_q: int
    block_k: int
    prefill_seconds: tuple[float, float]  # (naive's 3 kernels, flash forward): roofline time, N queries
    decode_seconds: tuple[float, float]  # (naive's 3 kernels, flash forward): roofline time, 1 query

    @property
    def prefill_speedup(self) -> float:
        """Roofline time of naive over flash for prefill (N queries against N keys)."""
        return self.prefill_seconds[0] / self.prefill_seconds[1]

    @property
    def decode_speedup(self) -> float:
        """Roofline time of naive over flash for decode (1 query against N keys)."""
        return self.decode_seconds[0] / self.decode_seconds[1]


def roofline_seconds(flops: float, hbm_bytes: float, ceilings: hardware.Ceilings) -> float:
    """The roofline's time for one kernel: max(FLOPs / peak FLOP/s, bytes / bandwidth), in seconds."""
    return max(flops / ceilings.flops_per_s, hbm_bytes / ceilings.hbm_bytes_per_s)


def naive_kernel_costs(nq: int, nk: int, d: int, dv: int | None = None, itemsize: int = 2,
                       causal: bool = False) -> list[tuple[str, float, float]]:
    """[(kernel, flops, hbm_bytes)] for naive attention's three kernels (one head).

    Causal naive still computes and stores the full S and P (ARCHITECTURE.md), so ``causal``
    changes nothing here.
    """
    from ..flops import softmax_flops

    dv = d if dv is None else dv
    qk = (2 * nq * nk * d, (nq * d + nk * d + nq * nk) * itemsize)  # read Q, K; write S
    softmax = (softmax_flops(nq, nk), 2 * nq * nk * itemsize)  # read S; write P
    pv = (2 * nq * nk * dv, (nq * nk + nk * dv + nq * dv) * itemsize)  # read P, V; write O
    return [("naive S=QKᵀ", *qk), ("naive softmax", *softmax), ("naive O=PV", *pv)]


def roofline_data(n: int = 4096, d: int = 64, itemsize: int = 2, causal: bool = False,
                  block_q: int = 128, block_k: int = 128,
                  ceilings: hardware.Ceilings = hardware.H200_MEASURED) -> RooflineData:
    """Intensity and attainable FLOP/s of naive's kernels, flash forward/backward and decode."""
    from .. import flops as fl
    from .. import traffic as tr

    for name, value in (("n", n), ("d", d), ("itemsize", itemsize), ("block_q", block_q), ("block_k", block_k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")
    forward = dict(block_q=block_q, block_k=block_k, itemsize=itemsize)
    naive = [(name, "naive", f, b) for name, f, b in naive_kernel_costs(n, n, d, itemsize=itemsize, causal=causal)]
    flash_fwd = ("flash forward", "fa2", fl.attention_flops(n, n, d, causal=causal, pass_="forward",
                                                            block_q=block_q, block_k=block_k),
                 tr.fa2_forward_traffic(n, n, d, causal=causal, **forward).total)
    flash_bwd = ("flash backward", "backward", fl.attention_flops(n, n, d, causal=causal, pass_="backward",
                                                                  block_q=block_q, block_k=block_k),
                 tr.backward_traffic(n, n, d, causal=causal, **forward).total)
    # decode: one query row against a KV cache of n keys (causal changes nothing: the row sees every key)
    naive_decode = naive_kernel_costs(1, n, d, itemsize=itemsize)  # [(kernel, flops, bytes)] x 3
    flash_decode = (f"flash decode (1 query, {n} keys)", "decode", fl.attention_flops(1, n, d, pass_="forward"),
                    tr.fa2_forward_traffic(1, n, d, **forward).total)
    costs = [*naive, flash_fwd, flash_bwd,
             (f"naive decode (3 kernels, 1 query, {n} keys)", "decode",
              sum(f for _, f, _ in naive_decode), sum(b for _, _, b in naive_decode)),
             flash_decode]
    if (n, d, itemsize, causal) == (4096, 64, 2, False):  # the shape measured with ncu on the H200
        for m in (hardware.NCU_NAIVE, hardware.NCU_FLASH):
            kind = "naive" if m is hardware.NCU_NAIVE else "fa2"
            costs.append((f"ncu DRAM bytes: {m.name.split(' (')[0]} forward", kind, m.matmul_flops, m.total_bytes))
    points = []
    for name, kind, flop_count, nbytes in costs:
        intensity = flop_count / nbytes
        points.append(RooflinePoint(name, kind, float(flop_count), float(nbytes), intensity,
                                    float(ceilings.attainable(intensity))))

    def seconds(kernels) -> float:
        return sum(roofline_seconds(f, b, ceilings) for *_, f, b in kernels)

    prefill = (seconds(naive), seconds([flash_fwd]))
    decode = (seconds(naive_decode), seconds([flash_decode]))
    return RooflineData(tuple(points), ceilings, n, d, itemsize, causal, block_q, block_k, prefill, decode)


def roofline_table(data: RooflineData | None = None, **kwargs) -> str:
    """One line per kernel of :func:`roofline_data`: arithmetic intensity (FLOPs per HBM byte) and
    the attainable FLOP/s under the roof, min(peak, intensity x bandwidth). ``kwargs`` go to
    :func:`roofline_data` when ``data`` is None."""
    if data is None:
        data = roofline_data(**kwargs)
    elif not isinstance(data, RooflineData) or kwargs:
        raise ValueError(f"data={data!r} must be a RooflineData (from roofline_data), with no other arguments")
    return "\n".join(f"{p.name:<45} {p.intensity:8.1f} FLOP/byte -> at most {p.attainable / 1e12:6.1f} TFLOP/s"
                     for p in data.points)


def plot_roofline(data: RooflineData | None = None, figsize=(9, 6.8), dpi: int = 100, **kwargs):
    """View 5: the roofline with one marker per kernel. ``kwargs`` go to :func:`roofline_data`."""
    import numpy as np

    data = data or roofline_data(**kwargs)
    fig, ax = style.new_figure(figsize=figsize, dpi=dpi)
    lo = min(p.intensity for p in data.points) / 4
    hi = max(max(p.intensity for p in data.points), data.ceilings.ridge_point) * 8
    x = np.geomspace(lo, hi, 200)
    ax.loglog(x, data.ceilings.attainable(x) / 1e12, color="black", linewidth=2,
              label=f"roof, {data.ceilings.name}: {data.ceilings.flops_per_s / 1e12:.0f} TFLOP/s, "
                    f"{data.ceilings.hbm_bytes_per_s / 1e12:.1f} TB/s")
    sheet = hardware.H200_DATASHEET
    if sheet is not data.ceilings:
        ax.loglog(x, sheet.attainable(x) / 1e12, color="black", linestyle="--", linewidth=0.8,
                  label=f"roof, {sheet.name}: {sheet.flops_per_s / 1e12:.0f} TFLOP/s, {sheet.hbm_bytes_per_s / 1e12:.1f} TB/s")
    ridge = data.ceilings.ridge_point
    ax.axvline(ridge, color=style.BOUND, linestyle=":", linewidth=1)
    ax.text(ridge * 1.08, data.ceilings.flops_per_s / 1e12 / 30, f"ridge point\n{ridge:.0f} FLOP/B\n{data.ceilings.name}",
            color=style.BOUND, fontsize=8)
    ax.fill_betweenx([1e-3, 1e5], lo, ridge, color=style.HBM, alpha=0.05)
    ax.text(lo * 1.3, data.ceilings.flops_per_s / 1e12 * 1.5, "memory-bound", color=style.HBM, fontsize=9)
    ax.text(ridge * 1.5, data.ceilings.flops_per_s / 1e12 * 1.5, "compute-bound", color=style.BOUND, fontsize=9)
    markers = {"naive": "s", "fa2": "o", "backward": "D", "decode": "P"}
    drawn: list[float] = []  # intensities already drawn: a point on top of one is drawn smaller
    for p in data.points:
        measured = p.name.startswith("ncu")
        colour = style.ALGORITHM_COLOURS[p.kind]
        marker = "s" if "naive" in p.name else markers[p.kind]
        under = sum(abs(p.intensity / x - 1) < 0.06 for x in drawn)
        drawn.append(p.intensity)
        ax.loglog(p.intensity, p.attainable / 1e12, marker, markersize=max(10 - 3.5 * under, 3),
                  markerfacecolor="none" if measured else colour, markeredgecolor=colour if measured else "black",
                  markeredgewidth=2 if measured else 1, linestyle="none", zorder=3 + under,
                  label=f"{p.name}: {p.intensity:.3g} FLOP/B")
    ax.text(0.98, 0.04, f"roofline time, naive ÷ flash forward:\n"
                        f"prefill ({data.n} queries): {data.prefill_speedup:.2f}×\n"
                        f"decode (1 query): {data.decode_speedup:.2f}×",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=9,
            bbox=dict(facecolor="white", edgecolor=style.BOUND, boxstyle="round", alpha=0.9))
    ax.set_xlim(lo, hi)
    ax.set_ylim(data.ceilings.attainable(lo) / 1e12 / 3, data.ceilings.flops_per_s / 1e12 * 4)
    ax.set_xlabel("arithmetic intensity (FLOPs per HBM byte)")
    ax.set_ylabel("attainable TFLOP/s = min(peak, intensity × bandwidth)")
    causal = ", causal" if data.causal else ""
    ax.set_title(f"Roofline: N={data.n}, d={data.d}, {data.itemsize}-byte elements{causal}; "
                 f"flash tiles block_q={data.block_q}, block_k={data.block_k}\n"
                 "filled: HBM↔SRAM bytes of the model (no L2 reuse); hollow: DRAM bytes measured by ncu;\n"
                 "roofs: H200 measured (8192³ bf16 matmul, device copy; benchmarks/anchors) and datasheet",
                 fontsize=10)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return fig
