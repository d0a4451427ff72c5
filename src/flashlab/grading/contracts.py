"""What a kernel whose signature an exercise gives must write, judged on the grader's own inputs.

After a call that passed its launch checks, the grading child launches the learner's kernel again
(``child.replay``): every launch whose output the returned value holds and one per distinct signature,
each with the learner's grid, tiles and other scalars, on tensors the grader lays out (random inputs, NaN
in the output; the learner's strides where they keep every element apart, else its own), and for the
flash forward, the backward kernels and the split-KV kernel the grader's own scale (the flash forward
also gets ``child.replay_extra_keys(N_K)`` more keys, the backward kernels as many more of the rows they loop
over, and the true LSE of the grader's scores). This module, in the parent, computes from those inputs what the
kernel's docstring promises and compares. The split-KV kernel keeps its own split bounds (N_K and
keys_per_split, or tensors of bounds the grader passes as given), so each slot it writes is compared
with the nearest whole split of keys_per_split keys, and a slot may be empty only where the call's own
LSE_part was; at the case's N_K, keys_per_split must be ceil(N_K / num_splits), and a call's relaunches
may not write only empty states where the case has keys (``judge_replay``'s ``case_kwargs``). A wrapper that
computes the answer itself and hands the kernel inputs that make it come out right (an encoded answer
that a kernel with Q = K = 0 averages back), or writes the output while the kernel runs, passes the
cases and fails here: only the kernel is launched again.

The comparison is loose (``ATOL`` + ``RTOL`` |expected| per element, and the error's norm within
``NORM_RTOL`` of the expected's, so that sizes making every expected value small do not let zeros pass):
it asks whether the kernel computes the right thing at all; the cases judge its precision. The flash forward accepts either reading of ``qk_scale``:
the scale of a natural-log softmax, or that scale times log2(e) for a kernel that uses exp2; a kernel
that takes its scale another way (a tensor of its own, passed as the learner passed it) is judged with the
case's scale or 1 (the scale folded into q). Tensor parameters a kernel adds to its signature are passed as
the learner passed them.
"""
from __future__ import annotations

import math

import numpy as np

ATOL, RTOL = 2e-2, 2e-2
NORM_RTOL = 5e-2  # the largest error norm accepted, relative to the norm of what a kernel should write


def _softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Softmax of each row, as exp(x - logsumexp(x))."""
    top = np.max(scores, axis=-1, keepdims=True)
    return np.exp(scores - (top + np.log(np.sum(np.exp(scores - top), axis=-1, keepdims=True))))


def _add(inputs: dict, scalars: dict, case_scale: float, outputs: dict) -> list:
    return [{"Out": inputs["X"] + inputs["Y"]}]


def _rows(inputs: dict, scalars: dict, case_scale: float, outputs: dict) -> list:
    x = inputs["X"]
    return [{"Out": _softmax_rows(x) if x.shape[-1] else x}]


def _flash_fwd(inputs: dict, scalars: dict, case_scale: float, outputs: dict) -> list:
    """With ``qk_scale`` as given (natural log or log2(e)-scaled); without one (a kernel that takes its
    scale as a tensor of its own, kept as the learner passed it), the case's scale or 1 (folded into q)."""
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]
    scores = np.einsum("zmd,znd->zmn", q, k)
    if scalars.get("causal"):
        rows, cols = np.arange(q.shape[1])[:, None], np.arange(k.shape[1])[None, :]
        scores = np.where(cols <= rows, scores, -np.inf)
    out = []
    for scale in _scales(scalars, case_scale):
        with np.errstate(invalid="ignore"):
            out.append({"Out": np.einsum("zmn,znd->zmd", _softmax_rows(scale * scores), v)})
    return out


