"""``flashlab traffic`` and ``flashlab tiles``: write the figures as PNG files (and the tile schedule as a GIF).

Both return an exit code: 0 on success, 2 for an invalid option (the message names it).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PASSES = {"forward": "fa2", "forward-fa1": "fa1", "backward": "backward"}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|k|kib|m|mib)?\s*$", re.IGNORECASE)
_UNIT = {None: 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2}


def parse_bytes(text: str) -> int:
    """'233472' -> 233472; '228KiB', '228k' -> 233472; '1MiB' -> 1048576 (binary units)."""
    match = _SIZE.match(str(text))
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give bytes (233472) or KiB/MiB (228KiB, 1MiB)")
    value = float(match.group(1)) * _UNIT[match.group(2) and match.group(2).lower()]
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive whole number of bytes")
    return int(value)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a positive integer")
    return value


def _itemsize(text: str) -> int:
    value = _positive(text)
    if value not in (1, 2, 4, 8):
        raise argparse.ArgumentTypeError(f"{value} must be 1, 2, 4 or 8 (bytes per element)")
    return value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--d", type=_positive, default=64, help="head dimension (default 64)")
    parser.add_argument("--block-q", type=_positive, default=64, help="query rows per tile (default 64)")
    parser.add_argument("--block-k", type=_positive, default=64, help="key rows per tile (default 64)")
    parser.add_argument("--causal", action="store_true", help="causal attention (top-left aligned)")
    parser.add_argument("--itemsize", type=_itemsize, default=2, help="bytes per element of Q, K, V, O (default 2)")
    parser.add_argument("--out", type=Path, default=Path("flashlab_figures"), help="output folder")


def _parse(parser: argparse.ArgumentParser, argv) -> argparse.Namespace | int:
    try:
        return parser.parse_args(list(argv))
    except SystemExit as stop:  # argparse printed the message naming the option
        return int(stop.code or 0)


def _save(fig, path: Path, written: list[Path]) -> None:
    from .style import pyplot

    fig.savefig(path)
    pyplot().close(fig)
    written.append(path)


def traffic_main(argv=()) -> int:
    """Write traffic_vs_n.png, traffic_vs_sram.png, roofline.png and moved_vs_touched.png."""
    parser = argparse.ArgumentParser(prog="flashlab traffic", description=(
        "HBM traffic figures: traffic vs N (naive vs flash, traced points), traffic vs SRAM size, "
        "roofline (H200 measured ceilings), bytes moved vs bytes touched. One head, Nq = Nk = N."))
    parser.add_argument("--n", type=_positive, default=4096,
                        help="sequence length for the vs-SRAM, roofline and moved-vs-touched figures (default 4096)")
    parser.add_argument("--sram", type=parse_bytes, default=128 * 1024,
                        help="SRAM size M for the traffic-vs-N figure, bytes or KiB (default 128KiB)")
    parser.add_argument("--traced-n", type=_positive, default=1024,
                        help="sequence length of the traced runs in the moved-vs-touched figure (default 1024)")
    _common(parser)
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.sram // args.itemsize < 4 * args.d:
        print(f"flashlab traffic: error: argument --sram: {args.sram} bytes hold {args.sram // args.itemsize} "
              f"elements of {args.itemsize} B; the paper's blocks need at least 4*d = {4 * args.d}", file=sys.stderr)
        return 2
    from . import roofline, traffic_plots

    written: list[Path] = []
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        _save(traffic_plots.plot_traffic_vs_n(d=args.d, sram_bytes=args.sram, itemsize=args.itemsize,
                                              causal=args.causal), args.out / "traffic_vs_n.png", written)
        _save(traffic_plots.plot_traffic_vs_sram(n=args.n, d=args.d, itemsize=args.itemsize),
              args.out / "traffic_vs_sram.png", written)
        _save(roofline.plot_roofline(n=args.n, d=args.d, itemsize=args.itemsize, causal=args.causal,
                                     block_q=args.block_q, block_k=args.block_k), args.out / "roofline.png", written)
        _save(traffic_plots.plot_moved_vs_touched(n=args.traced_n, d=args.d, block_q=args.block_q,
                                                  block_k=args.block_k, itemsize=args.itemsize, causal=args.causal),
              args.out / "moved_vs_touched.png", written)
    except (ValueError, TypeError) as err:
        print(f"flashlab traffic: error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def tiles_main(argv=()) -> int:
    """Trace one tiled run; write tiles_<pass>.png (one step), tiles_<pass>.gif (the schedule) and reuse_<pass>.png."""
    parser = argparse.ArgumentParser(prog="flashlab tiles", description=(
        "Trace one tiled run in NumPy and draw its tile schedule: a PNG of one step, an animated GIF "
        "of the steps, and a PNG of how often each tile was loaded from HBM."))
    parser.add_argument("--n", type=_positive, default=None, help="sequence length: sets --nq and --nk (default 256)")
    parser.add_argument("--nq", type=_positive, default=None, help="query rows (default: --n)")
    parser.add_argument("--nk", type=_positive, default=None, help="key rows (default: --n)")
    parser.add_argument("--pass", dest="pass_", choices=sorted(PASSES), default="forward",
                        help="forward (FlashAttention-2), forward-fa1 (FlashAttention-1) or backward")
    parser.add_argument("--sram", type=parse_bytes, default=228 * 1024,
                        help="SRAM capacity the occupancy is compared with, bytes or KiB "
                             "(default 228KiB: shared memory per SM on H100/H200)")
    parser.add_argument("--step", type=int, default=None, help="step drawn in the PNG (default: the middle one)")
    parser.add_argument("--frames", type=_positive, default=40, help="most frames in the GIF (default 40)")
    parser.add_argument("--fps", type=_positive, default=4, help="GIF frames per second (default 4)")
    _common(parser)
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    nq = args.nq or args.n or 256
    nk = args.nk or args.n or 256
    try:
        tracer = _trace(nq, nk, args)
        written = _write_tiles(tracer, args)
    except (ValueError, TypeError) as err:
        print(f"flashlab tiles: error: {err}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def _trace(nq: int, nk: int, args):
    import numpy as np

    from ..tiled import tiled_attention, tiled_attention_backward, tiled_attention_fa1
    from ..tracer import TrafficTracer

    rng = np.random.default_rng(0)
    q = rng.standard_normal((nq, args.d)).astype(np.float32)  # (Nq, d)
    k, v = (rng.standard_normal((nk, args.d)).astype(np.float32) for _ in range(2))  # (Nk, d)
    tracer = TrafficTracer(itemsize=args.itemsize, stat_itemsize=4)
    kw = dict(causal=args.causal, block_q=args.block_q, block_k=args.block_k)
    algorithm = PASSES[args.pass_]
    if algorithm == "fa2":
        tiled_attention(q, k, v, tracer=tracer, **kw)
    elif algorithm == "fa1":
        tiled_attention_fa1(q, k, v, tracer=tracer, **kw)
    else:
        o, lse = tiled_attention(q, k, v, return_lse=True, **kw)  # (Nq, d), (Nq,)
        do = rng.standard_normal((nq, args.d)).astype(np.float32)  # (Nq, d)
        tiled_attention_backward(q, k, v, o, lse, do, tracer=tracer, **kw)
    return tracer


def _write_tiles(tracer, args) -> list[Path]:
    import numpy as np

    from .tiles import TileSchedule, TileScheduleView, plot_reuse_heatmap

    schedule = TileSchedule(tracer, args.sram)
    step = schedule.n_steps // 2 if args.step is None else args.step
    if not 0 <= step < schedule.n_steps:
        raise ValueError(f"--step {step} is out of range: this run has steps 0..{schedule.n_steps - 1}")
    args.out.mkdir(parents=True, exist_ok=True)
    name = args.pass_
    written: list[Path] = []
    view = TileScheduleView(schedule, step, dpi=80)
    _save(view.fig, args.out / f"tiles_{name}.png", written)
    frames = np.unique(np.linspace(0, schedule.n_steps - 1, min(args.frames, schedule.n_steps)).round().astype(int))
    gif = args.out / f"tiles_{name}.gif"
    write_gif(TileScheduleView(schedule, 0, dpi=60), frames, gif, fps=args.fps)
    written.append(gif)
    _save(plot_reuse_heatmap(tracer), args.out / f"reuse_{name}.png", written)
    return written


def write_gif(view, steps, path: Path, fps: int = 4) -> None:
    """Animated GIF of ``view`` (a TileScheduleView) at ``steps``, written with Pillow.

    Frames come from the view's blitting renderer (static parts drawn once), which is several
    times faster than matplotlib's PillowWriter redrawing the whole figure for every frame.
    """
    from PIL import Image

    from .style import pyplot

    frames = []
    for step in steps:
        view.update(int(step))
        frames.append(Image.fromarray(view.render_rgba()).convert("RGB").convert("P", palette=Image.ADAPTIVE))
    pyplot().close(view.fig)
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
