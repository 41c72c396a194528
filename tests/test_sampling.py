"""Sampling (efa.sample): ancestral draws of a unidirectional model follow its joint exactly;
Gibbs sweeps of a bidirectional model whose conditionals are those of a known joint reach
that joint, from any start; a context's observed values are kept and its gaps filled."""

import itertools

import pytest
import torch
from scipy import stats

import efa
from efa.core.conditional import ConditionalModel
from efa.core.families import Bernoulli
from efa.generators import attention_teacher


def _joint(teacher):
    """Every sequence of 3 positions of (item in 0..2, flag in 0..1) and its probability."""
    combos = list(itertools.product(range(3), range(2), repeat=3))
    x = torch.tensor([c[0::2] for c in combos])
    y = torch.tensor([c[1::2] for c in combos])
    table = efa.Sequences({"item": x, "flag": y}, torch.full((len(combos),), 3))
    lls = efa.log_likelihoods(teacher, table)
    return x, y, (lls["item"] + lls["flag"]).sum(1).exp()


def _agree(draws: torch.Tensor, probs: torch.Tensor, n: int) -> float:
    """χ² p-value of draws (codes) against exact cell probabilities (cells with E ≥ 5)."""
    counts = torch.bincount(draws, minlength=len(probs)).double()
    keep = probs * n >= 5
    obs, exp = counts[keep], probs[keep] * n
    if not keep.all():  # the rare cells pooled into one
        obs = torch.cat([obs, counts[~keep].sum().reshape(1)])
        exp = torch.cat([exp, (probs[~keep] * n).sum().reshape(1)])
    return float(stats.chisquare(obs.numpy(), exp.numpy() * obs.sum().item() / exp.sum().item()
                                 ).pvalue)


@pytest.fixture(scope="module")
def teacher():
    return attention_teacher([efa.Category("item", 3), efa.Value("flag", Bernoulli())],
                             max_len=3, num_layers=2, seed=4)


def test_ancestral_draws_follow_the_models_joint(teacher):
    """20,000 draws against the enumerated joint: each position's (item, flag) marginal and
    each pair of positions' items, χ² at α = 10⁻³ per table (stated test)."""
    x, y, p = _joint(teacher)
    n = 20_000
    draws = efa.sample(teacher, n, seed=7)
    dx, dy = draws.fields["item"], draws.fields["flag"]
    for i in range(3):
        cell = x[:, i] * 2 + y[:, i]
        probs = torch.zeros(6, dtype=torch.float64).index_add_(0, cell, p)
        assert _agree(dx[:, i] * 2 + dy[:, i], probs, n) > 1e-3, i
    for i, j in ((0, 1), (1, 2), (0, 2)):
        probs = torch.zeros(9, dtype=torch.float64).index_add_(0, x[:, i] * 3 + x[:, j], p)
        assert _agree(dx[:, i] * 3 + dx[:, j], probs, n) > 1e-3, (i, j)
    again = efa.sample(teacher, n, seed=7)
    assert torch.equal(again.fields["item"], dx)  # seeded


class ExactConditionals(ConditionalModel):
    """A bidirectional model whose conditionals are exactly those of the teacher's joint:
    p(v at i | rest) ∝ joint(sequence with v at i), by enumeration."""

    def __init__(self, teacher):
        super().__init__()
        self.fields = [efa.Category("item", 3), efa.Value("flag", Bernoulli())]
        self.max_len, self.direction = 3, "bidirectional"
        self.x, self.y, p = _joint(teacher)
        self.logp = p.log()
        self.unused = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def natural_params_at(self, data, at):
        (name, m), = at.items()
        b, i = m.nonzero(as_tuple=True)
        xs, ys = data.fields["item"][b], data.fields["flag"][b]
        size = 3 if name == "item" else 2
        out = []
        for v in range(size):
            xv, yv = xs.clone(), ys.clone()
            (xv if name == "item" else yv)[torch.arange(len(b)), i] = v
            code = ((xv * 2 + yv) * torch.tensor([36, 6, 1])).sum(1)
            out.append(self.logp[code])
        logits = torch.stack(out, -1)
        return {name: logits if name == "item" else (logits[:, 1:] - logits[:, :1])}


