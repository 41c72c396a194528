"""Session 41's fixes of what earlier probe rounds left: each test fails on the code before
its fix."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import efa
from efa.training import checkpoint
from tests.helpers import killed_after_saves
from tests.test_probe_round_40_persistence import _items


def _item_model():
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("item", 50, dim=8)], max_len=6, num_layers=1,
                                 dropout=0.1))


def test_a_checkpoint_keeps_and_restores_the_accelerator_random_state(tmp_path, monkeypatch):
    # Only torch.get_rng_state (the CPU's) was saved: a GPU fit with dropout resumed with
    # other masks. No GPU here, so the CUDA generator is stood in for by a counter.
    device_rng = {"state": torch.arange(16, dtype=torch.uint8)}
    restored = []
    monkeypatch.setattr(checkpoint, "_cuda_device", lambda model: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_rng_state",
                        lambda device=None: device_rng["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda state, device=None: restored.append(state.clone()))
    data = _items()
    options = dict(max_epochs=3, seed=3, batch_size=8, progress=False, threads=1)

    def device_drew():  # the device's state moves on after each save
        device_rng["state"] = device_rng["state"] + 1

    killed_after_saves(monkeypatch, 2, lambda: efa.fit(_item_model(), data, None,
                                                       checkpoint_dir=tmp_path, **options),
                       device_drew)
    state = checkpoint.load(tmp_path)
    assert state is not None and "rng/cuda" in state[0]
    efa.fit(_item_model(), data, None, checkpoint_dir=tmp_path, **options)
    # the state written with the second save (the first changed it once) is the one restored
    assert len(restored) == 1
    assert torch.equal(restored[0], torch.arange(16, dtype=torch.uint8) + 1)


def test_a_malformed_accelerator_random_state_is_refused_before_anything_changes(tmp_path):
    model = _item_model()
    efa.fit(model, _items(), None, checkpoint_dir=tmp_path, max_epochs=1, progress=False,
            threads=1)
    path = tmp_path / checkpoint.FILE
    with safe_open(path, "pt") as f:
        meta = f.metadata()
    tensors = load_file(path)
    tensors["rng/cuda"] = torch.zeros(3, dtype=torch.float32)
    save_file(tensors, path, metadata=meta)
    with pytest.raises(ValueError, match="rng/cuda"):
        efa.fit(_item_model(), _items(), None, checkpoint_dir=tmp_path, max_epochs=1,
                progress=False, threads=1)


def test_prop9_correlations_refuses_shapes_that_disagree():
    from efa.embeddings import cooccurrence, prop9_correlations

    counts = cooccurrence([[0, 1, 2], [2, 1, 0], [1, 1, 3]], 4)
    g = torch.Generator().manual_seed(0)
    W, C = torch.randn(4, 3, generator=g).numpy(), torch.randn(4, 3, generator=g).numpy()
    ok = prop9_correlations(W, C, counts)
    assert ok["pairs"] == 16 and ok["defined"] == int((counts > 0).sum())
    with pytest.raises(ValueError, match="W and C"):
        prop9_correlations(W, C[:, :2], counts)  # numpy broadcast or a matmul error before
    with pytest.raises(ValueError, match="W and C"):
        prop9_correlations(W[:3], C[:3], counts)


def test_attention_statistics_refuses_an_empty_corpus():
    from efa.embeddings import attention_statistics

    with pytest.raises(ValueError, match="empty"):  # NaN and ZeroDivisionError before
        attention_statistics([1.0, 2.0, 1.0, 0.5], torch.zeros(0, 3, dtype=torch.long).numpy(),
                             3)


def test_the_table_estimator_warns_of_float_columns_that_are_linear_functions_of_another():
    # A probe's °F copy of a °C column, with numeric="gaussian": each predicted the other to
    # the σ floor and the response's test log loss tripled, without a word.
    import warnings

    import numpy as np
    import pandas as pd

    from efa.tabular import AttentionTableClassifier

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"c": rng.normal(size=60), "b": rng.normal(size=60), "k": 3.0})
    y = (X["c"] + X["b"] > 0).astype(int).to_numpy()
    X["f"] = 1.8 * X["c"] + 32
    X.loc[5, "f"] = np.nan  # a missing cell does not hide the pair
    opts = dict(numeric="gaussian", max_epochs=1, random_state=0, missing="mask")
    with pytest.warns(UserWarning, match=r"'c' ~ 'f'.*numeric='quantile'"):
        AttentionTableClassifier(**opts).fit(X, y)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "float column")  # a constant column alone: no pair
        AttentionTableClassifier(**opts).fit(X.drop(columns="f"), y)
        AttentionTableClassifier(**{**opts, "numeric": "quantile"}).fit(X, y)


class _Copies(efa.core.conditional.ConditionalModel):
    """An enumerable causal model: x0 uniform on {0, 1}; x1 and x2 each copy x0 w.p. 0.95."""

    def __init__(self):
        super().__init__()
        self.fields, self.max_len, self.direction = [efa.Category("item", 2)], 3, "unidirectional"
        self.unused = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))

    def natural_params_at(self, data, at):
        (name, m), = at.items()
        b, i = m.nonzero(as_tuple=True)
        x0 = data.fields["item"][b, 0]
        copy = torch.tensor([0.05, 0.95], dtype=torch.float64).log()
        logits = torch.where(x0[:, None] == torch.arange(2), copy[1], copy[0])
        return {name: torch.where((i == 0)[:, None], torch.zeros_like(logits), logits)}


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
    x = efa.sample(_Copies(), context=ctx, length=3 if continued else None, seed=0)
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


def _count_teacher():
    from efa.core.families import Poisson
    from efa.generators import attention_teacher
    from efa.generators import sample as draw

    teacher = attention_teacher([efa.Category("item", 6), efa.Value("count", Poisson(shift=1))],
                                max_len=6, seed=1)
    return teacher, draw(teacher, 30, length=4, seed=0)


def test_numpy_numbers_are_taken_by_the_probabilistic_api():
    # "k must be an integer between 1 and the catalogue's 6 items, got np.int64(2)", and
    # sample(seed=np.int64(1)) a bare TypeError; efa.fit takes them.
    import numpy as np

    teacher, data = _count_teacher()
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


def test_calibration_levels_one_number_none_or_for_a_category():
    teacher, data = _count_teacher()
    assert efa.calibration(teacher, data, "count", levels=0.9).levels == (0.9,)  # TypeError
    with pytest.raises(ValueError, match="levels is empty"):  # an empty result before
        efa.calibration(teacher, data, "count", levels=())
    with pytest.raises(ValueError, match="is a category: it has no intervals"):  # ignored
        efa.calibration(teacher, data, "item", levels=(0.9,))
    assert efa.calibration(teacher, data, "count").levels == (0.5, 0.8, 0.9, 0.95)
    assert efa.calibration(teacher, data, "item").levels == ()


def test_calibration_levels_as_an_array_and_a_bad_single_level():
    # Found by the session's review: levels as a NumPy array broke (`levels or ()` asked an
    # array for its truth value) and levels=0.0 was reported as empty.
    import numpy as np

    teacher, data = _count_teacher()
    assert efa.calibration(teacher, data, "count", levels=np.array([0.5, 0.9])).levels == \
        (0.5, 0.9)
    with pytest.raises(ValueError, match="strictly between 0 and 1, got 0.0"):
        efa.calibration(teacher, data, "count", levels=0.0)
