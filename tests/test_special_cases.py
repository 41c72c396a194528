"""Props 1–3 of the EFA paper: factorisation models are EFA with particular weights; and the
multinomial logit on context counts is EFA with a bag-of-context term.

Each test builds the FM log-likelihood directly from its formula (float64) and an EFA model
whose weights are set as in the proofs (Apps. E–G), and checks they agree exactly.
"""

import pytest
import torch
from torch import nn

from efa import EFA, Attribute, CategoricalFM, Category, EFAConfig, Sequences, Value, ValueFM
from efa.baselines import ContextLogit
from efa.core.families import Categorical, Gaussian, Poisson

K, D, I, N = 4, 6, 5, 8


def _bare(fields, **kw):
    cfg = dict(num_layers=1, num_heads=1, block="bare", bias=False, out_proj=False)
    cfg.update(kw)
    return EFA(EFAConfig(fields, **cfg)).double()


def test_prop1_cbow_is_efa_with_uniform_attention():
    g = torch.Generator().manual_seed(1)
    x = torch.stack([torch.randperm(D, generator=g)[:I] for _ in range(N)])
    data = Sequences({"x": x}, torch.full((N,), I))
    # FM: x_i | x_-i ~ Cat(softmax(rho^T sum_{j != i} alpha_{x_j} / (I - 1)))
    fm_model = CategoricalFM(Category("x", D), dim=K, pooling="paper").double()
    alpha, rho = fm_model.alpha.weight.detach(), fm_model.rho.weight.detach()
    ctx = (alpha[x].sum(1, keepdim=True) - alpha[x]) / (I - 1)
    fm = torch.distributions.Categorical(logits=ctx @ rho.T).log_prob(x)
    torch.testing.assert_close(fm_model.log_likelihood_sums(data)["x"][0], fm.sum())

    model = _bare([Category("x", D, dim=K)])
    with torch.no_grad():
        model.encoders["x"].table.weight.copy_(torch.cat([alpha, torch.zeros(1, K)]))  # β, β_MASK=0
        attn = model.blocks[0].attn
        attn.q.weight.zero_()
        attn.k.weight.zero_()  # uniform attention 1/I over all I positions
        attn.v.weight.copy_(torch.eye(K))
        model.readouts["x"].net.weight.copy_(rho * I / (I - 1))  # δ = I/(I−1) ρ
    eta = model.natural_params(data)["x"]
    efa = Categorical(D).log_prob(x, eta)
    torch.testing.assert_close(efa, fm, atol=1e-10, rtol=0)


def test_prop2_spatial_gaussian_fm_is_linear_efa():
    g = torch.Generator().manual_seed(2)
    tau = torch.randn(N, I, 2, generator=g, dtype=torch.float64)
    y = torch.randn(N, I, generator=g, dtype=torch.float64)
    model = _bare(
        [
            Attribute("tau", size=2, dim=K, hidden=7),
            Value("y", Gaussian(1.0), dim=1, encoder="identity", readout="linear"),
        ],
        attention="linear",
        scale="linear",
    )
    h = model.encoders["tau"].net  # g = h, any network
    # FM: y_i | y_-i ~ N(h(tau_i)^T sum_{j != i} h(tau_j) y_j, 1)
    with torch.no_grad():
        ht = h(tau)
        mean = (ht * ((ht * y[..., None]).sum(1, keepdim=True) - ht * y[..., None])).sum(-1)
    fm = torch.distributions.Normal(mean, 1.0).log_prob(y)
    with torch.no_grad():
        attn = model.blocks[0].attn
        sel = torch.diag(torch.tensor([1.0] * K + [0.0]))
        attn.q.weight.copy_(sel)
        attn.k.weight.copy_(sel)
        attn.v.weight.copy_(torch.diag(torch.tensor([0.0] * K + [1.0])))
        ro = model.readouts["y"].net
        ro.weight.zero_()
        ro.weight[0, K] = K + 1  # λ₂(z) = (K+1) z_{K+1}
        ro.bias.zero_()
    data = Sequences({"tau": tau, "y": y}, torch.full((N,), I))
    eta = model.natural_params(data)["y"]
    torch.testing.assert_close(Gaussian(1.0).log_prob(y, eta), fm, atol=1e-10, rtol=0)


