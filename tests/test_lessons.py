"""Library code behind the lesson cells: warps, causal alignment, the backward derivation,
the committed-results tables and the card's claims."""
import json
from pathlib import Path

import numpy as np
import pytest

from flashlab import claims, derive, masks, perf, warps
from flashlab.reference import naive_attention


@pytest.mark.parametrize("n_q,n_k,d,n_warps,block_q,block_k",
                         [(64, 64, 16, 4, 64, 64), (100, 37, 8, 4, 32, 16), (7, 90, 32, 8, 64, 48), (5, 5, 4, 3, 2, 3)])
def test_split_k_and_split_q_equal_naive_attention(n_q, n_k, d, n_warps, block_q, block_k):
    rng = np.random.default_rng(n_q * 1000 + n_k)
    q, k, v = rng.standard_normal((n_q, d)), rng.standard_normal((n_k, d)), rng.standard_normal((n_k, d))
    ref = naive_attention(q, k, v)
    for fn in (warps.split_k_forward, warps.split_q_forward):
        o, _ = fn(q, k, v, warps=n_warps, block_q=block_q, block_k=block_k)
        assert np.abs(o - ref).max() < 1e-12, fn.__name__


def test_only_split_k_combines_through_shared_memory():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((96, 16)) for _ in range(3))
    _, rep_k = warps.split_k_forward(q, k, v, warps=4, block_q=32, block_k=32)
    _, rep_q = warps.split_q_forward(q, k, v, warps=4, block_q=32, block_k=32)
    tiles = 3 * 3
    assert rep_k.combine_barriers == tiles
    assert rep_k.combine_bytes == tiles * 4 * 32 * (16 + 2) * warps.ACC_ITEMSIZE
    assert rep_q.combine_bytes == 0 and rep_q.combine_barriers == 0


def test_warps_reject_bad_shapes():
    with pytest.raises(ValueError, match="q"):
        warps.split_q_forward(np.zeros((2, 3, 4)), np.zeros((3, 4)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="warps"):
        warps.split_k_forward(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)), warps=0)


def test_causal_alignments_agree_when_square_and_differ_for_decode():
    assert np.array_equal(masks.causal_mask(6, 6, "top-left"), masks.causal_mask(6, 6, "bottom-right"))
    assert np.array_equal(masks.causal_mask(6, 6), np.tril(np.ones((6, 6), bool)))
    assert masks.causal_mask(1, 9, "bottom-right").all()  # decode: the new token sees the whole cache
    assert masks.causal_mask(1, 9, "top-left").sum() == 1  # ... top-left: only key 0
    chunk = masks.causal_mask(3, 10, "bottom-right")  # a chunk of 3 new tokens after 7 cached
    assert [int(r.sum()) for r in chunk] == [8, 9, 10]
    with pytest.raises(ValueError, match="align"):
        masks.causal_mask(2, 3, "diagonal")


def test_backward_derivation_steps_hold_numerically():
    errs = derive.check_backward_derivation(n=6, d=4, seed=3)
    assert errs["jacobian vs P o (dP - D)"] < 1e-12
    assert errs["rowsum(P o dP) vs rowsum(dO o O)"] < 1e-12
    assert errs["P o (dP - D) vs finite differences"] < 1e-6


def test_backward_matmul_counts():
    m = derive.backward_matmuls()
    assert len(m["fa2_backward"]) == 5 and len(m["course_backward"]) == 7
    assert m["counted_fwdbwd_over_fwd"] == 3.5 and m["executed_fwdbwd_over_fwd"] == 4.5


def _row(n, causal, times, d=64, dtype="bfloat16"):
    return {"n": n, "d": d, "dtype": dtype, "causal": causal, "batch": 16384 // n, "heads": 2048 // d,
            "results": {k: {"fwd_ms": t, "fwd_tflops": 100.0 / t} for k, t in times.items()}}


def test_ratio_range_and_peak_fractions_on_synthetic_rows():
    rows = [_row(8192, False, {"naive": 10.0, "flashlab": 2.0}), _row(8192, False, {"naive": 9.0, "flashlab": 1.0}),
            _row(8192, True, {"naive": 30.0, "flashlab": 1.0})]
    assert perf.ratio_range(rows, "flashlab", "naive", n=8192, causal=False) == (5.0, 9.0)
    assert perf.ratio_range(rows, "flashlab", "naive", n=4096) is None
    bench = {"rows": rows, "ceilings": {"matmul_bf16_8192_tflops": 200.0}}
    assert perf.peak_fractions(bench, impls=["flashlab"]) == {"flashlab": (0.25, 0.5)}
    with pytest.raises(ValueError, match="mode"):
        perf.time_of(rows[0], "naive", "bwd")


def test_ncu_ratio_counts_o_when_ncu_missed_its_write():
    ncu = {"protocol": {"dtype": "float16", "batch": 1, "heads": 2, "d": 8},
           "rows": [{"variant": "naive", "n": 16, "dram_read_bytes": 9000.0, "dram_write_bytes": 1000.0},
                    {"variant": "fa", "n": 16, "dram_read_bytes": 900.0, "dram_write_bytes": 100.0}]}
    r = perf.ncu_dram_ratio(ncu, n=16, variant="fa")
    o_bytes = 1 * 2 * 16 * 8 * 2
    assert r["measured_ratio"] == 10.0
    assert r["ratio_with_o"] == pytest.approx(10000.0 / (900.0 + o_bytes))
    with pytest.raises(ValueError, match="n=32"):
        perf.ncu_dram_ratio(ncu, n=32, variant="fa")


