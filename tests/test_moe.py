"""Lemma 1 / Theorem 2 of "Bidirectional attention as a mixture of continuous word experts",
checked as identities in float64 against the attention model's exact masked logits."""

import math

import pytest
import torch

from efa import Category, Sequences
from efa.baselines.cbow import CBOW
from efa.moe import (
    CBOWMoE,
    appendix_b,
    copy_tokens,
    mixture,
    moe_logits,
    reparameterise,
    two_layer_terms,
)

V, S, P = 7, 6, 8
TOL = dict(atol=1e-10, rtol=0)


def sentences(n=5, seed=0, ragged=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (n, S), generator=g)
    lengths = torch.randint(2, S + 1, (n,), generator=g) if ragged else torch.full((n,), S)
    lengths[0] = S
    return Sequences({"token": x}, lengths)


def model(heads=1, head_dim=3, layers=1, seed=0):
    torch.manual_seed(seed)
    m = appendix_b(V, S, P, num_heads=heads, head_dim=head_dim).double()
    if layers != 1:
        from efa.core.config import EFAConfig
        from efa.core.model import EFA

        cfg = EFAConfig.from_dict({**m.config.to_dict(), "num_layers": layers})
        m = EFA(cfg).double()
    with torch.no_grad():  # every parameter random and O(1), W' and W'' included
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return m


def masked_logits(m, data):
    valid = data.valid()
    return m.natural_params(data)["token"], valid


@pytest.mark.parametrize("heads", [1, 2, 3])
def test_attention_logits_equal_the_cbow_moe(heads):
    m, data = model(heads=heads), sentences()
    eta, valid = masked_logits(m, data)
    pi, f = mixture(m, data)
    torch.testing.assert_close(moe_logits(pi, f)[valid], eta[valid], **TOL)
    tied = CBOWMoE.tied(m).natural_params(data)["token"]
    torch.testing.assert_close(tied[valid], eta[valid], **TOL)
    # The gates are distributions over the real positions, the [MASK] slot j = m included.
    torch.testing.assert_close(pi.sum(-1)[valid], torch.ones_like(pi.sum(-1)[valid]), **TOL)
    diag = pi.diagonal(dim1=1, dim2=3)  # [B, H, M]
    assert (diag.permute(0, 2, 1)[valid] > 1e-6).all()


def test_the_mask_expert_is_needed():
    """Dropping the j = m expert (renormalising the other gates) breaks the identity."""
    m, data = model(), sentences(ragged=False)
    eta, _ = masked_logits(m, data)
    pi, f = mixture(m, data)
    off = pi * (1 - torch.eye(S))[None, :, None, :]
    wrong = moe_logits(off / off.sum(-1, keepdim=True), f)
    assert (wrong - eta).abs().max() > 1e-2


def test_lemma_1_in_its_own_notation():
    """θ(j, m), χ(j, m, k) with W^KQ, W^LOV, g, D, C, P computed by loops: the per-(m, b) MLM
    loss of Lemma 1 equals the attention model's cross-entropy."""
    m, data = model(), sentences(n=3)
    r = reparameterise(m)
    eta, valid = masked_logits(m, data)
    x = data.fields["token"]
    for b in range(len(data)):
        n = int(data.lengths[b])
        for mm in range(n):
            q = r.C[V] + r.P[mm]
            rows = [(r.C[V] if j == mm else r.C[x[b, j]]) + r.P[j] for j in range(n)]
            theta = torch.stack([torch.exp(rows[j] @ r.W_KQ[0] @ q * r.scale) for j in range(n)])
            chi = torch.stack([r.W_LOV[0] @ rows[j] + r.g + r.D[:, mm] for j in range(n)])
            F = (theta[:, None] * chi).sum(0) / theta.sum()
            for tok in range(V):
                lemma = -F[tok] + torch.logsumexp(F, 0)
                ce = -torch.log_softmax(eta[b, mm], 0)[tok]
                torch.testing.assert_close(lemma, ce, **TOL)
    assert r.scale == 1 / math.sqrt(3)


def test_two_heads_are_two_moes_with_half_g_and_d():
    m, data = model(heads=2), sentences()
    r = reparameterise(m)
    eta, valid = masked_logits(m, data)
    x = data.fields["token"]
    content = r.C[x] + r.P[:S]
    query = (r.C[V] + r.P[:S]).expand_as(content)
    tokens = copy_tokens(content, query)
    total = 0
    for h in range(2):
        s = torch.einsum("bmjp,pq,bmq->bmj", tokens, r.W_KQ[h], query) * r.scale
        pi = torch.softmax(s.masked_fill(~data.valid()[:, None, :], -torch.inf), -1)
        f = tokens @ r.W_LOV[h].T + (r.g[:, None] / 2 + r.D / 2).T[None, :, None, :]
        total = total + torch.einsum("bmj,bmjv->bmv", pi, f)
    torch.testing.assert_close(total[valid], eta[valid], **TOL)