def test_gibbs_reaches_the_joint_whose_conditionals_it_is_given(teacher):
    """Two chains from opposite starts (all item 0 / all item 2 in the context's gaps) end
    at the same frequencies: those of the joint (χ² at α = 10⁻³)."""
    model = ExactConditionals(teacher)
    # (the code of a sequence in _joint's order: base-6 digits (item · 2 + flag))
    assert torch.equal(((model.x * 2 + model.y) * torch.tensor([36, 6, 1])).sum(1),
                       torch.arange(216))
    x, y, p = _joint(teacher)
    n = 6000
    for start in (0, 2):
        context = efa.Sequences({"item": torch.full((n, 3), start),
                                 "flag": torch.zeros(n, 3, dtype=torch.long)},
                                torch.full((n,), 3),
                                {"item": torch.zeros(n, 3, dtype=torch.bool),
                                 "flag": torch.zeros(n, 3, dtype=torch.bool)})
        draws = efa.sample(model, context=context, sweeps=10, seed=start)
        dx = draws.fields["item"]
        for i in range(3):
            probs = torch.zeros(3, dtype=torch.float64).index_add_(0, x[:, i], p)
            assert _agree(dx[:, i], probs, n) > 1e-3, (start, i)


def test_a_context_is_kept_continued_and_filled(teacher):
    data = efa.generators.sample(teacher, 50, seed=1)
    short = data[torch.arange(50)]
    short = efa.Sequences({k: v[:, :2] for k, v in data.fields.items()}, torch.full((50,), 2))
    longer = efa.sample(teacher, context=short, length=3, seed=2)
    assert longer.max_len == 3
    assert all(torch.equal(longer.fields[k][:, :2], short.fields[k]) for k in short.fields)
    gaps = {"item": torch.rand(50, 3, generator=torch.Generator().manual_seed(0)) > 0.5}
    holes = efa.Sequences(data.fields, data.lengths, gaps)
    filled = efa.sample(teacher, context=holes, seed=3)
    kept = gaps["item"]
    assert torch.equal(filled.fields["item"][kept], data.fields["item"][kept])
    assert torch.equal(filled.fields["flag"], data.fields["flag"])  # fully observed: kept


def test_a_causal_gap_before_observed_values_is_drawn_from_its_exact_conditional(teacher):
    """Item 0 missing, everything after it observed: ancestral sampling alone draws it from
    p(x_0) and ignores the later values (sweeps=0 fails the test); the Metropolis sweeps reach
    p(x_0 | rest) read off the enumerated joint."""
    x, y, p = _joint(teacher)
    rest = (x[:, 1] == 1) & (x[:, 2] == 2) & (y[:, 0] == 1) & (y[:, 1] == 0) & (y[:, 2] == 1)
    exact = torch.zeros(3, dtype=torch.float64).index_add_(0, x[rest, 0], p[rest])
    n = 2000
    context = efa.Sequences({"item": torch.tensor([[0, 1, 2]] * n),
                             "flag": torch.tensor([[1, 0, 1]] * n)}, torch.full((n,), 3),
                            {"item": torch.tensor([[False, True, True]] * n)})
    p_values = {}
    for sweeps in (0, 5):
        draws = efa.sample(teacher, context=context, sweeps=sweeps, seed=1)
        assert torch.equal(draws.fields["item"][:, 1:], context.fields["item"][:, 1:])
        p_values[sweeps] = _agree(draws.fields["item"][:, 0], exact / exact.sum(), n)
    assert p_values[0] < 1e-6 and p_values[5] > 1e-3, p_values
    assert torch.equal(context.fields["item"][:, 0], torch.zeros(n, dtype=torch.long))  # kept


def test_a_context_keeps_each_length_and_distinct_items_stay_distinct():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4, distinct=True)], max_len=5,
                                  direction="unidirectional"))
    ragged = efa.sample(model, context=efa.Sequences.from_lists({"item": [[0], [1, 2, 3]]}),
                        seed=0)
    assert ragged.lengths.tolist() == [1, 3]  # nothing drawn past a sequence's end
    holes = efa.Sequences.from_lists({"item": [[0, 1, 2, 3]] * 200},
                                     observed={"item": [[False, True, False, True]] * 200})
    filled = efa.sample(model, context=holes, seed=0)
    efa.evaluate(model, filled)  # refuses a repeated item of a distinct field
    with pytest.raises(ValueError, match="distinct: a sequence holds at most its 3 items"):
        efa.sample(efa.EFA(efa.EFAConfig([efa.Category("item", 3, distinct=True)], max_len=5,
                                         direction="unidirectional")), 1, length=5)


