"""The peers on inputs they could misread: unobserved items and values kept out of every context,
NaN scores, ratings beyond the GLM's pairs, counts per category, BERT4Rec's chunk, direction
names, the Gaussian conditional's shrinkage past a singular α."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa.baselines import CBOW, TNPD, CategoricalFM, FlatMLP, NadarayaWatson, RatingGLM, Unigram
from efa.baselines.recsys import BERT4Rec, ranking_metrics
from efa.core.data import Sequences
from efa.core.families import Bernoulli, Gaussian, Poisson
from efa.core.fields import Attribute, Category, Value
from efa.training.scoring import evaluate, log_likelihoods


def _jiggled(model):
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    return model.eval()


@pytest.mark.parametrize("make", [
    lambda f: CBOW(f, dim=4, window=2), lambda f: CategoricalFM(f, dim=4),
    lambda f: CategoricalFM(f, dim=4, direction="unidirectional")])
def test_an_unobserved_item_is_in_no_context_whatever_its_placeholder(make):
    model = _jiggled(make(Category("item", 6)))
    scores = [log_likelihoods(model, Sequences.from_lists(
        {"item": [[1, hidden, 3, 4]]}, observed={"item": [[True, False, True, True]]}))["item"][0]
        for hidden in (0, 5)]
    torch.testing.assert_close(scores[0], scores[1], equal_nan=True, rtol=0, atol=0)
    # and the same as a sequence that holds no value there at all
    assert torch.isnan(scores[0][1])


def _functions(y):
    return Sequences({"x": torch.tensor([[[0.0], [0.5], [1.0], [1.5]]]),
                      "channel": torch.zeros(1, 4, dtype=torch.long),
                      "y": torch.tensor([y])}, torch.tensor([4]),
                     {"y": torch.tensor([[True, False, True, True]])})


def test_the_smoother_leaves_an_unobserved_y_out_even_when_it_is_nan():
    fields = [Attribute("x", 1), Category("channel", 2, target=False), Value("y", Gaussian())]
    nw = NadarayaWatson(fields, 0.5, 0.5, 0.1, 0.0, 1.0)
    a = nw.predict_mean_sd(_functions([0.1, 0.0, 0.3, 0.2]))
    b = nw.predict_mean_sd(_functions([0.1, float("nan"), 0.3, 0.2]))
    c = nw.predict_mean_sd(_functions([0.1, 50.0, 0.3, 0.2]))
    for u, v in ((a, b), (a, c)):
        torch.testing.assert_close(u[0], v[0], equal_nan=True)


def test_peers_with_a_slot_per_position_refuse_unobserved_values():
    fields = [Value("y", Gaussian()), Attribute("x", 1)]
    data = Sequences({"y": torch.tensor([[0.1, 0.0, 0.3]]), "x": torch.zeros(1, 3, 1)},
                     torch.tensor([3]), {"y": torch.tensor([[True, False, True]])})
    with pytest.raises(ValueError, match="FlatMLP takes complete sequences.*position 1"):
        evaluate(FlatMLP(fields, 3), data)
    tnp_fields = [Attribute("x", 1), Category("channel", 2, target=False),
                  Value("y", Gaussian())]
    funcs = _functions([0.1, 0.0, 0.3, 0.2])
    tnp = TNPD(funcs, tnp_fields, d_model=8, emb_depth=1, dim_feedforward=8, nhead=1,
               num_layers=1)
    with pytest.raises(ValueError, match="TNP-D takes complete sequences"):
        tnp.predict_mean_sd(funcs)
    with pytest.raises(ValueError, match="TNP-D takes complete sequences"):
        tnp.loss(funcs)


def test_the_tnp_leaves_the_callers_mode_as_it_was():
    fields = [Attribute("x", 1), Category("channel", 2, target=False), Value("y", Gaussian())]
    funcs = Sequences({"x": torch.rand(2, 4, 1), "channel": torch.zeros(2, 4, dtype=torch.long),
                       "y": torch.rand(2, 4)}, torch.tensor([4, 4]))
    tnp = TNPD(funcs, fields, d_model=8, emb_depth=1, dim_feedforward=8, nhead=1, num_layers=1)
    tnp.train()
    tnp.predict_mean_sd(funcs)
    assert tnp.training


def test_ranking_metrics_refuse_nan_scores():
    f = Category("item", 5)
    unigram = Unigram(f, torch.ones(5))
    unigram.log_probs[2] = float("nan")  # as a diverged model's scores
    with pytest.raises(FloatingPointError, match="NaN scores .* sequence 0"):
        ranking_metrics(unigram, Sequences.from_lists({"item": [[0, 1, 2], [3, 4]]}), k=1)


def test_the_rating_glm_refuses_a_value_beyond_its_pairs():
    item, value = Category("movie", 3, target=False), Value("rating", Poisson())
    glm = RatingGLM(item, value, 3, "bidirectional", max_len=4)
    with pytest.raises(ValueError, match="'rating' is 3 at sequence 0, position 0"):
        glm.bag(Sequences.from_lists({"movie": [[0, 2]], "rating": [[3, 1]]}))


def test_the_unigram_needs_a_count_per_category():
    f = Category("item", 3)
    with pytest.raises(ValueError, match="one number >= 0 per category"):
        Unigram(f, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="holds 7, not one of its 3 categories"):
        Unigram.from_data(f, Sequences.from_lists({"item": [[0, 1, 7], [7, 7, 2]]}))


@pytest.mark.parametrize("chunk", [0, -1, True, 2.0])
def test_bert4rec_checks_its_chunk(chunk):
    with pytest.raises(ValueError, match="chunk must be an integer >= 1"):
        BERT4Rec(Category("item", 5), max_len=4, chunk=chunk)


def test_peers_attributes_and_bernoulli_values():
    from efa.baselines.glm import ContextLogit
    from efa.baselines.recsys import BERT4Rec

    cat = efa.Category("item", 6, dim=8, distinct=True)
    with pytest.raises(ValueError, match="direction must be 'bidirectional' or "
                                         "'unidirectional', got 'bi'"):
        BERT4Rec(cat, max_len=5, direction="bi")
    with pytest.raises(ValueError, match="got 'Bidirectional'"):
        ContextLogit(cat, "Bidirectional", 5)
    with_attribute = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4),
                                            efa.Attribute("a", 1, dim=4)], max_len=3))
    data = efa.Sequences.from_lists(
        {"item": [[0, 1, 2], [3, 4]], "a": [[[.1], [.2], [.3]], [[.4], [.5]]]},
        observed={"a": [[True, False, True], [True, True]]})
    with pytest.raises(ValueError, match="'a' is an attribute, always observed.*sequence 0, "
                                         "position 1"):
        efa.evaluate(with_attribute, data)
    flags = efa.Sequences.from_lists({"item": [[0, 1, 2]], "z": [[0, 1, 1]]})
    model = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4),
                                   efa.Value("z", Bernoulli(), dim=4)], max_len=3)).eval()
    got = model.predictive(flags, "z").log_prob(flags.fields["z"][flags.predicted("z")])
    assert torch.allclose(got.double(), efa.log_likelihoods(model, flags)["z"][0])


def test_shrinkage_skips_a_singular_alpha_and_refuses_nothing_to_score():
    from efa.baselines.gaussian import select_shrinkage
    from efa.spatial import sites_to_sequences

    rng = np.random.RandomState(0)
    df = pd.DataFrame([(s, t, 10.0 * s, 5.0 * s, 7.0 if s == 2 else rng.randn())
                       for t in range(10) for s in range(3)],
                      columns=["site", "time", "lat", "lon", "value"])
    kw = dict(site="site", time="time", lat="lat", lon="lon", value="value")
    data = sites_to_sequences(df, **kw)  # site 2 is constant: singular at alpha 0
    model, curve = select_shrinkage(data[torch.arange(7)], data[torch.arange(7, 10)], "value")
    assert curve[0.0] == float("inf") and model.alpha > 0
    df["value"] = np.where(df.time >= 7, np.nan, rng.randn(len(df)))
    data = sites_to_sequences(df, **kw)
    with pytest.raises(ValueError, match="no predicted value of 'value'"):
        select_shrinkage(data[torch.arange(7)], data[torch.arange(7, 10)], "value")