def test_free_moe_contains_the_attention_model():
    m, data = model(heads=2), sentences()
    r = reparameterise(m)
    free = CBOWMoE(m.fields[0], S, dim=P, num_heads=2, head_dim=3).double()
    with torch.no_grad():
        for name, t in (("C", r.C), ("P", r.P), ("W_KQ", r.W_KQ), ("W_LOV", r.W_LOV),
                        ("g", r.g), ("D", r.D)):
            getattr(free, name).copy_(t)
    eta, valid = masked_logits(m, data)
    torch.testing.assert_close(free.natural_params(data)["token"][valid], eta[valid], **TOL)
    # Free parameters are a superset: full-rank W^KQ (rank ≤ d_w = 3 when tied).
    assert torch.linalg.matrix_rank(r.W_KQ[0]) <= 3
    fresh = CBOWMoE(m.fields[0], S, dim=P, num_heads=2, head_dim=3).double()
    assert torch.linalg.matrix_rank(fresh.W_KQ[0]) == P


def test_tied_moe_trains_the_attention_model():
    m, data = model(), sentences()
    tied = CBOWMoE.tied(m)
    tied.loss(data).backward()
    assert m.blocks[0].attn.q.weight.grad.abs().sum() > 0


def test_two_layers_are_a_sum_of_moes_over_product_gates():
    m, data = model(heads=2, layers=2), sentences()
    eta, valid = masked_logits(m, data)
    t = two_layer_terms(m, data)
    total = t["self"] + t["layer1"] + t["layer2"] + t["path"]
    torch.testing.assert_close(total[valid], eta[valid], **TOL)
    # The path gates A² A¹ are distributions over the input tokens.
    path = torch.einsum("bmhi,bmgij->bmhgj", t["A2"], t["A1"])
    torch.testing.assert_close(path.sum(-1)[valid], torch.ones_like(path.sum(-1)[valid]), **TOL)


def test_two_layers_are_not_one_moe_on_the_unmasked_states():
    """The tempting reading "layer 2 is Theorem 2 on the layer-1 states of the sentence" is
    false: in copy m every layer-1 state sees the [MASK] at m. Feeding layer 2 the states of
    the unmasked sentence (what the one-pass two-stream computation would do) misses."""
    m, data = model(layers=2), sentences(ragged=False)
    eta, _ = masked_logits(m, data)
    content = m.encode(data, m.hidden_for(data, None))
    query = m.encode(data, m.hidden_for(data, "token"))
    allowed = m.allowed(data)
    states, _ = m.blocks[0](content, allowed)  # layer 1 on the unmasked sentence
    q1, _ = m.blocks[0](query, allowed, memory=content, own=True)  # the masked slots, exact
    out, _ = m.blocks[1](q1, allowed, memory=states, own=True)
    wrong = m.readouts["token"](out)
    assert (wrong - eta).abs().max() > 1e-2


def test_cbow_window_and_whole_sentence():
    from efa.baselines import CategoricalFM

    data = sentences()
    torch.manual_seed(0)
    cbow = CBOW(Category("token", V), dim=4, window=2).double()
    eta = cbow.natural_params(data)["token"]
    x, valid = data.fields["token"], data.valid()
    for b in range(len(data)):
        n = int(data.lengths[b])
        for mm in range(n):
            ctx = [j for j in range(n) if 1 <= abs(j - mm) <= 2]
            h = cbow.context.weight[x[b, ctx]].mean(0)
            torch.testing.assert_close(eta[b, mm], cbow.center(h), **TOL)
    # A window as long as the sentence is the whole-sentence CBOW (CategoricalFM, mean pooling).
    whole = CBOW(cbow.fields[0], dim=4, window=S).double()
    fm = CategoricalFM(cbow.fields[0], dim=4, pooling="mean").double()
    with torch.no_grad():
        whole.context.weight.copy_(fm.alpha.weight)
        whole.center.weight.copy_(fm.rho.weight)
    a, b_ = whole.natural_params(data)["token"], fm.natural_params(data)["token"]
    torch.testing.assert_close(a[valid], b_[valid], **TOL)
    with pytest.raises(ValueError, match="window"):
        CBOW(cbow.fields[0], window=0)
