"""Calibration (efa.training.calibration), tested where the truth is known: a teacher's own
predictive on its own data is calibrated (coverage at the nominal level, uniform PITs, a small
ECE); a predictive made too wide, or over-confident categories, are seen as such."""

import copy

import numpy as np
import pytest
import torch
from scipy import stats
from torch import distributions as D

import efa
from efa.core.families import Bernoulli, Gamma, Gaussian, NegativeBinomial, Poisson
from efa.generators import attention_teacher, sample
from efa.training.calibration import calibration, cdf
from tests.helpers import count_teacher


@pytest.fixture(scope="module")
def teacher_and_data():
    fields = [efa.Category("item", 6), efa.Value("temp", Gaussian()),
              efa.Value("count", Poisson()), efa.Value("flag", Bernoulli()),
              efa.Value("over", NegativeBinomial(3.0)), efa.Value("size", Gamma())]
    teacher = attention_teacher(fields, max_len=6, seed=2, unbounded_feeds=("q", "k"))
    return teacher, sample(teacher, 2000, seed=5)


def test_cdf_against_scipy_and_the_pmf():
    y = torch.tensor([0.0, 2.0, 7.0], dtype=torch.float64)
    nb = D.NegativeBinomial(torch.tensor(3.0, dtype=torch.float64),
                            logits=torch.tensor([-1.0, 0.3, 1.2], dtype=torch.float64))
    by_hand = torch.stack([nb.log_prob(torch.arange(int(v) + 1, dtype=torch.float64)
                                       [:, None].expand(-1, 3))[:, k].exp().sum()
                           for k, v in enumerate(y)])
    torch.testing.assert_close(cdf(nb, y), by_hand)
    normal = D.Normal(torch.zeros(3), torch.ones(3))
    np.testing.assert_allclose(cdf(normal, y).numpy(), stats.norm.cdf(y.numpy()))
    cat = D.Categorical(probs=torch.tensor([[0.2, 0.3, 0.5]] * 3))
    torch.testing.assert_close(cdf(cat, torch.tensor([-1.0, 1.0, 5.0])),
                               torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64))


def test_a_teacher_is_calibrated_on_its_own_data(teacher_and_data):
    teacher, data = teacher_and_data
    for name in ("temp", "count", "flag", "over", "size"):
        c = calibration(teacher, data, name)
        assert c.kind == "value" and c.n == int(data.predicted(name).sum())
        assert c.pit_p_value > 1e-3, (name, c.pit)  # randomised PITs: uniform when calibrated
        for level, cover in zip(c.levels, c.coverage, strict=True):
            if name in ("temp", "size"):
                assert abs(cover - level) < 0.02, (name, level, cover)
            else:  # whole-valued intervals hold at least their level
                assert cover >= level - 0.02, (name, level, cover)
    items = calibration(teacher, data, "item")
    assert items.kind == "category" and items.ece < 0.02 and sum(items.count) == items.n


def test_miscalibration_is_seen(teacher_and_data, tmp_path):
    teacher, data = teacher_and_data
    wide = copy.deepcopy(teacher)
    wide.field("temp").family.sigma = 3.0  # the data have σ = 1: every interval too wide
    c = calibration(wide, data, "temp")
    assert c.coverage[0] > 0.85 and c.pit_p_value < 1e-6  # the 50 % interval holds ~90 %
    sharp = copy.deepcopy(teacher)
    with torch.no_grad():
        sharp.readouts["item"].net.weight.mul_(4)  # over-confident categories
    assert calibration(sharp, data, "item").ece > 2 * calibration(teacher, data, "item").ece
    assert c.plot(tmp_path / "temp.png").stat().st_size > 0
    assert calibration(teacher, data, "item").plot(tmp_path / "item.png").exists()
    assert list(c.frame().columns) == ["level", "coverage"]
    with pytest.raises(ValueError, match="level must be"):
        calibration(teacher, data, "temp", levels=(0.5, 1.0))
    with pytest.raises(ValueError, match="bins must be"):
        calibration(teacher, data, "temp", bins=1)


