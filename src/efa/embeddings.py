"""Static word embeddings of efa's models and the matrices they factorise: the linear-analogy
theory of the mixture-of-experts paper (Wibisono & Wang, Sec 4.2 and App. G–L), measured.

Notation of the paper: w_i is the *center* embedding of word i (the read-out side), c_j the
*context* embedding (the token table); S is the sentence (window) length.

- CBOW without negative sampling (Prop 9): ``w_iᵀc_j ≈ log(p(w_i, c_j) / p(c_j)) + log|V|``,
  with p(w_i, c_j) the frequency of word i at a position and word j at another position of the
  same sentence (:func:`cooccurrence`, :func:`cbow_targets`, :func:`prop9_correlations`).
  In efa this model is ``CategoricalFM`` (Prop 1 of the EFA paper): W = ρ, C = α
  (:func:`cbow_embeddings`).
- One-layer, one-head attention without residuals or positions (Eq. 1, Prop 14): the masked
  slot's weight on position j is γ_j = τ_{a_j} / Σ_s τ_{a_s} (the [MASK] slot included), with
  τ_j = exp(c_jᵀ W^KQ c_[MASK] / √d_w) depending on the context word only. Then
  ``w_iᵀc_j ≈ (|V| Σ_(i,j) γ − Σ_(·,j) γ) / (S Σ_(·,j) γ²)``; with c̃_j = S ζ_j c_j,
  ζ_j = Σ_(·,j) γ² / Σ_(·,j) γ, ``w_iᵀc̃_j ≈ log(p̄(w_i, c_j)/p̄(c_j)) + log|V|``, p̄ ∝ Σ_(i,j) γ
  (:func:`attention_embeddings`, :func:`attention_statistics`). For efa's ``EFA`` with
  ``block="bare"``, ``bias=False``, no positions and one head, W = δ W^O W^V exactly.
- Prop 13 / 17: if w_r + w_s ≈ w_t + w_u then c_r + c_s ≈ c_t + c_u (c̃ for attention);
  :func:`offset_residuals` measures both sides on analogy quadruples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt
from scipy.stats import pearsonr, spearmanr

if TYPE_CHECKING:  # for annotations only
    import pandas as pd

    from efa.baselines.fm import CategoricalFM
    from efa.core.attention import Block
    from efa.core.encoders import LinearReadout, TableEncoder
    from efa.core.model import EFA


def _sentences(sentences, num_words: int) -> np.ndarray:
    try:
        x = np.asarray(sentences)
    except ValueError:  # numpy's "inhomogeneous shape"
        raise ValueError("sentences must be an integer array [N, S]: every sentence of the "
                         "same length S (these are ragged)") from None
    if x.ndim != 2 or x.dtype.kind not in "iu" or x.shape[1] < 2:
        raise ValueError(f"sentences must be an integer array [N, S] with S >= 2, got shape "
                         f"{x.shape} of dtype {x.dtype}")
    if x.size and (x.min() < 0 or x.max() >= num_words):
        raise ValueError(f"word ids must be in 0..{num_words - 1}, got {x.min()}..{x.max()}")
    return x.astype(np.int64)


def cooccurrence(sentences: npt.ArrayLike, num_words: int) -> np.ndarray:
    """The co-occurrence counts #(w_i, c_j) of a corpus of sentences.

    Over sentences and ordered pairs of positions m ≠ j, the number of times word i is at m
    (the center) and word j at j (a context word).

    Parameters
    ----------
    sentences : array_like of int, shape (N, S)
        N sentences of the same length S ≥ 2, word ids in 0..V−1.
    num_words : int
        The vocabulary size V.

    Returns
    -------
    numpy.ndarray, shape (V, V)
        The counts (float64, symmetric).

    Raises
    ------
    ValueError
        If ``sentences`` is ragged, not an integer matrix with S ≥ 2, or has an id out of range.
    """
    x = _sentences(sentences, num_words)
    counts = np.zeros((num_words, num_words))
    for m in range(x.shape[1]):
        for j in range(x.shape[1]):
            if j != m:
                np.add.at(counts, (x[:, m], x[:, j]), 1.0)
    return counts


def cbow_targets(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two targets of the paper's check of Prop 9.

    Parameters
    ----------
    counts : numpy.ndarray, shape (V, V)
        Co-occurrence counts #(w_i, c_j) (:func:`cooccurrence`).

    Returns
    -------
    ratio : numpy.ndarray, shape (V, V)
        p(w_i, c_j)/p(c_j) = p(w_i | c_j) (0 in a column of no count).
    M : numpy.ndarray, shape (V, V)
        log p(w_i | c_j) + log|V|, NaN where the pair never occurs.
    """
    counts = np.asarray(counts, dtype=np.float64)
    col = counts.sum(0, keepdims=True)
    ratio = counts / np.where(col > 0, col, 1.0)
    with np.errstate(divide="ignore"):
        m = np.where(ratio > 0, np.log(ratio), np.nan) + math.log(counts.shape[0])
    return ratio, m