def _flash_bwd(inputs: dict, scalars: dict, case_scale: float, outputs: dict) -> list:
    """dK and dV, or dQ, of attention from the inputs as given (P = exp(s Q K^T - LSE), masked; dS = P *
    (dO V^T - Delta)): s and the gradients' factor from ``sm_scale`` read either way (``_scales``), LSE in
    natural-log or log2 units (a wrapper that hands an exp2 kernel lse * log2(e)), and the factor also the
    case's scale or 1 (a natural scale of the learner's own). Where the causal mask hides a key from every
    query row of the case (``n_q_case``, which ``judge_replay`` adds; not the N_Q a launch claims), a row of dK
    and dV left unwritten (NaN, or the zeros its buffer held) is accepted: a grid may skip those keys, and
    the relaunch's extra query rows see them."""
    q, k, v, do, lse, delta = (inputs[n] for n in ("Q", "K", "V", "dO", "LSE", "Delta"))
    keep = np.ones((q.shape[1], k.shape[1]), dtype=bool)
    if scalars.get("causal"):
        keep = np.arange(k.shape[1])[None, :] <= np.arange(q.shape[1])[:, None]
    scores, dp = np.einsum("zmd,znd->zmn", q, k), np.einsum("zmd,znd->zmn", do, v) - delta[..., None]
    unseen = ~keep.any(axis=0)  # keys no query row sees
    if scalars.get("causal"):  # keys none of the case's query rows sees (the learner's N_Q without a case)
        unseen |= np.arange(k.shape[1]) >= int(scalars.get("n_q_case", scalars.get("n_q_call", q.shape[1])))
    out = []
    for s in _scales(scalars, case_scale):
        for lse_unit in (1.0, math.log(2.0)):
            with np.errstate(over="ignore", invalid="ignore"):
                p = np.where(keep, np.exp(s * scores - lse_unit * lse[..., None]), 0.0)
            ds = p * dp
            for factor in dict.fromkeys((s, case_scale, 1.0)):
                want = {}
                if "dV" in outputs:
                    want["dV"] = np.einsum("zmn,zmd->znd", p, do)
                if "dK" in outputs:
                    want["dK"] = factor * np.einsum("zmn,zmd->znd", ds, q)
                if "dQ" in outputs:
                    want["dQ"] = factor * np.einsum("zmn,znd->zmd", ds, k)
                for name in ("dK", "dV"):
                    if name in want:
                        got = outputs[name]
                        left = (np.isnan(got) | (got == 0.0)) & unseen[None, :, None]
                        want[name] = np.where(left, got, want[name])
                out.append(want)
    return out


def _scales(scalars: dict, case_scale: float) -> list:
    """The natural-log scales a kernel may be computing: ``qk_scale`` (``sm_scale``) as given (read by exp,
    or by exp2 as a log2(e)-scaled scale), or without one the case's scale or 1 (folded into q), read
    either way."""
    name = "qk_scale" if "qk_scale" in scalars else "sm_scale"
    given = (scalars[name],) if name in scalars else (case_scale, 1.0)
    return [s * f for s in given for f in (1.0, math.log(2.0))]


def _runs_of_keys(scores: np.ndarray, v: np.ndarray):
    """Every run of consecutive keys [a, b) of one query row as prefix sums: (top, P, W), with
    sum_{a <= j < b} exp(s_j - top) = P[b] - P[a] and the same sum of exp(s_j - top) v_j = W[b] - W[a]."""
    top = float(np.max(scores)) if scores.size else 0.0
    w = np.exp(scores - top)  # (Nk,)
    return top, np.concatenate([[0.0], np.cumsum(w)]), np.concatenate([np.zeros((1, v.shape[-1])),
                                                                          np.cumsum(w[:, None] * v, 0)])


