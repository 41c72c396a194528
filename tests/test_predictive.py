"""Predictive distributions (model.predictive, efa.training.predictive): log_prob is efa's own
log-likelihood for every family, quantiles are the inverse CDF (checked against the CDF summed
by hand), and on a teacher's own data its central intervals cover at their nominal level."""


import numpy as np
import pytest
import torch
from torch import distributions as D

import efa
from efa.core.families import (
    Bernoulli,
    Binomial,
    Gamma,
    Gaussian,
    NegativeBinomial,
    Ordinal,
    Poisson,
)
from efa.generators import attention_teacher, sample
from efa.training.predictive import interval, predictive_frame, quantile
from tests.helpers import count_teacher, item_value_data, item_value_model

VALUES = {"count": Poisson(), "temp": Gaussian(), "flag": Bernoulli(),
          "over": NegativeBinomial(3.0), "size": Gamma(), "hits": Binomial(5), "grade": Ordinal(4)}


@pytest.fixture(scope="module")
def teacher_and_data():
    fields = [efa.Category("item", 7)] + [efa.Value(k, f) for k, f in VALUES.items()]
    teacher = attention_teacher(fields, max_len=6, seed=2)  # (seeds 1, 3: counts explode)
    return teacher, sample(teacher, 1500, seed=4)


def test_log_prob_is_efas_log_likelihood_for_every_family(teacher_and_data):
    teacher, data = teacher_and_data
    lls = efa.log_likelihoods(teacher, data)
    for name in ["item", *VALUES]:
        at = data.predicted(name)
        dist = teacher.predictive(data, name)
        y = data.fields[name][at]
        y = y.long() if isinstance(dist, D.Categorical) else y.to(torch.float64)
        torch.testing.assert_close(dist.log_prob(y), lls[name][at], atol=1e-9, rtol=0)
        assert dist.batch_shape[0] == int(at.sum())
    one = torch.zeros_like(data.valid())
    one[2, 3] = True  # any positions, in the order of at.nonzero()
    assert teacher.predictive(data, "count", one).batch_shape == (1,)


def test_quantiles_are_the_inverse_cdf():
    """Discrete: the smallest y with F(y) ≥ q, F summed from torch's own pmf; continuous:
    F(quantile) = q. (scipy's negative binomial counts the other outcome: p is flipped.)"""
    qs = (0.05, 0.5, 0.9, 0.99)
    discrete = [D.Poisson(torch.tensor([0.3, 4.0, 40.0], dtype=torch.float64)),
                D.NegativeBinomial(torch.tensor(3.0, dtype=torch.float64),
                                   logits=torch.tensor([-1.0, 0.5, 2.0], dtype=torch.float64)),
                D.Binomial(5, logits=torch.tensor([-2.0, 0.0, 1.5], dtype=torch.float64)),
                D.Bernoulli(logits=torch.tensor([-1.0, 0.2, 3.0], dtype=torch.float64)),
                D.Categorical(logits=torch.tensor([[0.0, 1.0, -1.0, 2.0]] * 3,
                                                  dtype=torch.float64))]
    grid = torch.arange(0, 400, dtype=torch.float64)[:, None]
    for dist in discrete:
        cdf = (dist.log_prob(grid.long() if isinstance(dist, D.Categorical) else grid)
               if not isinstance(dist, (D.Categorical, D.Bernoulli, D.Binomial)) else None)
        if isinstance(dist, D.Categorical):
            cdf = dist.probs.cumsum(-1).T
        elif isinstance(dist, (D.Bernoulli, D.Binomial)):
            top = 2 if isinstance(dist, D.Bernoulli) else 6
            cdf = dist.log_prob(grid[:top].expand(top, 3)).exp().cumsum(0)
        else:
            cdf = cdf.exp().cumsum(0)
        for q in qs:
            want = (cdf < q - 1e-12).sum(0).double()
            assert torch.equal(quantile(dist, q), want), (type(dist).__name__, q)
    for dist in (D.Normal(torch.tensor([0.0, 3.0]), torch.tensor([1.0, 0.2])),
                 D.Gamma(torch.tensor([0.5, 4.0], dtype=torch.float64),
                         torch.tensor([2.0, 0.3], dtype=torch.float64))):
        for q in qs:
            assert torch.allclose(dist.cdf(quantile(dist, q).to(dist.mean.dtype)).double(),
                                  torch.full((2,), q, dtype=torch.float64), atol=1e-6)
    with pytest.raises(ValueError, match="level must be a number strictly between 0 and 1"):
        interval(discrete[0], 1.0)
    with pytest.raises(ValueError, match="q must be"):
        quantile(discrete[0], -0.1)


def test_a_teachers_intervals_cover_its_own_data_at_the_nominal_level(teacher_and_data):
    """On data drawn from the teacher, its 50 % and 90 % central intervals cover within two
    points of nominal (continuous families), and at least nominally (discrete: an interval
    of whole values holds at least the level)."""
    teacher, data = teacher_and_data
    for level in (0.5, 0.9):
        for name in VALUES:
            frame = predictive_frame(teacher, data, name, level=level)
            assert len(frame) == int(data.predicted(name).sum())
            cover = frame["covered"].mean()
            if name in ("temp", "size"):
                assert abs(cover - level) <= 0.02, (name, level, cover)
            else:
                assert cover >= level - 0.02, (name, level, cover)


