"""Figures and widgets of HBM <-> SRAM traffic, drawn from traced runs and formulas.

Six views, each a function returning a matplotlib Figure, each drawn from a data function whose
plain numbers the tests check against the tracer and :mod:`flashlab.traffic`:

1. :func:`plot_tile_schedule` (data: :func:`tile_schedule_data`): tiles in SRAM, loads and stores
   of one step, SRAM occupancy, HBM bytes so far vs naive. Widget: :func:`tile_schedule_widget`.
2. :func:`plot_reuse_heatmap` (data: :func:`reuse_counts`): loads from HBM per tile.
3. :func:`plot_traffic_vs_n` (data: :func:`traffic_vs_n_data`). Widget: :func:`traffic_vs_n_widget`.
4. :func:`plot_traffic_vs_sram` (data: :func:`traffic_vs_sram_data`).
5. :func:`plot_roofline` (data: :func:`roofline_data`).
6. :func:`plot_moved_vs_touched` (data: :func:`moved_vs_touched_data`).

Notebook 08's benchmark figures (:func:`plot_throughput`, :func:`plot_ladder`, :func:`plot_memory`)
are drawn from results files; their numbers come from :mod:`flashlab.perf`.

matplotlib and ipywidgets are imported only when a figure or widget is made.
"""
from __future__ import annotations

from flashlab._lazy import lazy_exports

_EXPORTS = {
    "TileSchedule": "tiles", "tile_schedule_data": "tiles", "plot_tile_schedule": "tiles",
    "reuse_counts": "tiles", "plot_reuse_heatmap": "tiles",
    "traffic_vs_n_data": "traffic_plots", "plot_traffic_vs_n": "traffic_plots",
    "traffic_vs_sram_data": "traffic_plots", "plot_traffic_vs_sram": "traffic_plots",
    "moved_vs_touched_data": "traffic_plots", "plot_moved_vs_touched": "traffic_plots",
    "roofline_data": "roofline", "roofline_table": "roofline", "plot_roofline": "roofline",
    "tile_schedule_widget": "widgets", "traffic_vs_n_widget": "widgets",
    "format_bytes": "style",
    "ring_schedule_data": "ring", "plot_ring_schedule": "ring", "ring_results_table": "ring",
    "plot_throughput": "perf", "plot_ladder": "perf", "plot_memory": "perf", "largest_common_memory": "perf",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