def _nearest_run(top: float, P: np.ndarray, W: np.ndarray, lse: float, o: np.ndarray) -> tuple:
    """(o, lse) of the run of keys whose partial state is nearest to the written (``o``, ``lse``): the runs
    whose lse is closest for each start a (the sum over [a, b) grows with b), then the nearest o among them;
    the empty run (0, -inf) where nothing is written as -inf."""
    d = W.shape[-1]
    if np.isneginf(lse) or P[-1] <= 0:
        return np.zeros(d), -np.inf
    if lse == math.inf:  # nothing to go by: the whole row
        return W[-1] / P[-1], top + float(np.log(P[-1]))
    a = np.arange(len(P) - 1)
    if math.isnan(lse):  # an o without its lse: the nearest o of every run (of a prefix or suffix on long rows)
        pairs = (np.stack(np.triu_indices(len(P), 1), 1) if len(P) <= 1025 else
                 np.concatenate([np.stack([0 * a, a + 1], 1), np.stack([a, 0 * a + len(P) - 1], 1)]))
    else:
        with np.errstate(over="ignore"):
            target = P[:-1] + np.exp(lse - top)  # (Nk,): P[b] sought from each a
        b = np.searchsorted(P, target)  # the first b whose sum reaches the written lse
        pairs = np.concatenate([np.stack([a, b - 1], 1), np.stack([a, b], 1)])  # either side of it
    pairs = pairs[(pairs[:, 1] > pairs[:, 0]) & (pairs[:, 1] < len(P))]
    if not len(pairs):  # the written lse is past the whole row's: the whole row is nearest
        pairs = np.array([[0, len(P) - 1]])
    mass = P[pairs[:, 1]] - P[pairs[:, 0]]  # (R,)
    with np.errstate(divide="ignore", invalid="ignore"):
        lses = top + np.log(mass)
        outs = (W[pairs[:, 1]] - W[pairs[:, 0]]) / mass[:, None]  # (R, d)
        gap = (0.0 if math.isnan(lse) else np.abs(lses - lse)) + np.nan_to_num(np.max(np.abs(outs - o), axis=1),
                                                                              nan=np.inf)
    best = int(np.argmin(np.where(np.isnan(gap), np.inf, gap)))
    return outs[best], float(lses[best])


def _split_states(top: float, P: np.ndarray, W: np.ndarray, n_keys: int, per: int) -> list:
    """(o, lse) of every non-empty split [j * per, min((j + 1) * per, n_keys)) of one row's runs."""
    bounds = [(lo, min(lo + per, n_keys)) for lo in range(0, n_keys, per)]
    return [((W[b] - W[a]) / (P[b] - P[a]), top + float(np.log(P[b] - P[a]))) for a, b in bounds]


def _nearest_state(states: list, lse: float, o: np.ndarray) -> tuple:
    """The state of ``states`` nearest to the written (``o``, ``lse``) (lse ignored where NaN)."""
    def gap(state):
        with np.errstate(invalid="ignore"):
            far = float(np.max(np.abs(state[0] - o))) + (0.0 if math.isnan(lse) else abs(state[1] - lse))
        return math.inf if math.isnan(far) else far
    return min(states, key=gap)


def _decode_partial(inputs: dict, scalars: dict, case_scale: float, outputs: dict) -> list:
    """Each written (sequence z, split slot s) of O_part and LSE_part must hold the partial state of a run of
    consecutive keys of sequence z: lse = log sum_j exp(x_j), o = sum_j exp(x_j - lse) v_j with
    x_j = scale q_z . k_j. With ``keys_per_split`` among the kernel's scalars the run is a whole split
    [j * per, min((j + 1) * per, N_K)), any j (a launch may write any splits); without it (bounds in tensors
    of the learner's) any run, the nearest compared. A slot may hold the empty state (lse = -inf, o = 0 or
    left NaN) only where the learner's LSE_part held -inf after the call (``LSE_after_call``), a slot left
    NaN altogether only beside written ones; a launch that writes nothing is compared with a real state."""
    q, k, v = inputs["Q"], inputs["K"], inputs["V"]  # (Z, d), (Z, Nk, d), (Z, Nk, d)
    o_got, lse_got = outputs["O_part"], outputs["LSE_part"]  # (Z, S, d), (Z, S)
    after = inputs.get("LSE_after_call")  # (Z, S) or absent
    n_keys = int(scalars.get("n_keys", k.shape[1]))
    per = scalars.get("keys_per_split")
    empty_state = (np.zeros(q.shape[-1]), -np.inf)
    unwritten = np.isnan(lse_got) & np.all(np.isnan(o_got), axis=-1)  # (Z, S)
    out = []
    for scale in _scales(scalars, case_scale):
        o_want, lse_want = np.empty_like(o_got), np.empty_like(lse_got)
        for z in range(q.shape[0]):
            runs = _runs_of_keys(scale * (k[z, :n_keys] @ q[z]), v[z, :n_keys])
            splits = _split_states(*runs, n_keys, int(per)) if per else None
            for s in range(lse_got.shape[1]):
                lse, o = float(lse_got[z, s]), np.where(np.isnan(o_got[z, s]), 0.0, o_got[z, s])
                may_be_empty = after is None or not np.isfinite(after[z, s])
                if unwritten[z, s] and not unwritten.all():
                    o_want[z, s], lse_want[z, s] = np.nan, np.nan  # left as the grader filled it
                    continue
                if lse == -math.inf and may_be_empty:
                    o_want[z, s] = np.where(np.isnan(o_got[z, s]), np.nan, 0.0)  # o = 0, or left unwritten
                    lse_want[z, s] = -np.inf
                    continue
                if unwritten.all() or lse == -math.inf:  # nothing to go by, or empty where the call wrote a state
                    lse = math.nan
                if splits is not None:
                    o_want[z, s], lse_want[z, s] = _nearest_state(splits or [empty_state], lse, o)
                else:
                    o_want[z, s], lse_want[z, s] = _nearest_run(*runs, lse, o)
        out.append({"LSE_part": lse_want, "O_part": o_want})  # a wrong lse named first
    return out


