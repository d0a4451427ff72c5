"""Bad input is rejected at the boundary with errors that name the argument; NaN/inf propagate."""
import numpy as np
import pytest

from flashlab.reference import naive_attention, naive_attention_backward
from flashlab.tiled import tiled_attention, tiled_attention_backward, tiled_attention_fa1
from flashlab.tracer import TrafficTracer


def _grads_of(fn_backward):
    def run(q, k, v, **kw):
        qs, vs = np.shape(q), np.shape(v)  # the wrapper must not fail before the library does
        batch, nq = qs[:-2], (qs[-2] if len(qs) >= 2 else 1)
        dtype = q.dtype if isinstance(q, np.ndarray) and q.dtype.kind == "f" else np.float64
        do = np.ones((*batch, nq, vs[-1]), dtype)
        if fn_backward is naive_attention_backward:
            return naive_attention_backward(q, k, v, do, **kw)
        lse = np.zeros((*batch, nq), do.dtype)
        return tiled_attention_backward(q, k, v, do, lse, do, **kw)
    run.__name__ = fn_backward.__name__
    return run


ENTRY_POINTS = [naive_attention, tiled_attention, tiled_attention_fa1,
                _grads_of(naive_attention_backward), _grads_of(tiled_attention_backward)]
TILED = [tiled_attention, tiled_attention_fa1, _grads_of(tiled_attention_backward)]
ids = [f.__name__ for f in ENTRY_POINTS]


def qkv(nq=5, nk=6, d=4, dv=3, batch=(2,), dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, nq, d)).astype(dtype), rng.standard_normal((*batch, nk, d)).astype(dtype),
            rng.standard_normal((*batch, nk, dv)).astype(dtype))


def shapes_case(name):
    q, k, v = qkv()
    return {
        "head dim": ((q, k[..., :3], v[..., :3]), ValueError, r"k\.shape\[-1\]=3 must equal q\.shape\[-1\]=4"),
        "kv length": ((q, k, v[..., :4, :]), ValueError, r"v\.shape\[-2\]=4 must equal k\.shape\[-2\]=6"),
        "batch dims": ((q, k[None], v[None]), ValueError, r"k batch dims \(1, 2\) must equal q batch dims \(2,\)"),
        "v batch": ((q, k, v[:1]), ValueError, r"v batch dims \(1,\) must equal q batch dims \(2,\)"),
        "rank": ((q[0, 0], k, v), ValueError, r"q\.ndim=1"),
        "int dtype": ((q.astype(np.int64), k, v), TypeError, r"q\.dtype=int64"),
        "bool dtype": ((q, k.astype(bool), v), TypeError, r"k\.dtype=bool"),
        "complex": ((q, k, v.astype(np.complex128)), TypeError, r"v\.dtype=complex128"),
        "mixed dtypes": ((q, k.astype(np.float32), v), TypeError, r"k\.dtype=float32"),
        "list": ((q.tolist(), k, v), TypeError, r"q must be a numpy\.ndarray, got list"),
        "empty queries": ((q[..., :0, :], k, v), ValueError, r"q\.shape\[-2\]=0 \(Nq\) must be >= 1"),
        "empty keys": ((q, k[..., :0, :], v[..., :0, :]), ValueError, r"k\.shape\[-2\]=0 \(Nk\) must be >= 1"),
        "empty head": ((q[..., :0], k[..., :0], v), ValueError, r"q\.shape\[-1\]=0 \(d\) must be >= 1"),
    }[name]


CASES = ["head dim", "kv length", "batch dims", "v batch", "rank", "int dtype", "bool dtype", "complex",
         "mixed dtypes", "list", "empty queries", "empty keys", "empty head"]


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=ids)
@pytest.mark.parametrize("case", CASES)
def test_bad_shapes_and_dtypes_are_named_in_the_error(fn, case):
    args, error, message = shapes_case(case)
    with pytest.raises(error, match=message):
        fn(*args)


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=ids)
@pytest.mark.parametrize("scale,error", [(float("nan"), ValueError), (float("inf"), ValueError), (0.0, ValueError),
                                         (-1.0, ValueError), ("0.5", TypeError), (True, TypeError)])
def test_scale_must_be_a_finite_positive_number(fn, scale, error):
    with pytest.raises(error, match="scale"):
        fn(*qkv(), scale=scale)


@pytest.mark.parametrize("fn", TILED, ids=[f.__name__ for f in TILED])
@pytest.mark.parametrize("name,value,error", [("block_q", 0, ValueError), ("block_k", -3, ValueError),
                                              ("block_q", 16.0, TypeError), ("block_k", None, TypeError),
                                              ("block_q", True, TypeError)])
def test_block_sizes_must_be_positive_ints(fn, name, value, error):
    with pytest.raises(error, match=f"{name}"):
        fn(*qkv(), **{name: value})