def test_predictive_frame_rows(teacher_and_data):
    teacher, data = teacher_and_data
    frame = predictive_frame(teacher, data, "temp", level=0.8, batch_size=500)
    lls = efa.log_likelihoods(teacher, data)["temp"]
    at = data.predicted("temp")
    np.testing.assert_allclose(frame["surprisal"], -lls[at].numpy(), atol=1e-9)
    np.testing.assert_allclose(frame["residual"], (frame["observed"] - frame["mean"])
                               / frame["sd"])
    assert (frame["sequence"].to_numpy() == at.nonzero()[:, 0].numpy()).all()
    assert list(frame.columns) == ["sequence", "position", "observed", "mean", "sd", "lower",
                                   "upper", "covered", "residual", "surprisal"]
    items = predictive_frame(teacher, data, "item")
    assert {"predicted", "probability"} <= set(items.columns) and "mean" not in items
    assert (items["probability"] <= 1).all()


def test_a_shifted_family_gives_the_distribution_of_y_itself():
    """Ratings 1 + Poisson (README's example): log_prob, mean, samples and quantiles of y."""
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("m", 5), efa.Value("r", Poisson(shift=1))],
                                  max_len=4)).double()
    data = efa.Sequences({"m": torch.randint(0, 5, (30, 4)), "r": torch.randint(1, 5, (30, 4))},
                         torch.full((30,), 4))
    dist = model.predictive(data, "r")
    at = data.predicted("r")
    torch.testing.assert_close(dist.log_prob(data.fields["r"][at].double()),
                               efa.log_likelihoods(model, data)["r"][at], atol=1e-9, rtol=0)
    assert (dist.sample() >= 1).all() and (quantile(dist, 0.01) >= 1).all()
    torch.testing.assert_close(dist.mean, dist.base.mean + 1)
    frame = predictive_frame(model, data, "r")
    assert (frame["lower"] >= 1).all() and np.isfinite(frame["surprisal"]).all()


def test_bad_requests_are_refused(teacher_and_data):
    teacher, data = teacher_and_data
    with pytest.raises(KeyError, match="no field 'nope'"):
        teacher.predictive(data, "nope")
    with pytest.raises(ValueError, match="is not predicted"):
        efa.EFA(efa.EFAConfig([efa.Category("x", 3), efa.Category("c", 2, target=False)],
                              max_len=2)).predictive(
            efa.Sequences({"x": torch.zeros(1, 2, dtype=torch.long),
                           "c": torch.zeros(1, 2, dtype=torch.long)}, torch.full((1,), 2)), "c")
    with pytest.raises(ValueError, match="level must be"):
        predictive_frame(teacher, data, "temp", level=0)


def test_the_data_are_checked_and_padding_refused():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4)], max_len=4,
                                  direction="unidirectional"))
    data = efa.Sequences.from_lists({"item": [[0, 1, 2], [3, 4]]})
    at = torch.zeros(2, 3, dtype=torch.bool)
    at[1, 2] = True
    with pytest.raises(ValueError, match="sequence 1, position 2, which is padding"):
        model.predictive(data, "item", at=at)
    with pytest.raises(ValueError, match="item"):
        model.predictive(efa.Sequences.from_lists({"item": [[0, 9]]}), "item")


def test_a_batch_with_nothing_to_predict_and_a_saturated_probability():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4), efa.Value("y", Bernoulli(),
                                                                          dim=4)],
                                  max_len=4, direction="unidirectional"))
    data = efa.Sequences.from_lists({"item": [[0, 1], [2, 3]], "y": [[1, 0], [1, 1]]},
                                    observed={"item": [[True, True], [False, False]]})
    whole = predictive_frame(model, data, "item")
    assert predictive_frame(model, data, "item", batch_size=1).equals(whole)
    none = efa.Sequences.from_lists({"item": [[0, 1]], "y": [[1, 0]]},
                                    observed={"item": [[False, False]]})
    assert list(predictive_frame(model, none, "item").columns) == list(whole.columns)
    with torch.no_grad():
        model.readouts["y"].net[-1].bias.fill_(100.0)  # p(y = 1) is 1.0 in float32
    with pytest.raises(FloatingPointError, match="no spread at sequence 0, position 1"):
        predictive_frame(model, data, "y")
    ones = efa.Sequences.from_lists({"item": [[0, 1]], "y": [[1, 1]]})
    frame = predictive_frame(model, ones, "y")
    assert (frame["residual"] == 0).all() and (frame["sd"] == 0).all()  # y is the mean


def test_predictive_distributions_carry_no_autograd_graph():
    from efa.core.families import HeteroscedasticGaussian
    model, data = item_value_model(HeteroscedasticGaussian()), item_value_data()
    assert not model.predictive(data, "y").mean.requires_grad