# kernel name: (what it computes, in words; fn(inputs, scalars, case scale, outputs) -> candidate
# {output name: expected}, NaN where nothing may be written)
CONTRACTS = {
    "add_kernel": ("X + Y", _add),
    "online_softmax_kernel": ("the softmax of each row of X", _rows),
    "flash_fwd_kernel": ("softmax(qk_scale Q K^T) V", _flash_fwd),
    "decode_partial_kernel": ("the partial state (o_s, lse_s) of its split's keys in each slot it writes",
                              _decode_partial),
    "softmax_kernel": ("the softmax of each row of X", _rows),
    "flash_bwd_dkdv_kernel": ("dK and dV of attention (dV = P^T dO, dK = sm_scale dS^T Q)", _flash_bwd),
    "flash_bwd_dq_kernel": ("dQ of attention (dQ = sm_scale dS K)", _flash_bwd),
}


def replayed(must_launch) -> bool:
    """Whether a part that must launch these kernels has one the grader launches again."""
    return any(name in CONTRACTS for name in must_launch)


def _misses(got: np.ndarray, want: np.ndarray) -> tuple[int, tuple, float, float]:
    """(elements out of tolerance, the worst one's index, what it holds, what it should). Each element within
    ATOL + RTOL |want|, and the finite part as a whole within NORM_RTOL of want's norm: an output of zeros,
    or of any small values, is far from a want that is small everywhere (a problem whose sizes make every
    expected value fall under ATOL)."""
    with np.errstate(invalid="ignore"):
        err = np.where(np.isnan(got), np.inf, np.abs(got - want))
        err = np.where((got == want) | (np.isnan(got) & np.isnan(want)), 0.0, err)  # -inf as -inf; unwritten
    bad = ~((err == 0.0) | (err <= ATOL + RTOL * np.abs(want)))
    finite = np.isfinite(err) & np.isfinite(want)
    scale = float(np.sqrt(np.sum(np.square(want[finite])))) if finite.any() else 0.0
    if scale > 0.0 and float(np.sqrt(np.sum(np.square(err[finite])))) > NORM_RTOL * scale:
        with np.errstate(invalid="ignore"):
            bad |= finite & (err > NORM_RTOL * np.abs(want))
    if not bad.any():
        return 0, (), 0.0, 0.0
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), err.shape))
    return int(bad.sum()), worst, float(got[worst]), float(want[worst])