def test_prop3_poisson_rating_fm_is_linear_efa():
    """The printed matrices of the App. G proof have a typo (a second W^V that must be W^K,
    with its block in the wrong place); the identity holds with the key map below."""
    g = torch.Generator().manual_seed(3)
    x = torch.stack([torch.randperm(D, generator=g)[:I] for _ in range(N)])
    y = torch.randint(1, 4, (N, I), generator=g)
    fam = Poisson(shift=1)
    fm_model = ValueFM(Category("x", D), Value("y", fam), dim=K, pooling="paper").double()
    alpha, rho = fm_model.alpha.weight.detach(), fm_model.rho.weight.detach()
    # FM: y_i − 1 | y_-i ~ Poisson(exp(rho_{x_i}^T sum_{j != i} alpha_{x_j} y_j / (I − 1)))
    yf = y.double()[..., None]
    s = (alpha[x] * yf).sum(1, keepdim=True) - alpha[x] * yf
    rate = torch.exp((rho[x] * s).sum(-1) / (I - 1))
    fm = torch.distributions.Poisson(rate).log_prob(y.double() - 1)
    data = Sequences({"x": x, "y": y}, torch.full((N,), I))
    torch.testing.assert_close(fm_model.log_likelihood_sums(data)["y"][0], fm.sum())

    model = _bare(
        [
            Category("x", D, dim=2 * K, target=False),
            Value("y", fam, dim=1, encoder="identity", readout="linear"),
        ],
        attention="linear",
        scale="linear",
    )
    d = 2 * K + 1
    with torch.no_grad():
        table = torch.cat([rho, alpha / (I - 1)], dim=1)  # [β̄; δ̄] = [ρ; α/(I−1)]
        model.encoders["x"].table.weight.copy_(torch.cat([table, torch.zeros(1, 2 * K)]))
        attn = model.blocks[0].attn
        wq = torch.zeros(d, d)
        wq[:K, :K] = torch.eye(K)  # query: ρ_{x_i}
        wk = torch.zeros(d, d)
        wk[:K, K : 2 * K] = torch.eye(K)  # key: α_{x_j}/(I−1), moved into the first block
        wv = torch.zeros(d, d)
        wv[-1, -1] = 1.0  # value: y_j
        attn.q.weight.copy_(wq)
        attn.k.weight.copy_(wk)
        attn.v.weight.copy_(wv)
        ro = model.readouts["y"].net
        ro.weight.zero_()
        ro.weight[0, -1] = d  # λ₂(z) = (2K+1) z_{2K+1}
        ro.bias.zero_()
    eta = model.natural_params(data)["y"]
    torch.testing.assert_close(fam.log_prob(y, eta), fm, atol=1e-10, rtol=0)


def test_fm_baselines_match_their_formulas():
    from efa import CategoricalFM, ValueFM

    g = torch.Generator().manual_seed(4)
    x = torch.stack([torch.randperm(D, generator=g)[:I] for _ in range(N)])
    y = torch.randn(N, I, generator=g, dtype=torch.float64)
    data = Sequences({"x": x, "y": y}, torch.full((N,), I))
    fm = ValueFM(Category("x", D), Value("y", Gaussian(1.0)), dim=K, direction="unidirectional")
    fm = fm.double()
    mu = fm.natural_params(data)["y"][..., 0]
    a, r = fm.alpha.weight, fm.rho.weight
    for i in range(I):  # reference code: mean over the previous items, 0 at the first position
        ctx = (a[x[:, :i]] * y[:, :i, None]).sum(1) / max(i, 1)
        torch.testing.assert_close(mu[:, i], (r[x[:, i]] * ctx).sum(-1))

    cfm = CategoricalFM(Category("x", D), dim=K, direction="bidirectional").double()
    logits = cfm.natural_params(data)["x"]
    e = cfm.alpha.weight[x]
    torch.testing.assert_close(logits, (e.sum(1, keepdim=True) - e) @ cfm.rho.weight.T)
    assert isinstance(cfm.rho, nn.Linear)


@pytest.mark.parametrize("direction", ["unidirectional", "bidirectional"])
@pytest.mark.parametrize("distinct", [False, True])
def test_bag_of_context_logit_is_efa_with_a_bag(direction, distinct):
    """Containment (docs/peers.md): the multinomial logit on context counts,
    x_i | c(i) ~ Cat(softmax(W n_c(i) + b + b_pos(i))), is EFA with Category(bag=True), any
    d_model ≥ K: table U = Wᵀ, [MASK] row = b, positional row i = b_pos(i), read-out δ = the
    identity on the first K coordinates and the attention's output map zero."""
    g = torch.Generator().manual_seed(5)
    n_items, width, length = 6, 8, 7
    x = torch.stack([torch.randperm(n_items, generator=g)[:length - 1] for _ in range(N)])
    lengths = torch.randint(2, length, (N,), generator=g)
    data = Sequences({"x": x}, lengths)
    item = Category("x", n_items, dim=width, distinct=distinct)
    logit = ContextLogit(item, direction, length).double()
    with torch.no_grad():
        for p in logit.parameters():
            p.normal_(generator=g)
    expected = logit.position_log_likelihoods(data)["x"]

    model = EFA(EFAConfig([Category("x", n_items, dim=width, distinct=distinct, bag=True)],
                          max_len=length, num_layers=1, num_heads=2, block="residual",
                          direction=direction)).double()
    with torch.no_grad():
        w = model.encoders["x"].table.weight
        w[-1] = 0
        w[-1, :n_items] = logit.design.intercept  # the masked token carries b
        model.pos.weight.zero_()
        model.pos.weight[:, :n_items] = logit.design.pos.weight  # position i carries b_pos(i)
        attn = model.blocks[0].attn
        attn.o.weight.zero_()
        attn.o.bias.zero_()  # the attention adds nothing: the residual stream is the token
        model.readouts["x"].net.weight.copy_(torch.eye(n_items, width))
        model.bags["x"].copy_(logit.weight.weight.T / 10)  # U = 10·V (bag_scale) = Wᵀ
    got = model.position_log_likelihoods(data)["x"]
    m = data.predicted("x")
    assert torch.isfinite(got[m]).all() and torch.isnan(got[~m]).all()
    torch.testing.assert_close(got[m], expected[m], atol=1e-10, rtol=0)