def prop9_correlations(W: npt.ArrayLike, C: npt.ArrayLike,
                       counts: np.ndarray) -> dict[str, float]:
    """The paper's two numbers of its check of Prop 9.

    Spearman corr(w_iᵀc_j, p(w_i,c_j)/p(c_j)) over all pairs and Pearson corr(w_iᵀc_j,
    log(p(w_i,c_j)/p(c_j)) + log|V|) over the pairs where it is defined (the pair occurs).

    Parameters
    ----------
    W : array_like, shape (V, K)
        Center embeddings w_i.
    C : array_like, shape (V, K)
        Context embeddings c_j.
    counts : numpy.ndarray, shape (V, V)
        Co-occurrence counts (:func:`cooccurrence`).

    Returns
    -------
    dict of str to float
        ``"spearman"``, ``"pearson"``, and the numbers of ``"pairs"`` (V²) and of pairs where
        the log target is ``"defined"`` (ints).

    Raises
    ------
    ValueError
        If the shapes disagree, or fewer than 2 pairs occur.
    """
    W, C = np.asarray(W, dtype=np.float64), np.asarray(C, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if W.ndim != 2 or W.shape != C.shape or counts.shape != (len(W), len(W)):
        raise ValueError(f"W and C must be [V, K] and counts [V, V] for one V, got W "
                         f"{W.shape}, C {C.shape}, counts {counts.shape}")
    s = W @ C.T
    ratio, m = cbow_targets(counts)
    defined = correlation(s, m)  # the finite entries of m: pairs that occur
    return {"spearman": correlation(s, ratio)["spearman"], "pearson": defined["pearson"],
            "pairs": int(s.size), "defined": defined["pairs"]}


def _numpy(t) -> np.ndarray:
    return t.detach().double().cpu().numpy()


def cbow_embeddings(model: CategoricalFM) -> tuple[np.ndarray, np.ndarray]:
    """The center and context embeddings of a ``CategoricalFM``: logits ∝ W Σ_j c_{x_j}.

    Parameters
    ----------
    model : CategoricalFM
        A model without intercept (the paper's CBOW without negative sampling).

    Returns
    -------
    W : numpy.ndarray, shape (V, K)
        The center embeddings (ρ), float64.
    C : numpy.ndarray, shape (V, K)
        The context embeddings (α), float64.

    Raises
    ------
    TypeError
        If ``model`` is not a ``CategoricalFM``.
    ValueError
        If it has an intercept.
    """
    from efa.baselines import CategoricalFM

    if not isinstance(model, CategoricalFM):
        raise TypeError(f"expected a CategoricalFM, got {type(model).__name__}")
    if model.intercept is not None:
        raise ValueError("a CategoricalFM with an intercept is not the paper's CBOW")
    return _numpy(model.rho.weight), _numpy(model.alpha.weight)


def attention_embeddings(model: EFA) -> dict[str, np.ndarray]:
    """The embeddings of a one-layer attention model in the form of the paper's Eq. 1.

    The model is a one-layer, one-head bidirectional ``EFA`` over one ``Category`` field
    (``block="bare"``, ``bias=False``, no positional table, softmax attention, no mix, no
    read-out bias): the masked slot's logits are exactly Σ_j γ_j W c_{a_j},
    γ_j = τ_{a_j} / Σ_s τ_{a_s}, with W = δ W^O W^V.

    Parameters
    ----------
    model : EFA
        The model.

    Returns
    -------
    dict of str to numpy.ndarray
        ``"W"`` (center embeddings, [V, p]), ``"C"`` (the token table without [MASK],
        [V, p]), ``"c_mask"`` ([p]), ``"tau"`` ([V + 1], the last for [MASK]; up to a common
        factor, which cancels in γ) and ``"log_tau"`` (the scores c_jᵀ W^KQ c_[MASK] / √d_w).

    Raises
    ------
    TypeError
        If ``model`` is not an ``EFA``.
    ValueError
        Naming every setting that departs from Eq. 1.
    """
    from efa.core.fields import Category
    from efa.core.model import EFA

    if not isinstance(model, EFA):
        raise TypeError(f"expected an efa.EFA, got {type(model).__name__}")
    cfg = model.config
    problems = [
        f"{key}={getattr(cfg, key)!r} (needs {want!r})"
        for key, want in (("num_layers", 1), ("num_heads", 1), ("block", "bare"), ("bias", False),
                          ("max_len", None), ("direction", "bidirectional"), ("mix", "none"),
                          ("attend_self", True), ("out_proj", True))
        if getattr(cfg, key) != want
    ]
    if cfg.attention not in ("softmax", {"kernel": "softmax"}):
        problems.append(f"attention={cfg.attention!r} (needs 'softmax')")
    if len(cfg.fields) != 1 or not isinstance(cfg.fields[0], Category):
        problems.append("fields must be one Category")
    elif cfg.fields[0].bag or cfg.fields[0].distinct:
        problems.append("the Category must be plain (bag=False, distinct=False)")
    if problems:
        raise ValueError("the attention theory (Eq. 1 of the MoE paper) needs " +
                         "; ".join(problems))
    name = cfg.fields[0].name
    # [V + 1, p], the last row is [MASK]
    table = _numpy(cast("TableEncoder", model.encoders[name]).table.weight)
    attn = cast("Block", model.blocks[0]).attn
    wq, wk, wv, wo = (_numpy(m.weight) for m in (attn.q, attn.k, attn.v, attn.o))
    readout = cast("LinearReadout", model.readouts[name])
    delta = _numpy(readout.net.weight)
    if readout.net.bias is not None:
        raise ValueError("the read-out has a bias (readout_bias=True): not the paper's Eq. 1")
    q = wq @ table[-1]
    scores = (table @ wk.T) @ q * attn.kernel.scale
    return {"W": delta @ wo @ wv, "C": table[:-1], "c_mask": table[-1],
            "tau": np.exp(scores - scores.max()),  # τ up to a common factor, which cancels
            "log_tau": scores}


def attention_statistics(tau: npt.ArrayLike, sentences: npt.ArrayLike,
                         num_words: int) -> dict[str, np.ndarray | float]:
    """The quantities of Prop 14 from τ on a corpus of sentences, each position masked in turn.

    Parameters
    ----------
    tau : array_like, shape (V + 1,)
        Positive finite τ of each word, [MASK] last (:func:`attention_embeddings`).
    sentences : array_like of int, shape (N, S)
        N sentences of the same length S ≥ 2, word ids in 0..V−1.
    num_words : int
        The vocabulary size V.

    Returns
    -------
    dict of str to numpy.ndarray or float
        The entries:

        - ``gamma1`` / ``gamma2`` [V, V]: Σ_(i,j) γ and Σ_(i,j) γ² over corpus occurrences
          of center i with context word j, γ = τ_j / Σ_s τ_{a_s} in the masked sentence;
        - ``pbar`` (p̄(w_i, c_j), sums to 1), ``zeta`` [V] (ζ_j, NaN for a word never in
          context), ``scale`` [V] (S ζ_j: c̃_j = scale_j c_j), ``predicted`` [V, V] (Eq. 2,
          what w_iᵀc_j should be), ``N`` [V, V] (log(p̄(w_i,c_j)/p̄(c_j)) + log|V|, NaN where
          p̄ = 0);
        - ``asymmetry``: ‖p̄ − p̄ᵀ‖_F / ‖p̄‖_F (0 for the symmetric CBOW p); ``zeta_cv``: the
          coefficient of variation of ζ over the words that occur as context, weighted by
          their frequency, and ``zeta_range`` = max/min (1 when ζ is constant: then c̃ ∝ c);
          ``uniform_zeta``: 1/S, ζ when every γ is equal.

    Raises
    ------
    ValueError
        If ``tau`` is not V + 1 positive finite numbers, or ``sentences`` is malformed or
        empty.
    """
    tau = np.asarray(tau, dtype=np.float64)
    if tau.shape != (num_words + 1,) or not np.isfinite(tau).all() or (tau <= 0).any():
        raise ValueError(f"tau must hold {num_words + 1} positive finite numbers ([MASK] last)")
    x = _sentences(sentences, num_words)
    n, s_len = x.shape
    if n == 0:
        raise ValueError("sentences is empty: the statistics are averages over a corpus")
    t = tau[x]  # [N, S]
    total = t.sum(1, keepdims=True)
    g1 = np.zeros((num_words, num_words))
    g2 = np.zeros_like(g1)
    for m in range(s_len):
        denom = total[:, 0] - t[:, m] + tau[-1]  # position m holds [MASK]
        for j in range(s_len):
            if j == m:
                continue
            gamma = t[:, j] / denom
            np.add.at(g1, (x[:, m], x[:, j]), gamma)
            np.add.at(g2, (x[:, m], x[:, j]), gamma**2)
    col1, col2 = g1.sum(0), g2.sum(0)
    seen = col1 > 0
    zeta = np.where(seen, col2 / np.where(seen, col1, 1.0), np.nan)
    pbar = g1 / g1.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        predicted = (num_words * g1 - col1[None]) / (s_len * col2[None])
        cond = pbar / pbar.sum(0, keepdims=True)
        big_n = np.where(pbar > 0, np.log(cond), np.nan) + math.log(num_words)
    weights = np.bincount(x.ravel(), minlength=num_words)[seen].astype(float)
    z = zeta[seen]
    mean = np.average(z, weights=weights)
    return {
        "gamma1": g1, "gamma2": g2, "pbar": pbar, "zeta": zeta, "scale": s_len * zeta,
        "predicted": predicted, "N": big_n,
        "asymmetry": float(np.linalg.norm(pbar - pbar.T) / np.linalg.norm(pbar)),
        "zeta_cv": float(np.sqrt(np.average((z - mean) ** 2, weights=weights)) / mean),
        "zeta_range": float(z.max() / z.min()), "uniform_zeta": 1.0 / s_len,
    }


def correlation(x: npt.ArrayLike, y: npt.ArrayLike) -> dict[str, float]:
    """Pearson and Spearman correlations over the entries where both are finite.

    Parameters
    ----------
    x, y : array_like
        The same number of entries (flattened).

    Returns
    -------
    dict of str to float
        ``"pearson"``, ``"spearman"`` and the number of ``"pairs"`` used (an int).

    Raises
    ------
    ValueError
        If the sizes differ or fewer than 2 entries are finite in both.
    """
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same number of entries, got {x.size} and "
                         f"{y.size}")
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        raise ValueError(f"a correlation needs at least 2 entries where both x and y are finite, "
                         f"got {int(ok.sum())}")
    return {"pearson": float(pearsonr(x[ok], y[ok])[0]),
            "spearman": float(spearmanr(x[ok], y[ok])[0]), "pairs": int(ok.sum())}