def test_bad_requests_are_refused(teacher):
    with pytest.raises(ValueError, match="n must be a positive integer"):
        efa.sample(teacher, 0)
    with pytest.raises(ValueError, match="not both"):
        efa.sample(teacher, 5, context=efa.generators.sample(teacher, 2))
    with pytest.raises(ValueError, match="between the context's width 3 and"):
        efa.sample(teacher, context=efa.generators.sample(teacher, 2), length=9)
    with pytest.raises(ValueError, match="sweeps must be"):
        efa.sample(teacher, 3, sweeps=-1)
    covariate = efa.EFA(efa.EFAConfig([efa.Category("x", 3), efa.Attribute("t", size=1)],
                                      max_len=2))
    with pytest.raises(ValueError, match=r"reads field\(s\) \['t'\] without predicting"):
        efa.sample(covariate, 4)
    for length in (0, 4, -1, 2.5, True):
        with pytest.raises(ValueError, match="length must be an integer between 1 and the "
                                             "model's max_len 3"):
            efa.sample(teacher, 2, length=length)
    for seed in (None, 1.5, -1):
        with pytest.raises(ValueError, match="seed must be an integer >= 0"):
            efa.sample(teacher, 2, seed=seed)
    store = efa.EFA(efa.EFAConfig([efa.Category("store", 5, target=False),
                                   efa.Category("item", 6)], max_len=4,
                                  direction="unidirectional"))
    with pytest.raises(ValueError, match=r"\['store'\] without predicting"):
        efa.sample(store, 2, length=3)
    gap = efa.Sequences.from_lists({"store": [[1, 2]], "item": [[0, 1]]},
                                   observed={"store": [[True, False]]})
    with pytest.raises(ValueError, match="'store' is read, not predicted.* sequence 0, "
                                         "position 1"):
        efa.sample(store, context=gap)


@pytest.mark.slow
def test_a_fitted_models_samples_match_its_teachers():
    """#35's target: 10⁴ sequences sampled from a model fitted (efa's defaults) to a
    unidirectional teacher against 10⁴ from the teacher. Stated test: a two-sample χ²
    contingency test of each position's item frequencies and of each pair of positions'
    joint frequencies (5 + 10 tables), Bonferroni-corrected to a family-wise α of 10⁻³."""
    import warnings

    from efa.generators import sample as teacher_sample

    teacher = attention_teacher([efa.Category("item", 6)], max_len=5, seed=1)
    train, val = teacher_sample(teacher, 20000, seed=1), teacher_sample(teacher, 4000, seed=2)
    torch.manual_seed(0)
    student = efa.EFA(efa.EFAConfig([efa.Category("item", 6)], max_len=5,
                                    direction="unidirectional"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        efa.fit(student, train, val, progress=False)
    a = teacher_sample(teacher, 10_000, seed=3).fields["item"]
    b = efa.sample(student, 10_000, seed=4).fields["item"]
    tables = [(a[:, i], b[:, i], 6) for i in range(5)]
    tables += [(a[:, i] * 6 + a[:, j], b[:, i] * 6 + b[:, j], 36)
               for i, j in itertools.combinations(range(5), 2)]
    for u, v, k in tables:
        t = torch.stack([torch.bincount(u, minlength=k), torch.bincount(v, minlength=k)])
        assert stats.chi2_contingency(t[:, t.sum(0) > 0].numpy())[1] > 1e-3 / len(tables)


class _Copies(efa.core.conditional.ConditionalModel):
    """An enumerable causal model of three positions: x0 drawn from ``prior`` (probabilities
    of its k values); x1 and x2 each copy x0 with probability ``keep``, else take one of the
    other k − 1 values uniformly. A Bernoulli value when ``flag`` (k = 2), else a category."""

    def __init__(self, prior, keep, flag=False):
        super().__init__()
        self.prior, self.keep, self.flag = torch.tensor(prior, dtype=torch.float64), keep, flag
        k = len(prior)
        self.fields = [efa.Value("item", Bernoulli()) if flag else efa.Category("item", k)]
        self.max_len, self.direction = 3, "unidirectional"
        self.unused = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def natural_params_at(self, data, at):
        (name, m), = at.items()
        b, i = m.nonzero(as_tuple=True)
        k = len(self.prior)
        x0 = data.fields["item"][b, 0].long()
        copy = torch.tensor([(1 - self.keep) / (k - 1), self.keep], dtype=torch.float64).log()
        logits = torch.where(x0[:, None] == torch.arange(k), copy[1], copy[0])
        logits = torch.where((i == 0)[:, None], self.prior.log(), logits)
        return {name: logits[:, 1:] - logits[:, :1] if self.flag else logits}


@pytest.mark.parametrize("continued", [True, False])
def test_values_after_the_last_observed_one_follow_the_corrected_gap(continued):
    # x0 missing, x1 = 1 observed, x2 drawn: p(x0 = 1 | x1 = 1) = 0.95 and p(x2 = 1 | x1 = 1)
    # = 0.95² + 0.05² = 0.905. x2 was drawn once, given the uncorrected first guess at x0, and
    # never again: 0.505, and the gaps' chain conditioned on it (x0: 0.75).
    n = 4000
    ctx = efa.Sequences({"item": torch.tensor([[0, 1, 0]]).repeat(n, 1)},
                        torch.full((n,), 3 if not continued else 2),
                        {"item": torch.tensor([[False, True, False]]).repeat(n, 1)})
    if continued:
        ctx = ctx[torch.arange(n)]  # width 2: x2 is a continuation (length=3)
    x = efa.sample(_Copies([0.5, 0.5], 0.95), context=ctx, length=3 if continued else None, seed=0)
    got = x.fields["item"].double().mean(0)
    sd = lambda p: 4 * (p * (1 - p) / n) ** 0.5  # noqa: E731
    assert abs(got[0] - 0.95) < sd(0.95) + 0.01  # + the chain's autocorrelation
    assert abs(got[2] - 0.905) < sd(0.905) + 0.01


@pytest.mark.parametrize("sweeps", [0, 2])
def test_a_causal_distinct_field_never_repeats_an_item_observed_after_a_gap(sweeps):
    # The gap's first draw ignored items observed later, and a move out of a probability-0
    # state was always accepted, into another: 97 of 300 draws repeated an item at sweeps=0.
    from efa.core.families import Poisson

    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=8, distinct=True),
                                   efa.Value("cnt", Poisson(), dim=8)],
                                  max_len=5, direction="unidirectional"))
    n = 200
    ctx = efa.Sequences.from_lists(
        {"item": [[0, 1, 2, 3]] * n, "cnt": [[1, 2, 3, 4]] * n},
        observed={"item": [[True, False, True, False]] * n, "cnt": [[False, True, True, True]] * n})
    for length in (None, 5):
        draws = efa.sample(model, context=ctx, length=length, seed=0, sweeps=sweeps)
        items = draws.fields["item"]
        assert all(len(set(row.tolist())) == len(row) for row in items)
        model.check(draws)


