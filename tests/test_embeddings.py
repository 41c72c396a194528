"""The quantities of the linear-analogy theory (MoE paper, Props 9, 13, 14) against naive
computations, and the attention model's logits against the paper's Eq. 1 in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from efa import EFA, Category, EFAConfig, Sequences
from efa.baselines import CategoricalFM
from efa.embeddings import (
    attention_embeddings,
    attention_statistics,
    cbow_embeddings,
    cbow_targets,
    cooccurrence,
    offset_residuals,
    prop9_correlations,
    prop13,
)

V = 6


def _corpus(n=40, s=4, seed=0):
    return np.random.default_rng(seed).integers(0, V, (n, s))


def test_cooccurrence_is_the_count_of_center_context_pairs():
    x = _corpus()
    naive = np.zeros((V, V))
    for sent in x:
        for m, i in enumerate(sent):
            for j, w in enumerate(sent):
                if j != m:
                    naive[i, w] += 1
    c = cooccurrence(x, V)
    np.testing.assert_array_equal(c, naive)
    np.testing.assert_array_equal(c, c.T)
    assert c.sum() == x.shape[0] * 4 * 3
    with pytest.raises(ValueError, match="word ids must be in 0..5"):
        cooccurrence(x + 1, V)


def test_cbow_targets_and_prop9_correlations():
    counts = np.array([[2.0, 0.0, 1.0], [1.0, 3.0, 0.0], [1.0, 1.0, 4.0]])
    ratio, m = cbow_targets(counts)
    np.testing.assert_allclose(ratio.sum(0), 1)
    assert ratio[0, 0] == pytest.approx(2 / 4) and np.isnan(m[0, 1])
    assert m[2, 2] == pytest.approx(math.log(4 / 5) + math.log(3))
    # Embeddings that factorise M exactly where it is defined: Pearson 1.
    target = np.nan_to_num(m, nan=-5.0)
    u, s, vt = np.linalg.svd(target)
    r = prop9_correlations(u * s, vt.T, counts)
    assert r["pearson"] == pytest.approx(1.0) and r["defined"] == 7 and r["pairs"] == 9
    assert r["spearman"] > 0.8


def test_cbow_embeddings_are_the_fm_tables():
    fm = CategoricalFM(Category("word", V), dim=5, pooling="sum")
    W, C = cbow_embeddings(fm)
    x = torch.as_tensor(_corpus(3, 4))
    logits = fm.natural_params(Sequences({"word": x}, torch.full((3,), 4)))["word"]
    ctx = C[x.numpy()].sum(1, keepdims=True) - C[x.numpy()]  # Σ_{j≠i} c_{x_j}
    np.testing.assert_allclose(logits.detach().numpy(), ctx @ W.T, atol=1e-5)


def _theory_efa(dim=5, head_dim=3):
    torch.manual_seed(0)
    cfg = EFAConfig([Category("word", V, dim=dim)], num_layers=1, num_heads=1, head_dim=head_dim,
                    block="bare", bias=False, max_len=None, direction="bidirectional")
    model = EFA(cfg).double()
    with torch.no_grad():  # larger random weights so that τ varies a lot
        for p in model.parameters():
            p.mul_(3)
    return model


def test_attention_logits_are_the_papers_eq1():
    model = _theory_efa()
    e = attention_embeddings(model)
    x = _corpus(7, 5, seed=3)
    data = Sequences({"word": torch.as_tensor(x)}, torch.full((7,), 5))
    logits = model.natural_params(data)["word"].detach().numpy()  # [N, S, V]
    tau = e["tau"]
    for n in range(7):
        for m in range(5):
            t = tau[x[n]].copy()
            t[m] = tau[-1]  # position m holds [MASK]
            gamma = t / t.sum()
            c = e["C"][x[n]].copy()
            c[m] = e["c_mask"]
            np.testing.assert_allclose(logits[n, m], e["W"] @ (gamma @ c), rtol=1e-10,
                                       atol=1e-10)
    w = model.attention_weights(data, "word")[0, :, 0]  # [N, I (query), I (key)]
    t = tau[x[0]]
    gamma = t / (t.sum() - t[0] + tau[-1])  # what the masked position 0 pays to j ≠ 0
    np.testing.assert_allclose(w[0, 0, 1:].numpy(), gamma[1:], rtol=1e-10)
    assert tau.shape == (V + 1,) and tau.std() > 0.1 * tau.mean()


def test_attention_embeddings_refuse_other_architectures():
    cfg = EFAConfig([Category("word", V, dim=4)], num_layers=1, num_heads=1, max_len=5)
    with pytest.raises(ValueError, match="max_len=5.*block='residual'|block='residual'"):
        attention_embeddings(EFA(cfg))
    with pytest.raises(TypeError, match="expected an efa.EFA"):
        attention_embeddings(CategoricalFM(Category("word", V)))


def test_attention_statistics_against_a_naive_loop():
    x = _corpus(30, 4, seed=1)
    tau = np.random.default_rng(2).uniform(0.2, 3.0, V + 1)
    st = attention_statistics(tau, x, V)
    g1, g2 = np.zeros((V, V)), np.zeros((V, V))
    for sent in x:
        for m in range(4):
            t = np.array([tau[-1] if k == m else tau[w] for k, w in enumerate(sent)])
            for j in range(4):
                if j != m:
                    g = t[j] / t.sum()
                    g1[sent[m], sent[j]] += g
                    g2[sent[m], sent[j]] += g * g
    np.testing.assert_allclose(st["gamma1"], g1)
    np.testing.assert_allclose(st["gamma2"], g2)
    zeta = g2.sum(0) / g1.sum(0)
    np.testing.assert_allclose(st["zeta"], zeta)
    np.testing.assert_allclose(st["scale"], 4 * zeta)
    np.testing.assert_allclose(st["predicted"], (V * g1 - g1.sum(0)) / (4 * g2.sum(0)))
    pbar = g1 / g1.sum()
    np.testing.assert_allclose(st["N"], np.log(pbar / pbar.sum(0)) + math.log(V))
    assert st["asymmetry"] > 0.01 and st["zeta_range"] > 1.01


def test_constant_tau_reduces_to_cbow():
    """τ constant: γ = 1/S, ζ = 1/S, p̄ = p (symmetric), and Eq. 2 is Prop 9's stationary point
    |V| p(w_i|c_j) − 1."""
    x = _corpus(50, 5, seed=4)
    st = attention_statistics(np.full(V + 1, 2.0), x, V)
    counts = cooccurrence(x, V)
    ratio, m = cbow_targets(counts)
    np.testing.assert_allclose(st["zeta"], 1 / 5)
    assert st["asymmetry"] == pytest.approx(0, abs=1e-12) and st["zeta_cv"] < 1e-12
    np.testing.assert_allclose(st["pbar"], counts / counts.sum())
    np.testing.assert_allclose(st["predicted"], V * ratio - 1, atol=1e-12)
    np.testing.assert_allclose(st["N"], m)


def test_offset_residuals_and_prop13():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8, 6))
    X[3] = X[0] + X[1] - X[2]  # x_0 + x_1 = x_2 + x_3 exactly
    e = offset_residuals(X, [[0, 1, 2, 3], [4, 5, 6, 7]], center=False)
    assert e[0] == pytest.approx(0, abs=1e-12)
    expect = np.linalg.norm(X[4] + X[5] - X[6] - X[7]) / np.sqrt((X[4:] ** 2).sum())
    assert e[1] == pytest.approx(expect)
    # A direction shared by every word cancels in the offset; centring removes it from the
    # scale too, so the residuals do not change.
    shifted = offset_residuals(X + 50.0, [[0, 1, 2, 3], [4, 5, 6, 7]])
    np.testing.assert_allclose(shifted, offset_residuals(X, [[0, 1, 2, 3], [4, 5, 6, 7]]),
                               atol=1e-12)
    assert offset_residuals(X + 50.0, [[4, 5, 6, 7]], center=False)[0] < 0.1 * e[1]
    quads = np.array([[0, 1, 2, 3], [4, 5, 6, 7], [1, 2, 5, 6], [0, 4, 5, 7]])
    r = prop13(X, 2 * X, quads, holds=np.array([True, False, False, False]), C_tilde=X)
    assert r["e_W_holding"] == pytest.approx(0, abs=1e-12) and r["e_C_holding"] < 1e-12
    assert r["spearman_e_W_e_C"] == pytest.approx(1) and r["holding_in_W"] == 1
    with pytest.raises(ValueError, match=r"\[Q, 4\]"):
        offset_residuals(X, [0, 1, 2, 3])