def offset_residuals(X: npt.ArrayLike, quads: npt.ArrayLike,
                     center: bool = True) -> np.ndarray:
    """How far each quadruple of rows is from an exact analogy x_r + x_s = x_t + x_u.

    The residual is ‖x_r + x_s − x_t − x_u‖ / √(Σ of the four ‖x − μ‖²): 0 when
    x_r + x_s = x_t + x_u exactly and ≈ 1 for unrelated words. μ is the mean row
    (``center``): it cancels in the offset, and without it a common direction shared by all
    embeddings (frequent in trained ones) would make every quadruple look like an analogy.
    For an analogy question "a is to b as c is to d", (r, s, t, u) = (b, c, a, d)
    (:func:`quadruples`).

    Parameters
    ----------
    X : array_like, shape (V, p)
        The embeddings, one row per word.
    quads : array_like of int, shape (Q, 4)
        Rows (r, s, t, u) of each quadruple.
    center : bool, default True
        Subtract the mean row μ first (False: μ = 0).

    Returns
    -------
    numpy.ndarray, shape (Q,)
        The residuals (0 where the denominator is 0).

    Raises
    ------
    ValueError
        If ``quads`` is not of shape (Q, 4).
    IndexError
        If a quadruple names a row outside ``X``.
    """
    X = np.asarray(X, dtype=np.float64)
    q = np.asarray(quads)
    if q.ndim != 2 or q.shape[1] != 4:
        raise ValueError(f"quads must be an integer array [Q, 4], got shape {q.shape}")
    if q.dtype == bool or not np.issubdtype(q.dtype, np.integer):
        raise ValueError(f"quads must hold integer rows, got dtype {q.dtype} (a float would be "
                         "truncated)")
    q = q.astype(np.int64)
    bad = (q < 0) | (q >= len(X))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise IndexError(f"quadruple {i} names row {q[i, j]}, but X has {len(X)} rows")
    if center:
        X = cast(np.ndarray, X - X.mean(0))  # (numpy types the mean as Any)
    r, s, t, u = (X[q[:, k]] for k in range(4))
    num = np.linalg.norm(r + s - t - u, axis=1)
    den = np.sqrt(sum((v**2).sum(1) for v in (r, s, t, u)))
    return num / np.where(den > 0, den, 1.0)