def _distinct_model(k, length, seed, scale):
    torch.manual_seed(seed)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", k, dim=4, distinct=True),
                                   efa.Value("flag", Bernoulli(), dim=3)], max_len=length,
                                  num_layers=1, num_heads=1, direction="unidirectional"))
    with torch.no_grad():  # away from the uniform start: flags that tell about the items
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))
    return model.double().eval()


def _posterior(model, k, length, flags, seen):
    """Exact p(items | the flags at ``seen``), over the sequences of distinct items (codes)."""
    rows = [(x, y) for x in itertools.permutations(range(k), length)
            for y in itertools.product(range(2), repeat=length)]
    table = efa.Sequences({"item": torch.tensor([r[0] for r in rows]),
                           "flag": torch.tensor([r[1] for r in rows])},
                          torch.full((len(rows),), length))
    lls = efa.log_likelihoods(model, table)
    log_joint = (lls["item"] + lls["flag"]).sum(1)
    keep = torch.tensor([all(r[1][i] == flags[i] for i in seen) for r in rows])
    p = torch.where(keep, log_joint, -torch.inf).softmax(0)
    codes = {x: c for c, x in enumerate(itertools.permutations(range(k), length))}
    exact = torch.zeros(len(codes), dtype=torch.float64)
    exact.index_add_(0, torch.tensor([codes[r[0]] for r in rows]), p)
    return exact, codes


@pytest.mark.parametrize("k,length,seen,seed,scale", [(3, 3, (0, 1, 2), 1, 0.4),
                                                     (4, 3, (0,), 3, 0.5)])