def test_the_naive_ncu_measurement_is_the_model_plus_its_scale_kernel():
    from pathlib import Path

    from flashlab import hardware
    from flashlab.viz.style import format_bytes

    naive, flash = perf.ncu_anchor_rows()
    scale_pass = 2 * 16 * 4096**2 * 2  # S read and written once more, fp16, B * H = 16
    assert naive["model_scale_pass"] - naive["model"] == scale_pass
    assert naive["measured"] > 1.4 * naive["model"], "Algorithm 0 alone does not explain the measurement"
    assert abs(naive["measured"] / naive["model_scale_pass"] - 1) < 0.03, "with the scale pass: within 3%"
    assert abs(hardware.NCU_NAIVE_SCALE.total_bytes / scale_pass - 1) < 0.05
    assert flash["model_scale_pass"] is None and flash["measured"] < flash["model"]
    text = (Path(__file__).resolve().parents[1] / "notebooks" / "_src" / "04_io_complexity.py").read_text()
    text = " ".join(line.lstrip("# ") for line in text.splitlines())
    for value in (naive["measured"], naive["model"], naive["model_scale_pass"], hardware.NCU_NAIVE_SCALE.total_bytes):
        shown = format_bytes(value)
        assert shown in perf.ncu_anchor_table() and shown in text, f"notebook 04 should say {shown}"


def test_naive_memory_parses_anchor_line_and_counts_p():
    text = "x\nNaive causal fwd peak memory (B=1,H=32,d=128): 8k 8.6GiB 22.1ms; 64k OOM (256 GiB alloc)\n"
    got = claims.naive_memory(text, heads=32)
    assert [(m.n, m.measured) for m in got] == [(8192, "8.6GiB"), (65536, "OOM")]
    assert got[0].p_bytes_per_layer == 32 * 8192 * 8192 * 2
    with pytest.raises(ValueError, match="anchor_text"):
        claims.naive_memory("nothing here")


def test_memory_table_shows_the_room_each_measured_peak_leaves():
    text = "Naive causal fwd peak memory (B=1,H=32,d=128): 32k 130.1GiB 223.6ms; 64k OOM (256 GiB alloc)\n"
    table = claims.memory_table(text, capacity_gib=139.8).splitlines()
    assert "(9.7 GiB of 139.8 GiB left)" in table[0], table[0]
    assert "left" not in table[1] and "left" not in claims.memory_table(text)
    with pytest.raises(ValueError, match="capacity_gib"):
        claims.memory_table(text, capacity_gib=0)


def test_naive_memory_table_prints_the_gpu_memory_the_results_file_records():
    memory = {"environment": {"device": "NVIDIA H200", "memory_gib": 139.8},
              "rows": [{"n": 1024, "causal": False, "results": {"naive": {"peak_extra_bytes": 4456448}}},
                       {"n": 1024, "causal": True, "results": {"naive": {"peak_extra_bytes": 5505024}}},
                       {"n": 262144, "causal": False, "results": {"naive": {"status": "oom"}}}]}
    lines = perf.naive_memory_table(memory).splitlines()
    assert lines[0].startswith("NVIDIA H200, 139.8 GiB of memory"), lines[0]
    assert len(lines) == 3 and "4.25 MiB" in lines[1] and "oom" in lines[2]


def test_decode_bytes_follow_the_model_sizes():
    model = claims.DecodeModel(params=1e9, layers=2, kv_heads=4, head_dim=8, weight_itemsize=2, kv_itemsize=1)
    b = claims.decode_step_bytes(model, batch=3, context=100)
    assert b["weights"] == 2e9
    assert b["kv_cache"] == 3 * 100 * (2 * 2 * 4 * 8 * 1)
    assert b["crossover_tokens"] == pytest.approx(2e9 / (2 * 2 * 4 * 8))


def test_exact_tiled_error_is_rounding_and_approximations_are_not():
    errs = claims.approximation_errors(n=128, d=16, features=64, window=16, top_k=8, seed=2)
    exact = errs.pop("tiled, float32 (exact algorithm)")
    assert exact < 1e-5
    assert min(errs.values()) > 100 * exact


def test_committed_results_give_the_tables():
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    bench = json.loads((results / "bench_attention.json").read_text())
    text = perf.ratio_table(bench)
    assert text.count("\n") >= len(bench["rows"])
    baselines = json.loads((results / "bench_baselines.json").read_text())
    assert "flex" in perf.baselines_table(baselines)
    fwdbwd = perf.baselines_table(baselines, "fwdbwd")
    assert "flashlab 2-pass" in fwdbwd and "two-pass backward" in fwdbwd, "the old backward is labelled as such"
    assert "2-pass" not in perf.baselines_table(baselines, "fwd")


def test_sdpa_flash_extra_memory_is_whole_fp32_copies_of_o_and_lse():
    from pathlib import Path

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    memory = json.loads((results / "bench_memory.json").read_text())
    rows = perf.sdpa_flash_memory_extra(memory).splitlines()[2:]
    copies = {int(r.split()[0]): float(r.split()[-1]) for r in rows}
    assert {n: copies[n] for n in (1024, 2048, 4096, 8192, 16384)} == {1024: 8, 2048: 8, 4096: 4, 8192: 2,
                                                                       16384: 0}, copies


def test_naive_gain_table_shows_which_side_moved_at_each_n():
    from pathlib import Path

    bench = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/bench_attention.json").read_text())
    lines = perf.naive_gain_table(bench).splitlines()
    naive64 = next(line for line in lines if line.strip().startswith("d = 64  naive"))
    rates = [float(x) for x in naive64.split("(")[0].split()[4:]]
    assert len(rates) == 6 and rates[-1] > rates[-2], "naive attention ran faster at N = 16384 than at 8192"


def test_naive_forward_gain_range_names_the_rows_of_the_smallest_and_largest_gain():
    def row(dtype, n, naive, flash):
        return {"dtype": dtype, "d": 64, "n": n, "causal": False,
                "results": {"naive": {"fwd_ms": naive}, "flashlab": {"fwd_ms": flash}}}

    bench = {"rows": [row("bf16", 1024, 3.0, 1.0), row("bf16", 4096, 40.0, 2.0), row("fp16", 2048, 1.5, 1.0),
                      {"dtype": "fp16", "d": 64, "n": 16384, "causal": False, "results": {"flashlab": {"fwd_ms": 9.0}}}]}
    line = perf.naive_forward_gain_range(bench)
    assert "from 1.5x (dtype, d, N, causal = ('fp16', 64, 2048, False))" in line
    assert "to 20.0x (('bf16', 64, 4096, False))" in line
    assert "no row" in perf.naive_forward_gain_range({"rows": bench["rows"][3:]})


