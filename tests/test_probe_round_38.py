"""Session 38's second probe round (companion modules; core model and training): each test
fails on the code before its fix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa.core.families import Bernoulli, Gaussian


def _same(a, b):
    """Equal, NaN (padding) included."""
    return torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


def _data():
    return efa.Sequences.from_lists({"item": [[0, 1, 2], [3, 4]], "y": [[1., 2., 3.], [4., 5.]]})


def _fields():
    return [efa.Category("item", 5, dim=4), efa.Value("y", Gaussian(), dim=4, loc=3.0, scale=1.5)]


def _linear(**kw):
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("token", 5, dim=6)], num_layers=1, num_heads=2,
                                 max_len=4, block="residual_linear", bias=False, out_proj=True,
                                 **kw)).double().eval()


@pytest.mark.parametrize("kw", [dict(direction="unidirectional"), dict(attend_self=False)])
def test_the_mixture_identity_refuses_models_it_does_not_hold_for(kw):
    from efa import moe

    with pytest.raises(ValueError, match="direction='bidirectional' and attend_self=True"):
        moe.mixture(_linear(**kw), efa.Sequences({"token": torch.zeros(1, 4, dtype=torch.long)},
                                                  torch.tensor([4])))
    with pytest.raises(ValueError, match="direction='bidirectional' and attend_self=True"):
        moe.CBOWMoE.tied(_linear(**kw))
    from efa import embeddings

    bare = efa.EFA(efa.EFAConfig([efa.Category("t", 6, dim=5)], num_layers=1, num_heads=1,
                                 block="bare", bias=False, max_len=None, attend_self=False))
    with pytest.raises(ValueError, match="attend_self=False"):
        embeddings.attention_embeddings(bare)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1"):
        moe.CBOWMoE(efa.Category("t", 5, dim=4), 4, num_heads=0)


def test_a_categorical_function_column_keeps_each_prediction_on_its_row():
    from efa import regression as R

    rng = np.random.default_rng(0)
    df = pd.DataFrame([(f, rng.uniform(0, 5), rng.normal() + o, 0) for f, o in
                       [("a", 0), ("b", 10), ("c", -10)] for _ in range(5)],
                      columns=["fn", "x", "y", "ch"])
    train, _ = R.functions_to_sequences(df, "fn", "x", "y", "ch")
    torch.manual_seed(0)
    model = R.regression_efa(train, layers=1, heads=1, x_dim=4, y_dim=4, channel_dim=4,
                             hidden=8, ffn=8, readout_hidden=8, channels=[0, 1])
    ctx, tgt = df.groupby("fn").head(4), df.groupby("fn").tail(1)[["fn", "x", "ch"]]
    plain = R.predict_frame(model, ctx, tgt, "fn", "x", "y", "ch")
    kind = pd.CategoricalDtype(["c", "b", "a", "unused"])
    coded = R.predict_frame(model, ctx.astype({"fn": kind}), tgt.astype({"fn": kind}), "fn",
                            "x", "y", "ch")
    assert np.allclose(coded["mean"], plain["mean"]) and coded["fn"].dtype == kind
    with pytest.raises(ValueError, match="channels must be a count or a list of labels"):
        R.note_efa(train, channels=2.0)


def test_the_gp_oracle_refuses_targets_it_would_broadcast():
    from efa.baselines.gp import GPOracle
    from efa.generators.gp import TNPGP, NoteGP, sample_note

    spec = NoteGP(length=5, noise=0.1)
    d = sample_note(spec, 2, 0)
    k = d.fields["channel"]
    ctx = efa.Sequences({"x": d.fields["x"][:, :3], "y": d.fields["y"][:, :3],
                         "channel": k[:, :3]}, torch.tensor([3, 3]))
    oracle = GPOracle(spec, [])
    flat = oracle.predict(ctx, d.fields["x"][:, 3:, 0], k[:, 3:])[0]
    assert torch.equal(oracle.predict(ctx, d.fields["x"][:, 3:], k[:, 3:])[0], flat)
    with pytest.raises(ValueError, match="x and k must both be"):
        oracle.predict(ctx, d.fields["x"][:, 3:, 0], k[:, 3:4])
    with pytest.raises(ValueError, match="max_length must be finite and at least 0.1"):
        TNPGP(max_length=0.05)


def test_switches_and_kernels_are_checked_where_they_are_given():
    for key in ("bias", "out_proj", "attend_self"):
        with pytest.raises(ValueError, match=f"{key} must be True or False, got 'False'"):
            efa.EFAConfig(_fields(), max_len=3, **{key: "False"})

    class NotKernel:
        name = "not_a_kernel"

    with pytest.raises(TypeError, match="must be a subclass of efa.Kernel"):
        efa.register_kernel(NotKernel)
    with pytest.raises(ValueError, match="loc must be a number or None, got '1'"):
        efa.Value("v", Gaussian(), loc="1")
    with pytest.raises(ValueError, match="scale must be a number or None, got True"):
        efa.Value("v", Gaussian(), scale=True)
    with pytest.raises(ValueError, match="readout_hidden must be a tuple"):
        efa.Value("v", Gaussian(), readout_hidden=32.0)


def test_save_and_load_keep_the_dtype_and_refuse_weights_that_are_not_finite(tmp_path):
    from safetensors.torch import load_file, save_file

    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig(_fields(), max_len=3)).double().eval()
    efa.save(model, tmp_path / "m")
    back = efa.load(tmp_path / "m")
    assert next(back.parameters()).dtype == torch.float64
    assert efa.evaluate(back, _data()) == efa.evaluate(model, _data())
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    key = next(k for k, v in state.items() if v.is_floating_point())
    save_file({**state, key: torch.full_like(state[key], float("nan"))},
              str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(ValueError, match=f"tensor '{key}' holds NaN or inf"):
        efa.load(tmp_path / "m")
    save_file({**state, key: state[key].bool()}, str(tmp_path / "m" / "model.safetensors"))
    with pytest.raises(ValueError, match=f"tensor '{key}' is torch.bool"):
        efa.load(tmp_path / "m")
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="holds NaN or inf"):
        efa.save(model, tmp_path / "nan")
    assert not (tmp_path / "nan").exists()


def test_predictions_are_the_eval_modes_and_padding_is_refused():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig(_fields(), max_len=3, dropout=0.5, num_layers=2))
    assert model.training  # a new model trains
    first = model.predict_mean(_data())["y"]
    assert _same(first, model.predict_mean(_data())["y"]) and model.training
    model.eval()
    assert _same(first, model.predict_mean(_data())["y"])
    model.train()
    a = model.predictive(_data(), "y").mean
    assert torch.equal(a, model.predictive(_data(), "y").mean)
    at = torch.tensor([[True, False, False], [False, False, True]])  # (1, 2) is padding
    for call in (lambda: model.predict_mean(_data(), at=at),
                 lambda: model.attention_weights(_data(), at=at)):
        with pytest.raises(ValueError, match="sequence 1, position 2, which is padding"):
            call()
    with pytest.raises(ValueError, match="asks for no position"):
        model.attention_weights(_data(), at=torch.zeros(2, 3, dtype=torch.bool))


def test_scoring_and_fitting_options_are_checked_before_anything_changes():
    torch.manual_seed(0)
    model = efa.EFA(efa.EFAConfig(_fields(), max_len=3))
    for v in ("no", None, 1):
        with pytest.raises(ValueError, match="base_measure must be True or False"):
            efa.evaluate(model, _data(), base_measure=v)
    with pytest.raises(ValueError, match="names no field"):
        efa.evaluate(model, _data(), fields=())
    unset = efa.EFA(efa.EFAConfig([efa.Category("item", 5, dim=4),
                                   efa.Value("y", Gaussian(), dim=4)], max_len=3))
    before = unset.predict_mean(_data())["y"]
    with pytest.raises(ValueError, match="seed must be below 2\\*\\*63"):
        efa.fit(unset, _data(), _data(), seed=2**70, progress=False)
    with pytest.raises(ValueError):
        efa.fit(unset, _data(), _data(), device="cuda:99", progress=False)
    assert _same(unset.predict_mean(_data())["y"], before)  # not standardised


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


def test_analogy_questions_need_their_columns():
    from efa import analogy

    questions = pd.DataFrame({"a": ["man"], "b": ["woman"], "c": ["king"], "d": ["queen"]})
    with pytest.raises(KeyError, match=r"lack the columns \['category', 'group'\]"):
        analogy.accuracy(np.eye(4), ["man", "woman", "king", "queen"], questions)


def test_settings_that_would_be_ignored_are_refused_and_unknown_masks_named():
    with pytest.raises(ValueError, match="warmup_steps=10 warms up the 'cosine' and "
                                         "'constant' schedules; schedule='anneal'"):
        efa.TrainConfig(warmup_steps=10)
    efa.TrainConfig(warmup_steps=10, schedule="cosine")
    with pytest.raises(ValueError, match="proposal='uniform' is the sampled softmax's"):
        efa.TrainConfig(proposal="uniform")
    d = _data()
    with pytest.raises(KeyError, match=r"observed\['zzz'\] names no field"):
        efa.Sequences(d.fields, d.lengths, observed={"zzz": torch.ones(2, 3, dtype=torch.bool)})


def test_impute_fills_missing_cells_only():
    import warnings

    from efa import AttentionTableClassifier

    rng = np.random.RandomState(0)
    X = pd.DataFrame({"a": rng.choice(["x", "y"], 40), "b": rng.choice(["u", "v"], 40)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = AttentionTableClassifier(handle_unknown="unk", missing="mask", max_epochs=2,
                                     random_state=0).fit(X, rng.choice(["A", "B"], 40))
    out = m.impute(pd.DataFrame({"a": ["NEW", None], "b": [None, "u"]}))
    assert out["a"].tolist()[0] == "NEW"  # a level fit never saw is the user's, not missing
    assert out.notna().all().all()


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


def test_a_damaged_auto_mpg_file_is_refused_by_line(tmp_path):
    from efa.datasets.root import data_root
    from efa.datasets.tabular import auto_mpg

    lines = (data_root() / "tabular" / "auto-mpg.csv").read_text().splitlines(True)
    blank = list(lines)
    blank[1] = blank[1][blank[1].index(","):]  # the first row's mpg left empty
    (tmp_path / "a.csv").write_text("".join(blank))
    with pytest.raises(ValueError, match="line 2: column 'mpg' holds nan where a number"):
        auto_mpg(tmp_path / "a.csv")


def test_a_teacher_spec_needs_an_integer_seed():
    from efa.generators.suite import draw

    assert draw(1) == draw(1)
    for seed in (True, 1.0, -1):
        with pytest.raises(ValueError, match="seed must be an integer >= 0"):
            draw(seed)