def test_a_distinct_rows_gaps_reach_their_exact_conditional(k, length, seen, seed, scale):
    """Every item missing, the flags at ``seen`` observed. A row that holds every item (k =
    length) could not move before (each gap's other items were held by the other gaps, so the
    draws stayed the first pass's); a proposal another gap holds is now swapped with it. With
    values unobserved after the last observed one (k = 4), the gaps' moves were judged against
    those stale values and stayed at the first pass for 100 sweeps; the target is now the joint
    up to the last observed position, the later values drawn after the gaps."""
    model = _distinct_model(k, length, seed, scale)
    flags = [1, 0, 1][:length]
    exact, codes = _posterior(model, k, length, flags, seen)
    n = 3000
    context = efa.Sequences({"item": torch.zeros(n, length, dtype=torch.long),
                             "flag": torch.tensor([flags] * n)}, torch.full((n,), length),
                            {"item": torch.zeros(n, length, dtype=torch.bool),
                             "flag": torch.tensor([[i in seen for i in range(length)]] * n)})
    draws = efa.sample(model, context=context, sweeps=15, seed=2)
    got = torch.tensor([codes[tuple(r)] for r in draws.fields["item"].tolist()])
    assert _agree(got, exact, n) > 1e-3


def test_gibbs_refuses_a_distinct_row_that_holds_every_item():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 3, dim=4, distinct=True)], max_len=3,
                                  direction="bidirectional"))
    with pytest.raises(ValueError, match="holds all its 3 items.*sweeps=0"):
        efa.sample(model, 10, length=3)
    assert efa.sample(model, 10, length=3, sweeps=0).fields["item"].shape == (10, 3)
    assert efa.sample(model, 10, length=2).fields["item"].shape == (10, 2)


def test_a_causal_gaps_sharp_conditional_is_reached_in_the_default_sweeps():
    # x1 = x2 = 7 observed: p(x0 = 7 | x1, x2) = 0.01·0.81 / (0.01·0.81 + 0.99·(0.1/7)²) = 0.976,
    # but the ancestral proposal offers 7 once in 100 draws: after the default 20 sweeps of
    # the Metropolis move, 0.20 of the rows held 7 (0.62 after 100). A class field's gap is
    # now redrawn from its exact conditional (the joint at each of its 8 classes).
    model = _Copies([0.99 / 7] * 7 + [0.01], 0.9)  # x0 = 7 w.p. 0.01
    n = 2000
    ctx = efa.Sequences({"item": torch.tensor([[0, 7, 7]]).repeat(n, 1)}, torch.full((n,), 3),
                        {"item": torch.tensor([[False, True, True]]).repeat(n, 1)})
    x0 = torch.arange(8)
    rest = torch.stack([x0, torch.full((8,), 7), torch.full((8,), 7)], 1)
    lls = efa.log_likelihoods(model, efa.Sequences({"item": rest}, torch.full((8,), 3)))
    exact = lls["item"].sum(1).softmax(0)
    assert abs(float(exact[7]) - 0.976) < 1e-3
    for sweeps in (1, 20):
        draws = efa.sample(model, context=ctx, sweeps=sweeps, seed=0)
        assert _agree(draws.fields["item"][:, 0], exact, n) > 1e-3, sweeps


def test_a_causal_gap_in_a_bernoulli_value_is_drawn_from_its_exact_conditional():
    # x1 = x2 = 1 observed: p(x0 = 1 | x1, x2) = 0.01·0.81 / (0.01·0.81 + 0.99·0.01) = 0.45;
    # the Metropolis proposal offers 1 once in 100 draws: 0.155 after 20 sweeps before (0.41
    # after 100).
    model = _Copies([0.99, 0.01], 0.9, flag=True)
    n = 2000
    ctx = efa.Sequences({"item": torch.tensor([[0, 1, 1]]).repeat(n, 1)}, torch.full((n,), 3),
                        {"item": torch.tensor([[False, True, True]]).repeat(n, 1)})
    rest = torch.tensor([[0, 1, 1], [1, 1, 1]])
    lls = efa.log_likelihoods(model, efa.Sequences({"item": rest}, torch.full((2,), 3)))
    exact = lls["item"].sum(1).softmax(0)
    assert abs(float(exact[1]) - 0.45) < 1e-9
    draws = efa.sample(model, context=ctx, sweeps=20, seed=0)
    assert _agree(draws.fields["item"][:, 0].long(), exact, n) > 1e-3


def test_the_guide_states_the_exact_moves_threshold():
    from pathlib import Path

    from efa.sampling import EXACT_SUPPORT

    guide = (Path(__file__).parents[1] / "docs" / "guide" / "probabilistic.md").read_text()
    assert f"`efa.sampling.EXACT_SUPPORT` ({EXACT_SUPPORT})" in guide
