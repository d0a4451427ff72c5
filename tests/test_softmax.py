"""Softmax building blocks: safe softmax, the running state and its associative combine."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashlab.softmax import (combine_states, logsumexp, online_softmax, online_update, safe_softmax,
                              softmax_state)
from strategies import CORE, seeds


def plain_softmax(x):
    """Textbook softmax in extended precision: the trusted twin for moderate inputs."""
    e = np.exp(np.asarray(x, dtype=np.longdouble))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float64)


def state_of(x, v):
    """(m, l, acc) of scores x (rows, n) with values v (n, dv), straight from the definition."""
    m, l = softmax_state(x)
    acc = np.exp(x - m[:, None]) @ v
    return m, l, acc


@CORE
@given(seed=seeds, rows=st.integers(1, 4), n=st.integers(1, 30))
def test_safe_softmax_matches_textbook_softmax(seed, rows, n):
    x = 3 * np.random.default_rng(seed).standard_normal((rows, n))
    np.testing.assert_allclose(safe_softmax(x), plain_softmax(x), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(logsumexp(x), np.log(np.exp(x).sum(axis=-1)), rtol=1e-13, atol=1e-13)


def test_safe_softmax_survives_scores_that_overflow_exp():
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -1002.0]])
    if np.finfo(np.longdouble).maxexp < 1100:
        pytest.skip("the twin needs a long double that can hold exp(1000)")
    np.testing.assert_allclose(safe_softmax(x), plain_softmax(x), rtol=1e-14)
    expected = np.log(np.exp(x.astype(np.longdouble)).sum(axis=-1)).astype(np.float64)
    np.testing.assert_allclose(logsumexp(x), expected, rtol=1e-14)


def test_softmax_along_another_axis_equals_transposed_softmax():
    x = np.random.default_rng(3).standard_normal((4, 6))
    np.testing.assert_allclose(safe_softmax(x, axis=0), safe_softmax(x.T).T, rtol=1e-15)
    np.testing.assert_allclose(online_softmax(x, 4, axis=0), safe_softmax(x.T).T, rtol=1e-14)


def test_fully_masked_row_gives_nan_softmax_and_minus_inf_lse():
    x = np.array([[-np.inf, -np.inf], [0.0, -np.inf]])
    p = safe_softmax(x)
    assert np.all(np.isnan(p[0])), "a row with no visible entry has no softmax (NaN, like torch)"
    np.testing.assert_array_equal(p[1], [1.0, 0.0])
    assert logsumexp(x)[0] == -np.inf and logsumexp(x)[1] == 0.0


@CORE
@given(seed=seeds, n=st.integers(2, 30), dv=st.integers(1, 4), data=st.data())
def test_combining_two_halves_equals_the_state_of_the_whole_row(seed, n, dv, data):
    rng = np.random.default_rng(seed)
    x, v = 4 * rng.standard_normal((3, n)), rng.standard_normal((n, dv))
    cut = data.draw(st.integers(1, n - 1))
    m, l, acc = combine_states(*state_of(x[:, :cut], v[:cut]), *state_of(x[:, cut:], v[cut:]))
    m_all, l_all, acc_all = state_of(x, v)
    np.testing.assert_array_equal(m, m_all)
    np.testing.assert_allclose(l, l_all, rtol=1e-13)
    np.testing.assert_allclose(acc, acc_all, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(acc / l[:, None], plain_softmax(x) @ v, rtol=1e-12, atol=1e-13)


@CORE
@given(seed=seeds, n=st.integers(3, 30), data=st.data())
def test_combine_is_associative(seed, n, data):
    rng = np.random.default_rng(seed)
    x, v = 4 * rng.standard_normal((2, n)), rng.standard_normal((n, 2))
    a, b = sorted(data.draw(st.lists(st.integers(1, n - 1), min_size=2, max_size=2, unique=True)))
    s1, s2, s3 = state_of(x[:, :a], v[:a]), state_of(x[:, a:b], v[a:b]), state_of(x[:, b:], v[b:])
    left = combine_states(*combine_states(*s1, *s2), *s3)
    right = combine_states(*s1, *combine_states(*s2, *s3))
    for name, p, q in zip(("m", "l", "acc"), left, right):
        np.testing.assert_allclose(p, q, rtol=1e-13, atol=1e-14, err_msg=name)


def test_combining_with_an_empty_state_leaves_the_other_unchanged():
    rng = np.random.default_rng(4)
    m, l, acc = state_of(rng.standard_normal((3, 5)), rng.standard_normal((5, 2)))
    empty = (np.full(3, -np.inf), np.zeros(3), np.zeros((3, 2)))
    for combined in (combine_states(m, l, acc, *empty), combine_states(*empty, m, l, acc)):
        for name, got, want in zip(("m", "l", "acc"), combined, (m, l, acc)):
            np.testing.assert_array_equal(got, want, err_msg=f"{name} changed by an empty state")
    both_empty = combine_states(*empty, *empty)
    assert not any(np.isnan(x).any() for x in both_empty), "two empty states combined into NaN"
    np.testing.assert_array_equal(both_empty[0], empty[0])


def test_state_of_fully_masked_tile_is_empty_and_not_nan():
    m, l = softmax_state(np.full((2, 3), -np.inf))
    np.testing.assert_array_equal(m, [-np.inf, -np.inf])
    np.testing.assert_array_equal(l, [0.0, 0.0])


@CORE
@given(seed=seeds, n=st.integers(1, 40), chunk=st.integers(1, 50))
def test_online_softmax_equals_safe_softmax_for_any_chunk(seed, n, chunk):
    x = 5 * np.random.default_rng(seed).standard_normal((3, n))
    np.testing.assert_allclose(online_softmax(x, chunk), safe_softmax(x), rtol=1e-13, atol=1e-16)


@CORE
@given(seed=seeds, n=st.integers(1, 12), masked=st.integers(0, 12))
def test_online_update_equals_combining_with_the_tile_state(seed, n, masked):
    rng = np.random.default_rng(seed)
    m_i, l_i, acc = state_of(3 * rng.standard_normal((4, 5)), rng.standard_normal((5, 2)))
    s, v = 3 * rng.standard_normal((4, n)), rng.standard_normal((n, 2))
    s[:, : min(masked, n)] = -np.inf  # some tiles fully masked
    got = online_update(m_i, l_i, acc, s, v)
    m_t, l_t = softmax_state(s)
    m_safe = np.where(np.isneginf(m_t), 0.0, m_t)
    want = combine_states(m_i, l_i, acc, m_t, l_t, np.exp(s - m_safe[:, None]) @ v)
    for name, a, b in zip(("m", "l", "acc"), got, want):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14, err_msg=name)


def test_online_update_from_the_initial_state_handles_a_fully_masked_row():
    s = np.array([[-np.inf, -np.inf], [1.0, 2.0]])
    m, l, acc = online_update(np.full(2, -np.inf), np.zeros(2), np.zeros((2, 1)), s, np.ones((2, 1)))
    assert m[0] == -np.inf and l[0] == 0 and acc[0, 0] == 0, "masked row must stay empty, not NaN"
    np.testing.assert_allclose(acc[1] / l[1], [1.0])


@pytest.mark.parametrize("bad", [np.zeros((2, 0)), np.float64(1.0)])
def test_softmax_of_nothing_is_rejected(bad):
    with pytest.raises(ValueError, match="x"):
        safe_softmax(bad)


def test_online_softmax_rejects_chunk_below_one():
    with pytest.raises(ValueError, match="chunk=0"):
        online_softmax(np.ones((2, 3)), 0)