def test_loop_order_bytes_follow_the_block_that_each_order_reuses():
    from flashlab import loop_order, traffic as tr

    rows = loop_order.loop_order_rows(n=2048, d=64, sram_kib=(32, 64, 128), equal_block=64)
    # FA2 with the paper's blocks stops improving once Br = d; FA1 keeps falling with Bc
    assert [r["block_r"] for r in rows] == [64, 64, 64]
    assert rows[0]["fa2"] == rows[1]["fa2"] == rows[2]["fa2"]
    assert rows[0]["fa1"] > rows[1]["fa1"] > rows[2]["fa1"]
    # with equal blocks, FA2 moves fewer bytes than FA1
    assert rows[0]["fa2_equal"] < rows[0]["fa1_equal"]
    assert rows[0]["fa1_equal"] == tr.fa1_forward_traffic(2048, 2048, 64, block_q=64, block_k=64,
                                                          itemsize=2, stat_itemsize=4).total


@pytest.mark.parametrize("d", [32, 64, 128])
def test_fa2_with_the_paper_blocks_moves_half_of_naive_only_from_its_floor_sram(d):
    from flashlab import loop_order, traffic as tr

    n = 32 * d
    floor = loop_order.fa2_floor_sram(d)
    naive = tr.naive_traffic(n, n, d, itemsize=1).total

    def fa2(m):
        block_r, block_c = tr.paper_block_sizes(m, d)
        return block_r, tr.fa2_forward_traffic(n, n, d, block_q=block_r, block_k=block_c, itemsize=1,
                                               stat_itemsize=1).total

    assert fa2(floor)[0] == d and fa2(floor - 1)[0] == d - 1, "Br reaches d exactly at the floor"
    for m in (floor, 4 * d * d, 64 * d * d):  # about half of naive: 2 N^2 + 2 N d + N of 4 N^2 + 4 N d
        assert fa2(m)[1] == 2 * n * n + 2 * n * d + n
    assert fa2(floor - 1)[1] > 0.51 * naive and fa2(2 * d * d)[1] == pytest.approx(naive, rel=0.02)


def test_notebook_04_states_the_sram_from_which_fa2_moves_half_of_naive():
    from pathlib import Path

    from flashlab import loop_order

    text = (Path(__file__).resolve().parents[1] / "notebooks" / "_src" / "04_io_complexity.py").read_text()
    floor = loop_order.fa2_floor_sram(64)
    assert f"{floor:,} elements, {floor * 2 / 1024:.1f} KiB of fp16 at\n# d = 64" in text
    assert "whatever M" not in text, "FA2's order is half of naive only from fa2_floor_sram(d) on"


def test_predicted_grid_speedup_is_the_ratio_of_busy_sms():
    assert perf.predicted_grid_speedup(16, 132, 2048) == pytest.approx(132 / 16)
    assert perf.predicted_grid_speedup(256, 132, 4096) == 1.0
    with pytest.raises(ValueError, match="sms"):
        perf.predicted_grid_speedup(16, 0, 2048)


def test_anchor_peak_table_reads_forward_rates_of_long_rows():
    text = ("header line\n64 1024 0 def 400/300 fl 100/90 ef 50/40 cu 390/300\n"
            "64 4096 0 def 400/380 fl 200/190 ef 100/90 cu 380/370\n128 8192 1 def 600/500 fl 300/250 ef 150/100 cu 590/500\n")
    table = perf.anchor_peak_table(text, peak_tflops=1000.0)
    assert "SDPA FLASH (FlashAttention-2)      20% to   30%" in table
    with pytest.raises(ValueError, match="anchor_text"):
        perf.anchor_peak_table("nothing", 1000.0)


def test_notebook08_figures_draw_from_a_results_file():
    import matplotlib

    matplotlib.use("Agg")
    from flashlab import viz

    rows = [dict(_row(n, c, {"naive": 9.0, "flashlab": 1.0, "rung:v0_grid_bh": 2.0, "rung:v1_minimal": 1.0}, d=d))
            for n in (1024, 2048) for c in (False, True) for d in (64, 128)]
    bench = {"rows": rows}
    fig = viz.plot_throughput(bench, "fwd", "test")
    assert len(fig.axes) == 4 and all(ax.lines for ax in fig.axes)
    assert viz.plot_ladder(bench, 128, "test").axes[0].lines
    with pytest.raises(ValueError, match="mode"):
        viz.plot_throughput(bench, "bwd")
    memory = {"rows": [{"n": n, "causal": False, "results": {"naive": {"peak_extra_bytes": n * n * 4},
                                                             "flashlab": {"peak_extra_bytes": n * 260}}}
                       for n in (1024, 2048)]}
    lines = viz.plot_memory(memory, "test").axes[0].lines
    assert lines and len({(line.get_marker(), line.get_linestyle()) for line in lines}) == len(lines), \
        "every memory line has its own marker and style (SDPA FLASH's lies on flashlab's from N = 16384)"
    assert "2048" in viz.largest_common_memory(memory)