def prop13(W: npt.ArrayLike, C: npt.ArrayLike, quads: npt.ArrayLike,
           holds: npt.ArrayLike | None = None,
           C_tilde: npt.ArrayLike | None = None) -> dict[str, float]:
    """How well analogies that hold in the center embeddings W hold in C (and C̃): Prop 13 / 17.

    Spearman corr of the residuals e_W and e_C (:func:`offset_residuals`) over the
    quadruples, and the mean e_C on the quadruples that hold in W and on the others.

    Parameters
    ----------
    W : array_like, shape (V, p)
        Center embeddings.
    C : array_like, shape (V, p)
        Context embeddings.
    quads : array_like of int, shape (Q, 4)
        Quadruples of rows (:func:`quadruples`).
    holds : array_like of bool, shape (Q,), optional
        The quadruples that hold in W (default: the quarter with the smallest e_W).
    C_tilde : array_like, shape (V, p), optional
        The rescaled context embeddings c̃ of the attention theory, measured as C is.

    Returns
    -------
    dict of str to float
        ``"quads"`` and ``"holding_in_W"`` (counts); the mean residuals ``"e_W_holding"``,
        ``"e_W_others"``, ``"e_C_holding"``, ``"e_C_others"`` (NaN for an empty set);
        ``"spearman_e_W_e_C"`` (NaN for fewer than 3 quadruples); with ``C_tilde``, also
        ``"e_Ct_holding"``, ``"e_Ct_others"`` and ``"spearman_e_W_e_Ct"``.

    Raises
    ------
    ValueError
        If there is no quadruple, ``quads`` is malformed (:func:`offset_residuals`) or
        ``holds`` is not a bool mask with one entry per quadruple.
    """
    e_w, e_c = offset_residuals(W, quads), offset_residuals(C, quads)
    if len(e_w) == 0:
        raise ValueError("prop13 needs at least one quadruple, got none")
    if holds is not None:
        mask = np.asarray(holds)
        if mask.dtype != bool or mask.shape != e_w.shape:
            raise ValueError(f"holds must be a bool mask of shape {e_w.shape} (one per "
                             f"quadruple), got dtype {mask.dtype}, shape {mask.shape}")
    holds = e_w <= np.quantile(e_w, 0.25) if holds is None else mask
    out = {"quads": int(len(e_w)), "holding_in_W": int(holds.sum()),
           "e_W_holding": _mean(e_w[holds]), "e_W_others": _mean(e_w[~holds]),
           "e_C_holding": _mean(e_c[holds]), "e_C_others": _mean(e_c[~holds]),
           "spearman_e_W_e_C": float(spearmanr(e_w, e_c)[0]) if len(e_w) > 2 else float("nan")}
    if C_tilde is not None:
        e_t = offset_residuals(C_tilde, quads)
        out |= {"e_Ct_holding": _mean(e_t[holds]), "e_Ct_others": _mean(e_t[~holds]),
                "spearman_e_W_e_Ct": float(spearmanr(e_w, e_t)[0]) if len(e_w) > 2
                else float("nan")}
    return out