def _judge_launch(name: str, launch: dict, case_scale: float) -> str | None:
    """None when one launch run again wrote what the contract says; else what is wrong, for the message."""
    what, contract = CONTRACTS[name]
    inputs, outputs, scalars = launch.get("inputs"), launch.get("outputs"), launch.get("scalars")
    if not (isinstance(inputs, dict) and isinstance(outputs, dict) and isinstance(scalars, dict)) or not all(
            type(a) is np.ndarray for a in list(inputs.values()) + list(outputs.values())):
        return "malformed"
    try:
        candidates = contract(inputs, scalars, float(case_scale), outputs)
    except (KeyError, ValueError, TypeError) as exc:
        return f"malformed ({type(exc).__name__})"
    best = None
    for expected in candidates:
        misses = [(out, *_misses(outputs[out], want)) for out, want in expected.items()
                  if out in outputs and outputs[out].shape == want.shape]
        if len(misses) != len(expected):
            return "malformed (an output's shape)"
        wrong = [m for m in misses if m[1]]
        if not wrong:
            return None
        if best is None or sum(m[1] for m in wrong) < sum(m[1] for m in best):
            best = wrong
    out, count, index, got, want = best[0]
    held = "NaN (never written)" if math.isnan(got) else f"{got:.6g}"
    return f"{out}{list(index)} holds {held} where {want:.6g} belongs ({count} of {outputs[out].size} elements wrong)"


def _setting(name: str, launch: dict) -> str:
    """What the relaunch gave the kernel, in words (its sizes and the grader's own scale)."""
    inputs, scalars = launch.get("inputs") or {}, launch.get("scalars") or {}
    if name == "flash_fwd_kernel":
        k = inputs.get("K")
        keys = f" with N_K = {k.shape[1]} keys" if isinstance(k, np.ndarray) and k.ndim == 3 else ""
        scale = f", qk_scale = {scalars['qk_scale']:g}" if "qk_scale" in scalars else ""
        return f"random Q, K, V{keys}{scale}"
    if name in ("flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel"):
        q, k = inputs.get("Q"), inputs.get("K")
        sizes = (f" with N_Q = {q.shape[1]} query rows and N_K = {k.shape[1]} keys"
                 if all(isinstance(x, np.ndarray) and x.ndim == 3 for x in (q, k)) else "")
        scale = f", sm_scale = {scalars['sm_scale']:g}" if "sm_scale" in scalars else ""
        return f"random Q, K, V and dO{sizes}, the LSE and D = rowsum(dO * O) of that attention{scale}"
    if name == "decode_partial_kernel":
        k = inputs.get("K")
        keys = f" with N_K = {k.shape[1]} keys per sequence" if isinstance(k, np.ndarray) and k.ndim == 3 else ""
        scale = f", qk_scale = {scalars['qk_scale']:g}" if "qk_scale" in scalars else ""
        return f"random Q, K, V{keys}{scale}"
    return "random " + ", ".join(sorted(inputs))