def test_the_documents_rule_lets_a_token_see_exactly_the_earlier_tokens_of_its_own_document():
    n = 96
    spec = masks.lesson_rules(n)["3 documents"]
    starts = [0, 5 * n // 16, 11 * n // 16, n]
    doc = np.searchsorted(starts, np.arange(n), side="right")  # (n,) document number of each token
    expected = (doc[:, None] == doc[None, :]) & (np.arange(n)[None, :] <= np.arange(n)[:, None])
    assert np.array_equal(spec.mask(np.arange(n)[:, None], np.arange(n)[None, :], n, n), expected)


@pytest.mark.parametrize("rule", ["causal", "window 32", "3 documents"])
def test_the_rules_table_counts_what_a_traced_forward_reads_and_computes(rule):
    """show_rules' K+V bytes and tile counts against a traced NumPy forward under the same rule."""
    from flashlab.tracer import TrafficTracer
    from flashlab.tiled import tiled_attention

    n, d, block = 128, 16, 16
    spec = masks.lesson_rules(n)[rule]
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float16) for _ in range(3))
    tracer = TrafficTracer(itemsize=2)
    tiled_attention(q, k, v, block_q=block, block_k=block, spec=spec, tracer=tracer)
    table = masks.show_rules(n=n, d=d, block=block)
    row = next(line for line in table.splitlines() if line.startswith(rule))
    full, masked, skipped, kib = (float(x) for x in row[len(rule):].split()[:4])
    traced_kv = sum(nbytes for (tensor, direction), nbytes in tracer.bytes_by_tensor().items()
                    if tensor in ("K", "V") and direction == "read")
    assert kib * 2**10 == pytest.approx(traced_kv, abs=2**9)  # the table rounds to whole KiB
    states = "".join(masks.tile_map(spec, n, block))
    assert (states.count("#"), states.count("+"), states.count(".")) == (full, masked, skipped)
    assert skipped > 0


def test_the_rules_checked_against_naive_attention_agree_to_rounding():
    for line in masks.check_rules(n=90, d=8, block=16, seed=5).splitlines()[1:]:
        assert float(line.split()[-1]) < 1e-12, line


def test_backward_ladder_table_shows_each_contender_against_cudnn_and_the_rung_measured_faster(monkeypatch):
    from pathlib import Path

    from flashlab.kernels import ladder

    rng = np.random.default_rng(7)
    rows = []
    for n in (2048, 8192):
        speeds = {name: float(rng.uniform(200, 600)) for name in ("cudnn", "tp:cc", "fu:64,128,8,2,tma")}
        rows.append(dict(dtype="bfloat16", d=64, n=n, causal=False,
                         fwdbwd={name: {"tflops": t} for name, t in speeds.items()}))
    monkeypatch.setattr(ladder, "FUSED_BACKWARD_MIN_N", {(64, False): 4096})
    monkeypatch.setattr(ladder, "GLUON_BACKWARD_MIN_N", {})  # checked before bwd_fused's table
    lines = perf.backward_ladder_table({"rows": rows}).splitlines()
    for row, line in zip(rows, lines[2:4]):
        runs = row["fwdbwd"]
        for name in ("tp:cc", "fu:64,128,8,2,tma"):
            t = runs[name]["tflops"]
            assert f"{t:.0f} ({t / runs['cudnn']['tflops']:.2f}x)" in line
        assert line.endswith("bwd_fused" if row["n"] >= 4096 else "bwd_two_pass")
    assert any(line.startswith("1-pass 64x128: bwd_fused") for line in lines)
    with pytest.raises(KeyError, match="bench_backward"):
        perf.backward_ladder_table({})
    monkeypatch.undo()
    committed = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "bench_backward_call2_proto_bf16.json"
    bench = json.loads(committed.read_text())
    runs = [line.split()[-1] for line in perf.backward_ladder_table(bench).splitlines()[2:2 + len(bench["rows"])]]
    # the tables as shipped: bwd_fused nowhere; bwd_gluon_ws on the (d, causal) rows of GLUON_BACKWARD_MIN_N
    assert runs == [ladder.measured_backward(r["d"], r["causal"], r["n"], r["n"]) for r in bench["rows"]]
    assert "bwd_fused" not in runs and "bwd_gluon_ws" in runs, runs


def test_backward_ladder_table_reads_several_results_files_and_names_the_gluon_rung():
    rng = np.random.default_rng(11)

    def bench(n):
        speeds = {name: float(rng.uniform(200, 600)) for name in ("cudnn", "gw", "gw:2,lag")}
        return {"rows": [dict(dtype="float16", d=128, n=n, causal=True,
                              fwdbwd={name: {"tflops": t} for name, t in speeds.items()})]}

    files = [bench(4096), bench(16384)]
    lines = perf.backward_ladder_table(files).replace("\n  ", " ").splitlines()  # notes unwrapped
    for f, line in zip(files, lines[2:4]):
        runs = f["rows"][0]["fwdbwd"]
        assert line.split()[:4] == ["fp16", "128", str(f["rows"][0]["n"]), "yes"]
        t = runs["gw:2,lag"]["tflops"]
        assert f"{t:.0f} ({t / runs['cudnn']['tflops']:.2f}x)" in line
    assert any(line.startswith("Gluon lag: bwd_gluon_ws") and "2 Q/dO slots, dQ one step behind" in line for line in lines)
    with pytest.raises(KeyError, match="list of them"):
        perf.backward_ladder_table([files[0], {}])


def test_backward_ladder_table_shows_the_chosen_contenders_and_notebook_07_quotes_their_columns():
    from pathlib import Path

    from flashlab import course

    bench = course.load_results("bench_backward_s6c_d128.json")
    table = perf.backward_ladder_table(bench, contenders=["cudnn", "gw:2,lag,g0", "gw:2,lag,g0,rows,one"])
    header = table.splitlines()[1]
    assert "Gluon lag g0 rows one" in header and "Gluon lag rows " not in header + " "
    rows = [r for f in bench.values() for r in f["rows"]]

    def speeds(name, causal):  # forward+backward speed against cuDNN, as the table rounds it
        return sorted(round(r["fwdbwd"][name]["tflops"] / r["fwdbwd"]["cudnn"]["tflops"], 2)
                      for r in rows if r["causal"] == causal)

    text = " ".join((Path(__file__).resolve().parents[1] / "notebooks/_src/07_backward.py").read_text().split())
    for name, causal in (("gw:2,lag,g0", True), ("gw:2,lag,g0,rows,one", True), ("gw:2,lag", False),
                         ("gw:2,lag,rows", False)):
        low, high = speeds(name, causal)[0], speeds(name, causal)[-1]
        assert f"{low:.2f}-{high:.2f}x" in text, f"notebook 07 does not quote {name} ({low:.2f}-{high:.2f}x)"
    with pytest.raises(KeyError, match="contenders"):
        perf.backward_ladder_table(bench, contenders=["no such schedule"])