def test_an_ordinal_predictive_has_the_class_index_moments_and_a_category_refuses_them():
    # torch's Categorical leaves mean / variance NaN: model.predictive(...).mean was NaN for an
    # ordinal field, whose mean predict_mean gives.
    from efa.core.families import Ordinal
    from efa.generators import attention_teacher
    from efa.generators import sample as draw

    teacher = attention_teacher([efa.Category("item", 5), efa.Value("grade", Ordinal(4))],
                                max_len=5, seed=0)
    data = draw(teacher, 4, length=3, seed=0)
    d = teacher.predictive(data, "grade")
    k = torch.arange(4, dtype=torch.float64)
    mean = (d.probs * k).sum(-1)
    assert torch.allclose(d.mean, mean, atol=1e-12)
    assert torch.allclose(d.mean, teacher.predict_mean(data)["grade"][data.predicted("grade")],
                          atol=1e-12)
    assert torch.allclose(d.variance, (d.probs * (k - mean[:, None]) ** 2).sum(-1), atol=1e-12)
    with pytest.raises(ValueError, match="not ordered"):
        teacher.predictive(data, "item").mean  # noqa: B018


@pytest.mark.parametrize("eta,dtype", [(12.0, torch.float32), (17.0, torch.float32),
                                       (30.0, torch.float64)])
def test_an_ordinal_variance_keeps_its_digits_where_the_law_sits_on_the_top_class(eta, dtype):
    # E[k²] − E[k]² cancelled: +8.6 % at η = 12 in float32, exactly 0 at η = 17 (the frame
    # then called the law spread-less and refused it).
    from efa.core.families import Ordinal

    d = Ordinal(4).distribution(torch.tensor([[eta]], dtype=dtype))
    p, k = d.probs.double(), torch.arange(4, dtype=torch.float64)
    mean = (p * k).sum(-1, keepdim=True)
    exact = (p * (k - mean) ** 2).sum(-1)
    assert exact > 0 and torch.allclose(d.variance.double(), exact, rtol=1e-5, atol=0)


def test_count_quantiles_of_a_float32_model_take_the_complement_from_the_logits():
    # scipy got 1 − p with p = sigmoid(z) rounded in float32: the negative binomial's median
    # at z = 15 (mean ~1e7) was 7.48e6 where the law's is 8.74e6.
    import numpy as np
    from scipy import stats

    from efa.core.families import NegativeBinomial
    from efa.training.predictive import quantile

    family = NegativeBinomial(3.0)
    for z in (11.0, 15.0):
        dist = family.distribution(family.link(torch.tensor([[z]], dtype=torch.float32)))
        exact = stats.nbinom(3.0, 1 / (1 + np.exp(z))).ppf([0.05, 0.5, 0.95])
        got = [float(quantile(dist, q)) for q in (0.05, 0.5, 0.95)]
        assert np.allclose(got, exact, rtol=1e-6)


@pytest.mark.parametrize("name", ["poisson", "negative_binomial", "binomial", "bernoulli"])
def test_log_prob_of_integer_counts_is_computed_in_the_models_dtype(name):
    # torch computed lgamma(y + 1) of an int64 y in float32: Poisson at y = 1e5 in a float64
    # model was −15.0210 where efa's own log-likelihood is −14.9929.
    from efa.core.families import Bernoulli, Binomial, NegativeBinomial, Poisson

    family, y = {"poisson": (Poisson(), 100_000), "negative_binomial": (NegativeBinomial(5.0),
                                                                        50_000),
                 "binomial": (Binomial(200_000), 100_001), "bernoulli": (Bernoulli(), 1)}[name]
    eta = family.link(torch.tensor([[11.5 if name == "poisson" else 1e-4]], dtype=torch.float64))
    dist = family.distribution(eta)
    got = dist.log_prob(torch.tensor([y]))
    assert got.dtype == torch.float64
    assert torch.allclose(got, family.log_prob(torch.tensor([float(y)], dtype=torch.float64),
                                               eta), rtol=0, atol=1e-9)


def test_numpy_numbers_are_taken_by_the_probabilistic_api():
    # "k must be an integer between 1 and the catalogue's 6 items, got np.int64(2)", and
    # sample(seed=np.int64(1)) a bare TypeError; efa.fit takes them.
    import numpy as np

    teacher, data = count_teacher()
    one = np.int64(1)
    assert torch.equal(efa.sample(teacher, 2 * one, length=3 * one, sweeps=one, seed=one)
                       .fields["item"], efa.sample(teacher, 2, length=3, sweeps=1, seed=1)
                       .fields["item"])
    assert efa.recommend(teacher, data, k=2 * one).equals(efa.recommend(teacher, data, k=2))
    assert efa.ranking_metrics(teacher, data, k=3 * one) == efa.ranking_metrics(teacher, data,
                                                                                k=3)
    assert efa.calibration(teacher, data, "count", bins=5 * one).pit == \
        efa.calibration(teacher, data, "count", bins=5).pit
    assert efa.predictive_frame(teacher, data, "count", level=np.float32(0.5)).equals(
        efa.predictive_frame(teacher, data, "count", level=0.5))