@pytest.mark.parametrize("fn", TILED[:2], ids=["tiled_attention", "tiled_attention_fa1"])
def test_tracer_must_be_a_tracer_and_block_numpy_ints_are_fine(fn):
    with pytest.raises(TypeError, match="tracer"):
        fn(*qkv(), tracer="yes")
    o = fn(*qkv(), block_q=np.int64(2), block_k=np.int32(3))
    np.testing.assert_allclose(o, naive_attention(*qkv()), atol=1e-13)


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=ids)
def test_causal_must_be_a_bool(fn):
    with pytest.raises(TypeError, match="causal"):
        fn(*qkv(), causal="yes")


@pytest.mark.parametrize("arg", ["o", "lse", "do"])
def test_backward_checks_o_lse_and_do_shapes(arg):
    q, k, v = qkv()
    o, lse = tiled_attention(q, k, v, return_lse=True)
    given = dict(o=o, lse=lse, do=np.ones_like(o))
    given[arg] = given[arg][..., :-1]  # one row or column short
    with pytest.raises(ValueError, match=rf"{arg}\.shape="):
        tiled_attention_backward(q, k, v, given["o"], given["lse"], given["do"])
    given[arg] = 3  # not an array
    with pytest.raises(TypeError, match=rf"{arg} must be a numpy\.ndarray"):
        tiled_attention_backward(q, k, v, given["o"], given["lse"], given["do"])


def test_naive_backward_checks_do_shape():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"do\.shape=\(2, 5, 2\) must be \(2, 5, 3\)"):
        naive_attention_backward(q, k, v, np.ones((2, 5, 2)))


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=ids)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_propagate_without_crashing(fn, bad):
    q, k, v = qkv(nq=7, nk=7)
    q[0, 2, 1] = bad
    with np.errstate(all="raise"):  # no floating-point warning may escape either
        try:
            out = fn(q, k, v, block_q=3, block_k=2) if fn in TILED else fn(q, k, v)
        except FloatingPointError as e:  # pragma: no cover - reported as a failure below
            pytest.fail(f"{fn.__name__} raised a floating-point warning on {bad} input: {e}")
    out = out if isinstance(out, tuple) else (out,)
    first = out[0]
    assert not np.isfinite(first[0, 2]).all(), "the row holding the non-finite value should not stay finite"
    assert np.isfinite(first[1]).all(), "other batch elements must be unaffected"


def test_a_tracer_holds_one_run_only():
    tracer = TrafficTracer()
    tiled_attention(*qkv(), tracer=tracer)
    with pytest.raises(RuntimeError, match="new one per run"):
        tiled_attention(*qkv(), tracer=tracer)


@pytest.mark.parametrize("fn", ENTRY_POINTS, ids=ids)
@pytest.mark.parametrize("tensor", ["k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("causal", [False, True])
def test_non_finite_keys_and_values_propagate_quietly(fn, tensor, bad, causal):
    q, k, v = qkv(nq=7, nk=7)
    {"k": k, "v": v}[tensor][0, 2, 1] = bad  # batch element 0, key 2
    kw = dict(causal=causal, block_q=3, block_k=2) if fn in TILED else dict(causal=causal)
    with np.errstate(all="raise"):  # a floating-point warning would raise here
        out = fn(q, k, v, **kw)
    out = out if isinstance(out, tuple) else (out,)
    assert any(not np.isfinite(x[0]).all() for x in out), f"{tensor}={bad} vanished from batch element 0"
    for x in out:
        assert np.isfinite(x[1]).all(), "other batch elements must be unaffected"


def test_softmax_state_errors_name_the_argument():
    from flashlab.softmax import combine_states, online_update, softmax_state

    with pytest.raises(ValueError, match="scores must have at least one axis"):
        softmax_state(np.float64(1.0))
    m, l, acc = np.zeros(3), np.ones(3), np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"l_b\.shape=\(4,\) must equal m_b\.shape=\(3,\)"):
        combine_states(m, l, acc, m, np.ones(4), acc)
    with pytest.raises(ValueError, match=r"acc_a\.shape=\(2, 2\)"):
        combine_states(m, l, acc[:2], m, l, acc)
    with pytest.raises(ValueError, match=r"m_a\.shape=\(3,\), m_b\.shape=\(4,\)"):
        combine_states(m, l, acc, np.zeros(4), np.ones(4), np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"s\.shape=\(2, 5\) must be m_i\.shape"):
        online_update(m, l, acc, np.zeros((2, 5)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"v\.shape=\(4, 2\) must be \(cols of s, dv of acc\) = \(5, 2\)"):
        online_update(m, l, acc, np.zeros((3, 5)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="acc and v"):
        online_update(m, l, acc, np.zeros((3, 5)))


@pytest.mark.parametrize("value,error", [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_tracer_itemsizes_must_be_positive_ints(value, error):
    with pytest.raises(error, match="itemsize"):
        TrafficTracer(itemsize=value)
    with pytest.raises(error, match="stat_itemsize"):
        TrafficTracer(stat_itemsize=value)
    assert TrafficTracer(itemsize=np.int64(2)).itemsize == 2


def test_paper_view_errors_name_n():
    from flashlab.traffic import flash_hbm_accesses, standard_hbm_accesses

    with pytest.raises(ValueError, match=r"^n=0"):
        flash_hbm_accesses(0, 64, 4096)
    with pytest.raises(ValueError, match=r"^n=0"):
        standard_hbm_accesses(0, 64)