def _decode_call_problem(launches: list, case_kwargs: dict) -> str | None:
    """What the split-KV relaunches of one call got wrong as a whole, from the case's own sizes: a split
    size other than ceil(N_K / num_splits) at the case's N_K, or only empty states written where the
    case's sequences have keys (an answer returned through other tensors)."""
    k, splits = case_kwargs.get("k"), case_kwargs.get("num_splits")
    if not (isinstance(k, np.ndarray) and k.ndim == 3 and isinstance(splits, int) and splits >= 1):
        return None
    n_keys = k.shape[1]
    for launch in launches:
        scalars = launch.get("scalars") or {}
        per = scalars.get("keys_per_split")
        if per is not None and scalars.get("n_keys") == n_keys and per != -(-n_keys // splits):
            return (f"it was given keys_per_split = {per} with N_K = {n_keys} keys in {splits} splits, where a split "
                    f"holds ceil(N_K / num_splits) = {-(-n_keys // splits)} keys")
    written = [launch["outputs"].get("LSE_part") for launch in launches if isinstance(launch.get("outputs"), dict)]
    if n_keys and written and not any(isinstance(x, np.ndarray) and np.isfinite(x).any() for x in written):
        return ("it wrote only empty states (lse = -inf) where the sequences have keys: the partial states must be "
                "in the O_part and LSE_part it is given")
    # at the case's own N_K every split with keys must get a state from some launch: a launch at those sizes
    # that writes empty states beside a decoy that writes one would otherwise pass
    per = -(-n_keys // splits)
    full = [launch["outputs"].get("LSE_part") for launch in launches if isinstance(launch.get("outputs"), dict)
            and _given(launch.get("scalars") or {}, "N_K") == n_keys]
    full = [x for x in full if isinstance(x, np.ndarray) and x.ndim == 2]
    if full:
        slots = min(splits, min(x.shape[1] for x in full))
        covered = np.zeros(slots, dtype=bool)
        for x in full:
            covered |= np.isfinite(x[:, :slots]).any(axis=0)
        empty = [j for j in range(slots) if j * per < n_keys and not covered[j]]
        if empty:
            return (f"at the problem's N_K = {n_keys} its launches left split {empty[0]} (keys {empty[0] * per} to "
                    f"{min((empty[0] + 1) * per, n_keys) - 1}) with the empty state: every split with keys must "
                    "get its partial state")
    return None


def _case_sizes(name: str, case_kwargs: dict) -> dict:
    """{size parameter: the case's value} that one launch of ``name`` must have been given (N_Q, N_K,
    HEAD_DIM and CAUSAL from q, k and causal; n_cols from x's rows; n_elements from x); empty where the
    case does not say."""
    q, k, x = (case_kwargs.get(n) for n in ("q", "k", "x"))
    shaped = lambda a, dims: isinstance(a, np.ndarray) and a.ndim >= dims  # noqa: E731
    if name in ("flash_fwd_kernel", "flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel") and shaped(q, 2) and shaped(k, 2):
        sizes = {"N_Q": q.shape[-2], "N_K": k.shape[-2], "HEAD_DIM": q.shape[-1]}
        return dict(sizes, CAUSAL=True) if case_kwargs.get("causal") else sizes
    if name == "decode_partial_kernel" and shaped(k, 2):
        return {"N_K": k.shape[-2], "HEAD_DIM": k.shape[-1]}
    if name in ("softmax_kernel", "online_softmax_kernel") and shaped(x, 1):
        return {"n_cols": x.shape[-1]}
    if name == "add_kernel" and shaped(x, 1):
        return {"n_elements": x.size}
    return {}


def _given(scalars: dict, size: str):
    """What a launch run again was given for ``size``: its parameter (``call_<size>``), for N_K the keys the
    relaunch read when the kernel has no N_K (``n_keys``, from its K), for CAUSAL False without one."""
    if f"call_{size}" in scalars:
        return scalars[f"call_{size}"]
    if size == "N_K":
        return scalars.get("n_keys")
    return False if size == "CAUSAL" else None


def _at_case_sizes(scalars: dict, wanted: dict) -> bool:
    return all(_given(scalars, k) == v for k, v in wanted.items() if _given(scalars, k) is not None)


def _sizes_problem(name: str, launches: list, case_kwargs: dict) -> str | None:
    """None when one launch run again had the case's own sizes (those it has parameters for) and, for a
    causal case, CAUSAL; else what its launches had. A kernel launched only on small inputs of the
    wrapper's making (a row of one key, a head dimension of 1), or only without its causal mask, where
    what it must write is trivial or another problem, while the result comes from elsewhere, fails here.
    Launches that each take a chunk of the rows or keys (N_Q or N_K a chunk's length) fail too."""
    wanted = _case_sizes(name, case_kwargs)
    given = [launch.get("scalars") or {} for launch in launches if isinstance(launch, dict)]
    if not wanted or not any(any(_given(g, k) is not None for k in wanted) for g in given) or any(
            _at_case_sizes(g, wanted) for g in given):
        return None
    case = ", ".join(f"{k} = {v}" for k, v in wanted.items())
    seen = "; ".join(", ".join(f"{k} = {_given(g, k)}" for k in wanted if _given(g, k) is not None)
                     for g in given[:3])
    return f"was never launched at the problem's sizes ({case}); its launches had {seen}"


RANDOM_INPUTS = ("X", "Y", "Q", "K", "V", "dO")  # drawn from a standard normal for every relaunch


def _not_drawn(launch: dict) -> str | None:
    """What is wrong with a relaunch's random inputs as they came back (their spread far from the standard
    normal's 1, or not finite), or None. Checked here, in the grader's process: a learner's module that
    replaces torch.randn in its own process made them zeros, and every expected value with them."""
    inputs = launch.get("inputs") if isinstance(launch.get("inputs"), dict) else {}
    for key in RANDOM_INPUTS:
        x = inputs.get(key)
        if not isinstance(x, np.ndarray) or x.size < 8:
            continue
        if not np.all(np.isfinite(x)):
            return f"with {key} not finite"
        spread = float(np.std(x))
        # 256 draws or more: their spread lies within 0.7..1.4 but for a chance far below 1e-9
        if spread == 0.0 or (x.size >= 256 and not 0.7 <= spread <= 1.4):
            return f"with {key} spread {spread:.3g} around its mean (a standard normal draw spreads about 1)"
    return None


def judge_replay(must_launch, replay, case_scale: float = 1.0, case_kwargs: dict | None = None) -> str | None:
    """None when every launch run again wrote what its kernel's contract says; else the message. ``replay``:
    the child's record (``child.replay``: the kernel, and each launch's scalars, input and output views) with
    its arrays decoded, or None when none came back; ``case_scale``: the scale of the case's call (for a
    kernel that takes none)."""
    name = next((n for n in sorted(must_launch) if n in CONTRACTS), None)
    if name is None:
        return None
    if not isinstance(replay, dict) or replay.get("kernel") != name:
        return f"the grader could not launch {name} again on inputs of its own (no record of it came back)"
    what = CONTRACTS[name][0]
    if replay.get("error"):
        return (f"the grader launches {name} again on inputs of its own, to check that the kernel itself computes "
                f"{what}, and could not: {str(replay['error'])[:600]}")
    launches = replay.get("launches")
    if not isinstance(launches, list) or not launches:
        return f"the record of {name} launched again by the grader was malformed"
    for launch in launches:
        drawn = _not_drawn(launch) if isinstance(launch, dict) else None
        if drawn:
            return (f"the inputs the grader drew to launch {name} again came back {drawn}: they were not what it "
                    "drew (torch's random functions or generators changed in your process?); the relaunch cannot "
                    "judge the kernel, so no credit")
    if case_kwargs:
        problem = _sizes_problem(name, launches, case_kwargs)
        if problem:
            return (f"{name} {problem}. The grader launches the kernel again on inputs of its own, at the sizes "
                    f"your launches gave it, to check that the kernel itself computes {CONTRACTS[name][0]}: "
                    "launch it on the problem itself, not only on inputs of other sizes")
    if name == "decode_partial_kernel" and case_kwargs and all(isinstance(launch, dict) for launch in launches):
        problem = _decode_call_problem(launches, case_kwargs)
        if problem:
            return (f"{name}, launched again by the grader on inputs of its own ({_setting(name, launches[0])}; your "
                    f"grid, tiles and other scalars), did not compute {what}: {problem}")
    q = (case_kwargs or {}).get("q")
    if name in ("flash_bwd_dkdv_kernel", "flash_bwd_dq_kernel") and isinstance(q, np.ndarray) and q.ndim >= 2:
        for launch in launches:
            if isinstance(launch, dict) and isinstance(launch.get("scalars"), dict):
                launch["scalars"]["n_q_case"] = int(q.shape[-2])
    for i, launch in enumerate(launches):
        problem = _judge_launch(name, launch, case_scale) if isinstance(launch, dict) else "malformed"
        if problem is None:
            continue
        if problem.startswith("malformed"):
            return f"the record of {name} launched again by the grader was {problem}"
        which = f", launch {i + 1} of the {len(launches)} run again" if len(launches) > 1 else ""
        own = launch.get("own_scalars") or []
        stale = (f". Your kernel also takes {', '.join(own)}, which the grader passes as your launch had "
                 f"{'them' if len(own) > 1 else 'it'}: a number computed "
                 "from the scale or the sizes (the scale in log2 units, a count of key blocks) no longer matches "
                 "what the grader gives the contract's parameters, so compute it inside the kernel from them"
                 if own else "")
        return (f"{name}, launched again by the grader on inputs of its own ({_setting(name, launch)}; your grid, "
                f"tiles and other scalars{which}), did not compute {what}: {problem}. The kernel alone must compute "
                "it for any inputs it is given: check the masks of a last, partial block, and that the result does "
                f"not come from what the wrapper prepared{stale}")
    return None