def test_backward_ladder_table_sorts_the_rows_of_several_files_by_dtype_then_n():
    def row(dtype, n, d):
        return dict(dtype=dtype, d=d, n=n, causal=False, fwdbwd={"cudnn": {"tflops": 400.0}})

    files = {"b": {"rows": [row("float16", 2048, 64), row("bfloat16", 16384, 64)]},
             "a": {"rows": [row("bfloat16", 2048, 128), row("bfloat16", 2048, 64)]}}
    lines = perf.backward_ladder_table(files).splitlines()[2:6]
    assert [line.split()[:3] for line in lines] == [["bf16", "64", "2048"], ["bf16", "128", "2048"],
                                                    ["bf16", "64", "16384"], ["fp16", "64", "2048"]]


def test_the_instructors_plan_has_every_notebook_and_exercise_with_the_notebooks_study_times():
    """docs/INSTRUCTORS.md says its study times are the notebooks' own "Study time" lines: each, the
    week sums and the total agree with them, and every notebook and every graded exercise is planned."""
    import re
    from pathlib import Path

    from flashlab.grading.registry import EXERCISES

    repo = Path(__file__).resolve().parents[1]
    doc = (repo / "docs" / "INSTRUCTORS.md").read_text()
    own = {}
    for path in sorted((repo / "notebooks" / "_src").glob("[0-9][0-9]_*.py")):
        found = re.search(r"\*\*Study time:\*\* about (\d+) minutes", path.read_text())
        assert found, f"{path.name} has no study time line"
        own[path.name[:2]] = int(found.group(1))
    rows = [line for line in doc.splitlines() if re.match(r"\| \d \|", line)]
    planned, total = {}, 0
    for row in rows:
        cell = row.split("|")[2]
        times = {nb: int(m) for nb, m in re.findall(r"\b(\d\d) [^(|]*\((\d+) min\)", cell)}
        planned.update(times)
        week = re.search(r": (\d+) min\s*$", cell.strip())
        if len(times) > 1:
            assert week and int(week.group(1)) == sum(times.values()), row
        total += sum(times.values())
    assert planned == own, (planned, own)
    stated = re.search(r"Study time in all: (\d+) minutes", doc)
    assert stated and int(stated.group(1)) == total == sum(own.values())
    for name in EXERCISES:
        if name != "selftest":
            assert f"`{name}`" in "\n".join(rows), f"{name} is not in the plan"


# -- the tables behind notebooks 00, 01, 03 and 04 ------------------------------------------------
def _numbers(line: str) -> list[float]:
    """The numbers of one table line, thousands separators removed."""
    import re

    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e[+-]\d+)?", line.replace(",", ""))]


def test_the_memory_table_gives_the_h200_sizes_as_queried_on_the_course_machine():
    from flashlab import hardware
    from flashlab.viz.style import format_bytes

    # the values in bytes that hardware.py's docstring records from the H200 query
    queried = {"registers, per SM": format_bytes(65_536 * 4), "shared memory (SRAM), per SM": format_bytes(233_472),
               "shared memory, all SMs together": format_bytes(132 * 233_472), "L2 cache": format_bytes(62_914_560),
               "HBM3e": "141 GB"}
    lines = hardware.memory_table().splitlines()
    assert len(lines) == len(queried)
    for line, (name, size) in zip(lines, queried.items()):
        assert line.startswith(name) and f" {size}   (" in line, (line, size)
    assert "132 SMs" in lines[2]


def test_the_ceilings_table_puts_each_ridge_point_at_flops_over_bandwidth_and_adds_a_bench_run():
    import re

    from flashlab import hardware

    bench = {"ceilings": {"matmul_bf16_8192_tflops": 600.0, "copy_tb_per_s_read_plus_write": 4.0},
             "environment": {"date_utc": "2026-01-02T03:04:05"}}
    lines = hardware.ceilings_table(bench).splitlines()
    assert len(lines) == 3
    for line, (tflops, tbps) in zip(lines, ((790, 4.3), (989, 4.8), (600, 4.0))):
        got = re.search(r"([\d.]+) TFLOP/s bf16 +([\d.]+) TB/s HBM +ridge point +(\d+) FLOP/byte", line)
        assert got and [float(x) for x in got.groups()] == [tflops, tbps, round(tflops / tbps)], line
    assert lines[2].startswith("H200 (bench run)") and "2026-01-02)" in lines[2]
    assert len(hardware.ceilings_table(None).splitlines()) == 2


def test_the_ceilings_table_rejects_a_results_entry_without_the_ceilings():
    from flashlab import hardware

    with pytest.raises(ValueError, match="bench"):
        hardware.ceilings_table({"ceilings": {}})
    with pytest.raises(ValueError, match="ceilings"):
        hardware.ceilings_table(None, ceilings=())


def test_the_naive_traffic_table_counts_s_and_p_twice_and_q_k_v_o_once():
    from flashlab import traffic
    from flashlab.viz.style import format_bytes

    n, d, size = 96, 16, 2
    lines = traffic.naive_traffic_table(n=n, d=d, itemsize=size).splitlines()
    expected = {("write", "S"), ("read", "S"), ("write", "P"), ("read", "P")}
    rows = {tuple(line.split()[:2]): line.split(maxsplit=2)[2].strip() for line in lines[:8]}
    assert {k for k, b in rows.items() if b == format_bytes(n * n * size)} == expected
    assert {k for k, b in rows.items() if b == format_bytes(n * d * size)} == {
        ("read", "Q"), ("read", "K"), ("read", "V"), ("write", "O")}
    total = size * (4 * n * n + 4 * n * d)
    assert lines[8] == f"total {format_bytes(total)}; S and P are {4 * n * n / (4 * n * n + 4 * n * d):.1%} of it"
    assert lines[9].startswith(f"arithmetic intensity: {4 * n * n * d / total:.0f} FLOP/byte")
    with pytest.raises(ValueError, match="n"):
        traffic.naive_traffic_table(n=0)