def _mean(v: np.ndarray) -> float:
    return float(v.mean()) if len(v) else float("nan")


def quadruples(questions: pd.DataFrame, vocab: Sequence[str]) -> np.ndarray:
    """The rows (b, c, a, d) of each analogy question: the Prop 13 quadruple w_b + w_c ≈ w_a + w_d.

    Parameters
    ----------
    questions : pandas.DataFrame
        Columns ``a, b, c, d`` (:func:`efa.questions.load_questions`).
    vocab : sequence of str
        The words, one per row (exact match, no case folding; a repeated word maps to its last
        row).

    Returns
    -------
    numpy.ndarray of int64, shape (Q, 4)
        One quadruple per question.

    Raises
    ------
    KeyError
        If a question word is not in ``vocab``.
    """
    index = {w: k for k, w in enumerate(vocab)}
    missing = sorted({w for col in "abcd" for w in questions[col] if w not in index})
    if missing:
        raise KeyError(f"{len(missing)} question word(s) are not in the vocabulary, e.g. "
                       f"{missing[:5]}; filter with efa.analogy.restrict(questions, vocab)")
    return np.array([[index[q.b], index[q.c], index[q.a], index[q.d]]
                     for q in questions.itertuples()], dtype=np.int64).reshape(-1, 4)