def test_conformal_level_is_the_order_statistic_and_restores_coverage(teacher_and_data):
    """Split conformal on half the data: q̂ is the ⌈(n + 1)·level⌉-th smallest |2 PIT − 1|
    (computed here by hand with scipy), and a predictive three times too wide, or a
    discrete one, then holds the nominal share of the other half."""
    teacher, data = teacher_and_data
    first, second = data[:1000], data[1000:]
    wide = copy.deepcopy(teacher)
    wide.field("temp").family.sigma = 3.0  # the data have σ = 1
    frame = efa.predictive_frame(wide, first, "temp")
    s = np.sort(np.abs(2 * stats.norm.cdf(frame["observed"], frame["mean"], frame["sd"]) - 1))
    for level in (0.5, 0.9):
        q = efa.conformal_level(wide, first, "temp", level)
        assert q == pytest.approx(s[int(np.ceil((len(s) + 1) * level)) - 1], abs=1e-12)
        assert q < level - 0.2  # the 3σ-wide predictive needs a far narrower interval
        cover = efa.predictive_frame(wide, second, "temp", level=q)["covered"].mean()
        assert abs(cover - level) < 0.03, (level, q, cover)
    for name in ("count", "over"):  # discrete: randomised PITs, coverage at least the level
        q = efa.conformal_level(teacher, first, name, 0.9)
        cover = efa.predictive_frame(teacher, second, name, level=q)["covered"].mean()
        assert cover >= 0.9 - 0.02, (name, q, cover)
    assert abs(efa.conformal_level(teacher, first, "temp", 0.9) - 0.9) < 0.02  # calibrated


def test_conformal_level_refuses_what_it_cannot_do(teacher_and_data):
    teacher, data = teacher_and_data
    with pytest.raises(ValueError, match="is a category"):
        efa.conformal_level(teacher, data, "item")
    few = data[:2]
    n = int(few.predicted("temp").sum())
    assert n < 99
    with pytest.raises(ValueError, match=rf"{n} held-out values of field 'temp' are too few "
                                         r"for level 0.99: at least 99 are needed"):
        efa.conformal_level(teacher, few, "temp", 0.99)
    with pytest.raises(ValueError, match="level must be"):
        efa.conformal_level(teacher, data, "temp", 1.0)


def test_nothing_to_calibrate_is_refused_and_few_values_get_no_p_value():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4),
                                   efa.Value("y", Bernoulli(), dim=4)],
                                  max_len=4, direction="unidirectional"))
    data = efa.Sequences.from_lists({"item": [[0, 1], [2, 3]], "y": [[1, 0], [1, 1]]},
                                    observed={"item": [[True, True], [False, False]]})
    whole = calibration(model, data, "item")
    assert calibration(model, data, "item", batch_size=1).ece == whole.ece
    assert whole.n == 2
    missing = efa.Sequences.from_lists({"item": [[0, 1]], "y": [[1, 0]]},
                                       observed={"y": [[False, False]]})
    with pytest.raises(ValueError, match="field 'y' has no predicted position"):
        calibration(model, missing, "y")
    few = calibration(model, data, "y")
    assert few.n == 4 and few.pit_p_value is None  # 4 values in 10 bins: no χ² test


def test_calibration_levels_one_number_none_or_for_a_category():
    teacher, data = count_teacher()
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

    teacher, data = count_teacher()
    assert efa.calibration(teacher, data, "count", levels=np.array([0.5, 0.9])).levels == \
        (0.5, 0.9)
    with pytest.raises(ValueError, match="strictly between 0 and 1, got 0.0"):
        efa.calibration(teacher, data, "count", levels=0.0)


def test_calibration_levels_as_a_0d_array_a_tensor_a_string_or_a_table():
    # A 0-d array (np.asarray(0.9)) raised "iteration over a 0-d array"; a string was read
    # character by character ("got '0'").
    import numpy as np

    teacher, data = count_teacher()
    assert efa.calibration(teacher, data, "count", levels=np.array(0.9)).levels == (0.9,)
    assert efa.calibration(teacher, data, "count",
                           levels=torch.tensor([0.5, 0.75], dtype=torch.float64)).levels == \
        (0.5, 0.75)
    with pytest.raises(ValueError, match="got the string '0.5'"):
        efa.calibration(teacher, data, "count", levels="0.5")
    with pytest.raises(ValueError, match=r"flat sequence, got an array of shape \(1, 2\)"):
        efa.calibration(teacher, data, "count", levels=np.array([[0.5, 0.9]]))