def test_the_flops_and_bytes_table_has_equal_flops_and_k_v_reread_per_query_block():
    from flashlab import traffic
    from flashlab.viz.style import format_bytes

    d, block = 16, 32
    lines = traffic.flops_and_bytes_table(ns=(64, 200), d=d, block=block).splitlines()
    assert len(lines) == 3 and lines[0].split()[0] == "N"
    for line, n in zip(lines[1:], (64, 200)):
        cells = line.split()
        flops = 4 * n * n * d
        naive = 2 * (4 * n * d + 4 * n * n)
        flash = 2 * (2 * n * d + 2 * n * d * -(-n // block)) + 4 * n  # Q, O once; K, V per query block; fp32 lse
        assert int(cells[0]) == n and float(cells[1]) == float(cells[2]) == float(f"{flops:.3e}")
        assert " ".join(cells[3:5]) == format_bytes(naive) and " ".join(cells[5:7]) == format_bytes(flash)
        assert cells[7] == f"{naive / flash:.1f}x"
    with pytest.raises(ValueError, match="ns"):
        traffic.flops_and_bytes_table(ns=())
    with pytest.raises(ValueError, match="block"):
        traffic.flops_and_bytes_table(block=0)


def test_the_paper_accesses_table_follows_algorithm_1_with_the_papers_blocks():
    from flashlab import traffic

    n, d = 512, 16
    lines = traffic.paper_accesses_table(n=n, d=d, sram_kib=(1, 4), itemsize=2).splitlines()
    for line, kib in zip(lines, (1, 4)):
        m = kib * 1024 // 2
        block_c = -(-m // (4 * d))
        kb = -(-n // block_c)  # key blocks; each pass reads Q, O, l, m and writes O, l, m back
        flash = (n * d + 2 * n) + 2 * n * d + kb * (2 * n * d + 2 * n) + kb * (n * d + 2 * n)
        bound = max(-(-(n * n * d * d) // m), 4 * n * d)
        assert _numbers(line) == [kib, flash, bound, 4 * n * d + 4 * n * n], line
    with pytest.raises(ValueError, match="sram_kib"):
        traffic.paper_accesses_table(sram_kib=[])
    with pytest.raises(ValueError, match="sram_kib"):
        traffic.paper_accesses_table(sram_kib=(0,))


def test_the_prefill_decode_table_gives_decode_no_saving_and_an_intensity_near_one():
    from flashlab import traffic
    from flashlab.viz.style import format_bytes

    n, d, block = 256, 32, 64
    lines = traffic.prefill_decode_table(n=n, d=d, block=block).splitlines()
    for line, nq in zip(lines, (n, 1)):
        naive = 2 * (nq * d + 2 * n * d + nq * d + 4 * nq * n)
        flash = 2 * (2 * nq * d + 2 * n * d * -(-nq // block)) + 4 * nq
        assert f"naive {format_bytes(naive):>10}, flash {format_bytes(flash):>10}" in line, line
        assert f"ratio {naive / flash:6.1f}x" in line and f"{4 * nq * n * d / flash:6.1f} FLOP/byte" in line
    with pytest.raises(ValueError, match="block"):
        traffic.prefill_decode_table(block=0)


def test_the_tiled_table_reports_the_error_against_naive_attention_on_the_same_draws():
    from flashlab import tiled

    cases = [(30, 30, 8, 8, 4), (7, 50, 16, 5, 8)]
    lines = tiled.tiled_vs_naive_table(cases, seed=3).splitlines()
    rng = np.random.default_rng(3)
    expected = []
    for nq, nk, _, _, d in cases:
        q, k, v = rng.standard_normal((2, nq, d)), rng.standard_normal((2, nk, d)), rng.standard_normal((2, nk, d))
        for causal in (False, True):
            s = np.einsum("bqd,bkd->bqk", q, k) / np.sqrt(d)  # (B, Nq, Nk), softmax written out here
            if causal:
                s = np.where(np.arange(nk)[None, :] <= np.arange(nq)[:, None], s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            expected.append((q, k, v, causal, p / p.sum(-1, keepdims=True) @ v))
    assert len(lines) == 2 * len(cases)
    for line, (nq, nk, block_q, block_k, d), causal in zip(lines, np.repeat(cases, 2, axis=0), (False, True) * 2):
        assert line.startswith(f"Nq={nq:>3} Nk={nk:>3} block_q={block_q:>2} block_k={block_k:>2} d={d:>2} "
                               f"causal={causal!s:<5}"), line
        assert float(line.split("=")[-1]) < 1e-13, line
    # the same draws through tiled_attention agree with the softmax written out above
    for q, k, v, causal, o in expected[:2]:
        assert np.abs(tiled.tiled_attention(q, k, v, causal=causal, block_q=8, block_k=8) - o).max() < 1e-13


def test_the_tiled_table_rejects_a_case_that_is_not_five_sizes():
    from flashlab import tiled

    with pytest.raises(ValueError, match="cases"):
        tiled.tiled_vs_naive_table([(1, 2, 3)])
    with pytest.raises(ValueError, match="block_q"):
        tiled.tiled_vs_naive_table([(4, 4, 0, 2, 2)])


def test_the_causal_skip_table_counts_the_tiles_whose_every_entry_is_masked():
    from flashlab import tiled

    block = 32
    lines = tiled.causal_skip_table(ns=(1, 100, 130), block=block).splitlines()
    for line, n in zip(lines, (1, 100, 130)):
        visible = np.tril(np.ones((n, n), dtype=bool))  # (N, N) top-left causal
        nb = -(-n // block)
        skipped = sum(not visible[i * block:(i + 1) * block, j * block:(j + 1) * block].any()
                      for i in range(nb) for j in range(nb))
        assert _numbers(line)[:5] == [n, block, block, skipped, nb * nb], line
    with pytest.raises(ValueError, match="ns"):
        tiled.causal_skip_table(ns=())
    with pytest.raises(ValueError, match="block"):
        tiled.causal_skip_table(block=0)


def test_the_trace_tables_show_the_formula_bytes_and_the_naive_flops():
    from flashlab import traffic
    from flashlab.viz.style import format_bytes
    from flashlab.viz.traffic_plots import bytes_by_tensor_table, trace_table, traced_forward

    n, d, block = 128, 16, 32
    traces = {"FA1": traced_forward(n, d, block, block, algorithm="fa1"),
              "FA2": traced_forward(n, d, block, block, algorithm="fa2")}
    formulas = {"FA1": traffic.fa1_forward_traffic(n, n, d, block_q=block, block_k=block, stat_itemsize=4),
                "FA2": traffic.fa2_forward_traffic(n, n, d, block_q=block, block_k=block, stat_itemsize=4)}
    lines = trace_table(traces).splitlines()
    assert lines[0] == f"N = {n}, d = {d}, blocks {block} x {block}, fp16 tensors, fp32 statistics"
    assert lines[1].split() == ["FA1", "FA2"]
    for label, column in (("HBM bytes read", "read_bytes"), ("HBM bytes written", "write_bytes")):
        row = next(line for line in lines if line.startswith(label))
        assert row[22:] == "".join(f"{format_bytes(getattr(formulas[k], column)):>12}" for k in traces), row
    assert _numbers(next(line for line in lines if line.startswith("matmul FLOPs"))) == [4 * n * n * d] * 2
    for line, label in zip(bytes_by_tensor_table(traces).splitlines(), traces):
        assert line.startswith(f"{label}:  ")
        for (tensor, direction), nbytes in formulas[label].by_tensor.items():
            assert f"{tensor} {direction} {format_bytes(nbytes)}" in line, (label, tensor, direction)


def test_the_trace_tables_refuse_runs_of_different_shapes():
    from flashlab.viz.traffic_plots import bytes_by_tensor_table, trace_table, traced_forward

    with pytest.raises(ValueError, match="one shape"):
        trace_table({"a": traced_forward(64, 8, 16, 16), "b": traced_forward(64, 8, 32, 16)})
    with pytest.raises(ValueError, match="traces"):
        bytes_by_tensor_table({})


def test_the_formulas_table_names_a_formula_that_disagrees_with_its_trace(monkeypatch):
    from flashlab import traffic
    from flashlab.viz.traffic_plots import formulas_vs_traces_table

    lines = formulas_vs_traces_table(trials=2, seed=5).splitlines()
    assert len(lines) == 2 and all(line.endswith("formulas equal the traced bytes") for line in lines), lines
    real = traffic.fa1_forward_traffic
    monkeypatch.setattr(traffic, "fa1_forward_traffic", lambda *a, **kw: traffic.Traffic(real(*a, **kw).read_bytes + 1, 0))
    for line in formulas_vs_traces_table(trials=2, seed=5).splitlines():
        assert "DIFFER: fa1 traced" in line and "fa2" not in line and "backward" not in line, line
    with pytest.raises(ValueError, match="trials"):
        formulas_vs_traces_table(trials=0)


def test_the_roofline_table_caps_each_kernel_at_the_measured_roof():
    from flashlab.viz.roofline import roofline_data, roofline_table

    data = roofline_data(n=512, d=32)
    lines = roofline_table(data).splitlines()
    assert len(lines) == len(data.points)
    for line, p in zip(lines, data.points):
        intensity, attainable = _numbers(line[45:])
        assert line.startswith(p.name) and intensity == round(p.flops / p.hbm_bytes, 1)
        assert attainable == round(min(790.0, p.flops / p.hbm_bytes * 4.3), 1), line
    with pytest.raises(ValueError, match="data"):
        roofline_table("not data")


# ------------------------------------------------------------------ notebook 07 and 09's tables


def test_matmul_table_counts_two_five_and_seven_matmuls_and_their_flop_ratios():
    lines = derive.matmul_table().splitlines()
    counts = {line.split()[0]: (int(line.split()[1]), line.split(": ", 1)[1].split("; ")) for line in lines[:3]}
    assert {name: c for name, (c, _) in counts.items()} == {"forward": 2, "fa2_backward": 5, "course_backward": 7}
    assert all(len(products) == c for c, products in counts.values()), "each count must list that many products"
    assert f"{(2 + 5) / 2} with FA2's 5" in lines[3] and f"{(2 + 7) / 2} with the course's 7" in lines[3], lines[3]


def test_backward_error_table_finds_the_numpy_backwards_exact_and_a_wrong_one_off(monkeypatch):
    pytest.importorskip("torch")
    from flashlab import tiled

    def errors(text):
        return {tuple(line.split(":")[0].split()): [float(x.split()[-1]) for x in line.split(":")[1].split(",")]
                for line in text.splitlines()}

    good = errors(derive.backward_error_table(n_q=21, n_k=13, d=4, batch=2, block_q=8, block_k=4, seed=1))
    assert len(good) == 4 and all(max(e) < 1e-13 for e in good.values()), good
    right = tiled.tiled_attention_backward
    monkeypatch.setattr(tiled, "tiled_attention_backward", lambda *a, **kw: tuple(1.01 * g for g in right(*a, **kw)))
    bad = errors(derive.backward_error_table(n_q=21, n_k=13, d=4, batch=2, block_q=8, block_k=4, seed=1))
    for (causal, name), errs in bad.items():
        assert (min(errs) > 1e-4) == (name == "tiled"), f"{causal} {name}: {errs}"
    with pytest.raises(ValueError, match="block_q"):
        derive.backward_error_table(block_q=0)


def test_recompute_cost_table_counts_four_and_five_matmuls_and_the_bytes_of_p_and_lse():
    d = 64
    lines = derive.recompute_cost_table(ns=(256, 1024), d=d, block=64).splitlines()[1:]
    for line, n in zip(lines, (256, 1024), strict=True):
        cells = line.split()
        assert int(cells[0]) == n
        assert " ".join(cells[1:3]) == f"{n * n * 2 / 2**20:g} MiB" or n * n * 2 < 2**20, line
        assert float(cells[5]) == pytest.approx(4 * 2 * n * n * d, rel=1e-3), "naive: 4 matmuls of 2 N^2 d"
        assert float(cells[6]) == pytest.approx(5 * 2 * n * n * d, rel=1e-3), "flash: FA2's 5 matmuls"
    assert lines[0].split()[3:5] == ["1", "KiB"] and lines[1].split()[3:5] == ["4", "KiB"], "lse: N float32"
    with pytest.raises(ValueError, match="ns"):
        derive.recompute_cost_table(ns=())


def test_decode_traffic_table_shows_one_flop_per_byte_and_naive_near_flash():
    from flashlab import decode_results

    d = 64
    for line, n in zip(decode_results.traffic_table(ns=(512, 4096), d=d, block=64).splitlines()[1:], (512, 4096),
                       strict=True):
        cells = line.split()
        ratio, intensity = float(cells[-2].rstrip("x")), float(cells[-1])
        kv_bytes = 2 * n * d * 2  # K and V in fp16, the least a step reads
        assert 1.0 <= ratio < 1.05, f"N={n}: naive moves {ratio}x flash; at decode S is one row"
        assert 4 * n * d / kv_bytes * 0.98 < intensity <= 4 * n * d / kv_bytes, line
    with pytest.raises(ValueError, match="ns"):
        decode_results.traffic_table(ns=(0,))


def test_cache_floor_table_divides_the_cache_by_the_datasheet_bandwidth():
    from flashlab import decode_results

    lines = decode_results.cache_floor_table(heads=16, n_ctx=4096, d=64, itemsize=2, kv_heads=(16, 4, 1)).splitlines()
    for line, h_kv in zip(lines, (16, 4, 1), strict=True):
        us = float(line.split(">=")[1].split()[0])
        assert us == pytest.approx(2 * h_kv * 4096 * 64 * 2 / 4.8e12 * 1e6, abs=0.06), line  # 4.8 TB/s
    assert lines[1].startswith("grouped-query (GQA, 4 kv heads)") and lines[2].startswith("multi-query")
    with pytest.raises(ValueError, match="kv_heads"):
        decode_results.cache_floor_table(heads=16, kv_heads=(5,))


def test_split_kv_decode_equals_attention_for_any_number_of_splits():
    from flashlab import decode

    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((3, 2, 8)), rng.standard_normal((3, 50, 8)), rng.standard_normal((3, 50, 8))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(8)  # (3, 2, 50)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = p / p.sum(-1, keepdims=True) @ v  # (3, 2, 8)
    for splits in (1, 3, 7, 50):
        assert np.abs(decode.split_kv_decode(q, k, v, splits) - ref).max() < 1e-13, splits
    with pytest.raises(ValueError, match="splits"):
        decode.split_kv_decode(q, k, v, 51)


def test_split_kv_table_reports_errors_at_rounding_and_the_program_counts():
    from flashlab import decode_results

    lines = decode_results.split_kv_table(splits=(1, 5), n_cache=40, d=8, heads=2, seed=2, model_heads=8,
                                          model_splits=4).splitlines()
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 1, 8)), rng.standard_normal((2, 40, 8)), rng.standard_normal((2, 40, 8))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(8)
    ref = np.exp(s - s.max(-1, keepdims=True)) / np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True) @ v
    assert np.abs(naive_attention(q, k, v) - ref).max() < 1e-14, "the table's reference is softmax attention"
    assert [int(line.split()[0]) for line in lines[:2]] == [1, 5]
    assert all(float(line.split("=")[-1]) < 1e-14 for line in lines[:2]), lines
    assert lines[2].startswith("programs at batch 1, 8 heads: 8 without splitting, 32 with 4 splits"), lines[2]
    with pytest.raises(ValueError, match="n_cache"):
        decode_results.split_kv_table(n_cache=0)


def test_naive_vs_flash_live_rejects_bad_shapes_and_needs_a_gpu():
    torch = pytest.importorskip("torch")
    from flashlab import decode_results

    with pytest.raises(ValueError, match=r"shapes\[0\]"):
        decode_results.naive_vs_flash_live(shapes=(("decode", 0, 128),))
    with pytest.raises(ValueError, match="shapes"):
        decode_results.naive_vs_flash_live(shapes=())
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            decode_results.naive_vs_flash_live()


def test_timing_spread_line_names_the_median_and_largest_spread_of_one_kernel_timed_twice():
    def row(n, first, second):
        return {"dtype": "bfloat16", "d": 128, "n": n, "causal": False,
                "results": {"hopper": {"fwd_ms": first}, "rung:v4_hopper": {"fwd_ms": second}}}

    bench = {"rows": [row(4096, 1.0, 1.02), row(8192, 2.0, 2.2), row(16384, 4.0, 4.04), row(1024, 1.0, 3.0)]}
    line = perf.timing_spread_line(bench, n_min=4096)
    # spreads at N >= 4096: 2 %, 10 %, 1 %; the N = 1024 row (200 %) is below n_min
    assert line == "same kernel: median spread 2.0%, largest 10.0% at ('hopper', 'bfloat16', 128, 8192, False)", line
    assert perf.timing_spread_line({"rows": [row(1024, 1.0, 3.0)]}) == ""
    with pytest.raises(ValueError, match="n_min"):
        perf.timing_spread_line(bench, n_min=0)


def test_committed_attention_results_give_notebook_08_a_spread_line():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "bench_attention.json"
    if not path.exists():
        pytest.skip("no committed bench_attention.json")
    bench = json.loads(path.read_text())
    spreads = []
    for r in bench["rows"]:
        for pair in (("hopper", "rung:v4_hopper"), ("gluon", "rung:v5_gluon_ws")):
            times = [r.get("results", {}).get(name, {}).get("fwd_ms") for name in pair]
            if all(times) and r["n"] >= 4096:
                spreads.append(max(times) / min(times) - 1)
    line = perf.timing_spread_line(bench)
    assert (line == "") == (not spreads)
    if spreads:
        assert f"largest {max(spreads):.1%}" in line, line
