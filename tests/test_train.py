import json
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import efa
from efa.training import checkpoint as checkpoint_mod
from efa.training import steps as steps_mod
from efa.training import train as train_mod
from tests.helpers import (
    item_rows,
    item_value_data,
    item_value_model,
    make_model,
    mixed_data,
    one_item_config,
)


def _data(n=40, seed=0):
    return mixed_data(n=n, seed=seed, dtype=torch.float32)


def _model(seed=0, **kw):
    return make_model(seed=seed, dtype=torch.float32, num_layers=1, **kw)


def test_same_seed_same_numbers():
    runs = []
    for _ in range(2):
        model = _model()
        hist = efa.fit(model, _data(), _data(seed=1), max_epochs=3, seed=5, progress=False)
        runs.append((hist.train_loss, hist.val_loss, efa.evaluate(model, _data(seed=2))))
    assert runs[0] == runs[1]


def test_early_stopping_restores_best_weights():
    model = _model()
    hist = efa.fit(
        model,
        _data(),
        _data(seed=1),
        lr=0.05,
        max_epochs=60,
        patience=3,
        schedule="constant",
        progress=False,
    )
    assert hist.epochs_run < 60 and hist.best_epoch < hist.epochs_run - 1
    val = -sum(efa.evaluate(model, _data(seed=1)).values())
    assert val == pytest.approx(hist.best_val, abs=1e-5)
    assert val < hist.val_loss[-1]


def _stalled(val_loss, min_delta):
    """Per epoch, whether it failed to improve on the best so far by min_delta."""
    best, out = float("inf"), []
    for v in val_loss:
        out.append(not v < best - min_delta)
        best = v if not out[-1] else best
    return out


@pytest.mark.parametrize("batch_size, window", [(2, 1), (None, 6)])
def test_anneal_halves_the_rate_on_every_failed_stall_test_and_stops_after_patience(
        batch_size, window):
    """A stall test is one validation epoch when an epoch takes ≥ 16 steps (40 sequences in
    batches of 2), else enough epochs in a row to cover 16 steps (the default batch of 16
    gives 3 steps per epoch: 6 epochs); the rate halves after each failed test and, with
    patience left unset, the fit stops after 3 tests' worth of stalled epochs in a row."""
    from efa.training.settings import default_patience, stall_window

    assert [stall_window(s) for s in (1, 3, 5, 15, 16, 200)] == [16, 6, 4, 2, 1, 1]
    assert default_patience(3) == 18 and default_patience(16) == 3
    model = _model()
    hist = efa.fit(model, _data(), _data(seed=1), lr=0.05, max_epochs=150, min_delta=1e-3,
                   batch_size=batch_size, progress=False)  # the default schedule, "anneal"
    assert hist.patience == 3 * window
    stalled = _stalled(hist.val_loss, 1e-3)
    assert any(stalled) and not all(stalled)
    rate, run = 0.05, 0
    for lr, stall in zip(hist.lr, stalled, strict=True):
        run = run + 1 if stall else 0
        if run == window:
            rate, run = rate / 2, 0
        assert lr == pytest.approx(rate, rel=1e-12)
    p = hist.patience
    assert hist.epochs_run < 150 and stalled[-p:] == [True] * p and not any(
        all(stalled[k:k + p]) for k in range(len(stalled) - p))


def test_plateau_steps_wait_longer_only_while_the_loss_has_not_left_the_first_epochs(capsys):
    """patience_now: plateau_steps' worth of epochs (rounded up, at least patience) while the
    best validation loss is within plateau_tol of the first epoch's, patience once below; a fit
    stops at the first stalled run as long as the rule in force then, and says what it chose."""
    from efa.training.settings import History, patience_now

    cfg = efa.TrainConfig(patience=2, plateau_steps=100, plateau_tol=0.02)
    on, off = History(val_loss=[1.0, 0.99, 0.995], best_val=0.99), History(
        val_loss=[1.0, 0.97, 0.98], best_val=0.97)
    assert patience_now(cfg, on, 20) == 5 and patience_now(cfg, off, 20) == 2
    assert patience_now(cfg, on, 200) == 2  # 100 steps are less than 2 epochs
    assert patience_now(efa.TrainConfig(patience=2), on, 20) == 2
    for tol, p in ((1e9, 5), (0.0, 2)):  # always on the plateau / off it after the first gain
        hist = efa.fit(_model(), _data(n=400), _data(n=200, seed=1), lr=1e-3, max_epochs=150,
                       patience=2, plateau_steps=100, plateau_tol=tol, min_delta=1e-3,
                       batch_size=20, schedule="constant", progress=True)  # 20 steps an epoch
        assert hist.plateau_patience == 5 and hist.stopped == "patience"
        assert "efa.fit chose patience=5 on the first plateau (100 steps' worth) for 400 " \
            "training sequences (20 steps per epoch" in capsys.readouterr().err
        stalled = _stalled(hist.val_loss, 1e-3)
        assert stalled[-p:] == [True] * p and not any(
            all(stalled[k:k + p]) for k in range(len(stalled) - p))
    with pytest.raises(ValueError, match="plateau_steps"):
        efa.TrainConfig(plateau_steps=0)
    with pytest.raises(ValueError, match="plateau_tol"):
        efa.TrainConfig(plateau_tol=-1.0)


def test_plateau_keeps_its_rule():
    # "plateau" halves after max(1, patience // 3) + 1 stalled epochs in a row, PyTorch's
    # relative threshold of 1e-4 (the committed experiments that name it were made with it)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    _, plateau = steps_mod.scheduler(opt, efa.TrainConfig(schedule="plateau", patience=4), 1)
    rates = []
    for v in (1.0, 0.99995, 0.99995, 0.5, 0.6, 0.7):
        plateau.step(v)
        rates.append(opt.param_groups[0]["lr"])
    assert rates == [1.0, 1.0, 0.5, 0.5, 0.5, 0.25]


def test_checkpoint_resumes_after_a_kill(tmp_path, monkeypatch):
    cfg = efa.TrainConfig(max_epochs=5, patience=5, seed=3, progress=False,
                          checkpoint_dir=str(tmp_path))
    reference = _model()
    ref_hist = efa.fit(
        reference, _data(), _data(seed=1), cfg.__class__(**{**cfg.__dict__, "checkpoint_dir": None})
    )

    saves = []
    real_save = checkpoint_mod.save_state

    def dying_save(*args):
        real_save(*args)
        saves.append(1)
        if len(saves) == 2:
            raise KeyboardInterrupt  # the process is killed after epoch 2

    monkeypatch.setattr(checkpoint_mod, "save_state", dying_save)
    with pytest.raises(KeyboardInterrupt):
        efa.fit(_model(), _data(), _data(seed=1), cfg)
    monkeypatch.setattr(checkpoint_mod, "save_state", real_save)
    # another initialisation (a seed sweep into one folder) is another run: refused (#32.5)
    with pytest.raises(ValueError, match="another initialisation.*another seed"):
        efa.fit(_model(seed=99), _data(), _data(seed=1), cfg)
    resumed = _model()  # the same model as the killed run's: it resumes
    hist = efa.fit(resumed, _data(), _data(seed=1), cfg)
    assert hist.epochs_run == 5
    assert hist.val_loss == pytest.approx(ref_hist.val_loss, abs=1e-6)
    for a, b in zip(reference.state_dict().values(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_checkpoint_with_other_settings_is_refused(tmp_path):
    efa.fit(_model(), _data(), None, max_epochs=1, progress=False, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError,
                       match="another training settings.*lr: 0.006 in the checkpoint, 0.1 now"):
        efa.fit(
            _model(),
            _data(),
            None,
            max_epochs=1,
            lr=0.1,
            progress=False,
            checkpoint_dir=str(tmp_path),
        )


def test_save_load_round_trip(tmp_path):
    model = _model()
    efa.fit(model, _data(), None, max_epochs=2, progress=False)
    path = efa.save(model, tmp_path / "m")
    loaded = efa.load(path)
    data = _data(seed=3)
    for name, eta in model.natural_params(data).items():
        torch.testing.assert_close(loaded.natural_params(data)[name], eta, equal_nan=True)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        efa.save(model, path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        efa.load(tmp_path / "nothing")


def test_non_finite_loss_is_an_error_not_a_nan():
    model = _model()
    with torch.no_grad():
        model.readouts["temp"].net.weight.fill_(float("inf"))
    model.standardise(_data())  # what fit does first (Value fields without loc/scale)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(FloatingPointError,
                       match=r"non-finite log-likelihood .* 'temp' at sequence \d+, position 0"):
        efa.fit(model, _data(), None, max_epochs=1, progress=False)
    # The model is handed back as it was (its initial weights here), in eval mode.
    assert not model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], equal_nan=True)


def test_mean_squared_error_and_predictions():
    model = _model()
    data = _data()
    y, mu = efa.predictions(model, data, "temp")
    assert y.shape == mu.shape == (int(data.predicted("temp").sum()),)
    assert efa.mean_squared_error(model, data, "temp") == pytest.approx(
        float(((y - mu) ** 2).mean())
    )


def test_fit_standardises_a_copy_not_the_users_fields():
    from tests.helpers import make_model, mixed_fields

    fields = mixed_fields()
    model = make_model(dtype=torch.float32, fields=fields, num_layers=1)
    efa.fit(model, _data(), None, max_epochs=1, progress=False)
    temp = model.field("temp")
    y = _data().fields["temp"][_data().valid() & _data().observed["temp"]].double()
    assert temp.loc == pytest.approx(float(y.mean())) and temp.scale == pytest.approx(
        float(y.std()))
    assert fields[3].loc is None and fields[3].scale is None  # the user's field is untouched
    other = make_model(dtype=torch.float32, fields=fields, num_layers=1)
    efa.fit(other, _data(seed=4), None, max_epochs=1, progress=False)
    assert other.field("temp").loc != temp.loc  # standardised on its own training data


def test_monitor_stops_on_the_named_fields_only():
    """monitor=(f,): the validation loss that early stopping reads is f's mean negative
    log-likelihood alone (training still fits every field); unknown names are refused."""
    model = _model()
    names = [f.name for f in model.target_fields]
    assert len(names) > 1
    val = _data(seed=1)
    hist = efa.fit(model, _data(), val, max_epochs=1, progress=False, monitor=(names[0],))
    lls = efa.evaluate(model, val)
    assert hist.best_val == pytest.approx(-lls[names[0]], abs=1e-6)
    assert hist.best_val != pytest.approx(-sum(lls.values()), abs=1e-3)
    assert set(efa.evaluate(model, val, fields=(names[0],))) == {names[0]}
    with pytest.raises(ValueError, match="not target fields"):
        efa.fit(_model(), _data(), val, max_epochs=1, progress=False, monitor=("nope",))
    with pytest.raises(ValueError, match=r"\['nope'\] are not target fields"):
        efa.evaluate(model, val, fields=("nope",))
    with pytest.raises(ValueError, match="tuple of field names"):
        efa.TrainConfig(monitor=names[0])


class _Payload:
    def __reduce__(self):
        return (Path.touch, (Path(os.environ["EFA_TEST_PWNED"]),))


def test_checkpoint_is_tied_to_model_and_data(tmp_path):
    efa.fit(_model(), _data(20), None, max_epochs=1, progress=False, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="another data"):
        efa.fit(_model(), _data(20, seed=7), None, max_epochs=1, progress=False,
                checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="another model"):
        efa.fit(_model(num_heads=1), _data(20), None, max_epochs=1, progress=False,
                checkpoint_dir=str(tmp_path))
    # The explicit way to start over.
    hist = efa.fit(_model(), _data(20, seed=7), None, max_epochs=1, progress=False,
                   checkpoint_dir=str(tmp_path), resume=False)
    assert hist.epochs_run == 1


def test_failed_fit_leaves_usable_weights():
    """A run that blows up in its second epoch hands back the best weights so far."""
    data, val = _data(20), _data(20, seed=1)
    reference = _model()
    with pytest.warns(efa.training.train.StillImproving):
        efa.fit(reference, data, val, max_epochs=1, batch_size=10, progress=False)
    calls = []

    class Diverging(type(reference)):
        def loss(self, batch, check=False):
            calls.append(1)
            out = super().loss(batch, check)
            return out * float("nan") if len(calls) == 3 else out  # epoch 1, first batch

    model = _model()
    model.__class__ = Diverging
    with pytest.raises(FloatingPointError, match="at epoch 1"):
        efa.fit(model, data, val, max_epochs=3, batch_size=10, progress=False)
    assert not model.training
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, reference.state_dict()[k])


def test_no_progress_bar_in_logs(capfd):
    efa.fit(_model(), _data(20), None, max_epochs=2, progress=True)
    assert "fit:" not in capfd.readouterr().err  # stderr is not a terminal here


def test_threads_setting():
    before = torch.get_num_threads()
    seen = []

    class Spy(type(_model())):
        def loss(self, data, check=False):
            seen.append(torch.get_num_threads())
            return super().loss(data, check)

    model = _model()
    model.__class__ = Spy
    efa.fit(model, _data(20), None, max_epochs=1, progress=False, threads=2)
    assert set(seen) == {2} and torch.get_num_threads() == before


def test_checkpoints_are_not_pickles(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EFA_TEST_PWNED", str(marker))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    with open(folder / "checkpoint.pt", "wb") as f:
        pickle.dump({"model": _Payload()}, f)
    with pytest.raises(ValueError, match="pickled checkpoint .* not loaded"):
        efa.fit(_model(), _data(20), None, max_epochs=1, progress=False,
                checkpoint_dir=str(folder))
    assert not marker.exists()
    efa.fit(_model(), _data(20), None, max_epochs=1, progress=False, checkpoint_dir=str(folder),
            resume=False)
    assert (folder / "checkpoint.safetensors").exists() and not marker.exists()


@pytest.mark.parametrize("tamper", ["no optimizer", "history a list", "no rng tensor",
                                    "metadata a list", "fingerprint a string"])
def test_a_tampered_checkpoint_is_a_clear_error_and_changes_nothing(tmp_path, tamper):

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    import efa
    from efa.training import checkpoint
    from tests.helpers import make_model, mixed_data

    data = mixed_data(n=20, seed=0, dtype=torch.float32)
    efa.fit(make_model(seed=0, dtype=torch.float32, num_layers=1), data, None, max_epochs=1,
            progress=False, checkpoint_dir=str(tmp_path))
    path = tmp_path / checkpoint.FILE
    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()[checkpoint.KEY])
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    if tamper == "no optimizer":
        del meta["optimizer"]
    elif tamper == "history a list":
        meta["history"] = [1, 2]
    elif tamper == "no rng tensor":
        del tensors["rng/sampler"]
    elif tamper == "metadata a list":
        meta = [meta]
    else:
        meta["fingerprint"] = "x"
    save_file(tensors, str(path), metadata={checkpoint.KEY: json.dumps(meta)})
    model = make_model(seed=0, dtype=torch.float32, num_layers=1)
    model.standardise(data)  # what fit does first, before it reads the checkpoint
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=str(path)):
        efa.fit(model, data, None, max_epochs=2, progress=False, checkpoint_dir=str(tmp_path))
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_time_limit_stops_before_an_epoch_that_would_end_after_it():
    """The first epoch always runs; with a budget shorter than one epoch no second one starts.
    The best epoch is restored and a warning says so."""
    model = _model()
    with pytest.warns(train_mod.TimeLimitReached, match="time limit of 1e-06 s after 1 epochs"):
        hist = efa.fit(model, _data(), _data(seed=1), max_epochs=50, time_limit=1e-6,
                       progress=False)
    assert (hist.epochs_run, hist.stopped) == (1, "time_limit")
    no_val = efa.fit(_model(), _data(), None, max_epochs=50, time_limit=1e-6, progress=False)
    assert no_val.epochs_run == 1
    assert efa.fit(_model(), _data(), None, max_epochs=2, progress=False).stopped == "max_epochs"
    for bad in (0, -1, float("inf"), float("nan"), True, "60"):
        with pytest.raises(ValueError, match="time_limit must be None or a finite number"):
            efa.TrainConfig(time_limit=bad)


def test_a_fit_never_ends_worse_on_validation_than_its_start():
    """Start at a fitted model and take steps far too large: every epoch is worse on
    validation, so the starting weights are kept (and a warning says so). (Validation is the
    training data here: random data have nothing else to learn.)"""
    model = _model()
    efa.fit(model, _data(), _data(), max_epochs=30, progress=False)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    score = -sum(efa.evaluate(model, _data()).values())
    with pytest.warns(train_mod.StartKept, match="they are kept"):
        hist = efa.fit(model, _data(), _data(), lr=0.3, schedule="constant",
                       max_epochs=3, progress=False)
    assert min(hist.val_loss) > hist.start_val == pytest.approx(score, abs=1e-6)
    assert (hist.best_epoch, hist.best_val) == (-1, hist.start_val)
    assert all(torch.equal(start[k], v) for k, v in model.state_dict().items())
    # from a random start the epochs improve: the best epoch is restored, not the start
    fresh = efa.fit(_model(), _data(), _data(), max_epochs=3, progress=False)
    assert fresh.best_epoch >= 0 and fresh.best_val < fresh.start_val


def _bag_logit_data(n, seed, K=6, L=6):
    """Sequences whose true model is the causal multinomial logit on context counts:
    x_i ~ softmax(b + Σ_{j<i} U[x_j]) (float64 draws, a fixed U and b)."""
    g = torch.Generator().manual_seed(123)
    U, b = torch.randn(K, K, generator=g, dtype=torch.float64), torch.randn(K, generator=g,
                                                                           dtype=torch.float64)
    g.manual_seed(seed)
    x = torch.zeros(n, L, dtype=torch.long)
    for i in range(L):
        logits = b + torch.nn.functional.one_hot(x[:, :i], K).double().sum(1) @ U
        x[:, i] = torch.multinomial(logits.softmax(-1), 1, generator=g)[:, 0]
    return efa.Sequences({"item": x}, torch.full((n,), L))


def test_fit_glm_first_starts_at_the_bag_logit_and_never_ends_worse(monkeypatch):
    """With the read-out weights of glm_part() at 0 the model is the multinomial logit on
    context counts exactly (logits b + Σ_{j<i} U[x_j], against a hand computation in float64);
    stage 1 moves only that logit's parameters; stage 2 starts at its fit and ends no worse on
    validation."""
    train, val = _bag_logit_data(400, 0), _bag_logit_data(200, 1)
    cfg = efa.EFAConfig([efa.Category("item", 6, bag=True, readout_bias=True)], max_len=6,
                        direction="unidirectional", num_heads=2)
    torch.manual_seed(0)
    model = efa.EFA(cfg).double()
    params, zero = model.glm_part()
    assert {id(p) for p in params} == {id(model.bags["item"]),
                                       id(model.readouts["item"].net.bias)}
    assert [id(w) for w in zero] == [id(model.readouts["item"].net.weight)]
    with torch.no_grad():
        model.bags["item"].normal_()
        model.readouts["item"].net.bias.normal_()
        zero[0].zero_()
    U = model.field("item").bag_table(model.bags["item"]).detach()
    x = torch.nn.functional.one_hot(val.fields["item"], 6).double()
    at = val.valid()
    want = model.readouts["item"].net.bias.detach() + (x.cumsum(1) - x)[at] @ U
    got = model.natural_params_at(val, {"item": at})["item"]
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)

    torch.manual_seed(0)
    model = efa.EFA(cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    after_first = {}
    real_fit = train_mod.fit

    def spy(m, *args, **kw):
        hist = real_fit(m, *args, **kw)
        if not after_first:
            after_first.update({n: p.detach().clone() for n, p in m.named_parameters()})
        return hist

    monkeypatch.setattr(train_mod, "fit", spy)
    first, second = efa.fit_glm_first(model, train, val, max_epochs=3, progress=False)
    moved = {n for n, p in after_first.items() if not torch.equal(p, before[n])}
    assert moved == {"bags.item", "readouts.item.net.bias", "readouts.item.net.weight"}
    assert float(after_first["readouts.item.net.weight"].abs().max()) == 0  # set to 0, kept
    assert all(p.requires_grad for p in model.parameters())
    assert second.start_val == pytest.approx(first.best_val, abs=1e-6)
    assert second.best_val <= second.start_val
    with pytest.raises(ValueError, match="contains no GLM to fit first"):
        train_mod.fit_glm_first(_model(), _data(), None, max_epochs=1, progress=False)


def test_a_model_with_a_scalar_parameter_fits_and_checkpoints(tmp_path):
    """A learned σ is a 0-dim parameter: fingerprinting the weights (every fit does) and
    checkpointing them used to fail on it ("self.dim() cannot be 0 to view Float as Byte")."""
    from efa.core.families import LearnedGaussian

    g = torch.Generator().manual_seed(0)
    data = efa.Sequences({"y": torch.randn(30, 4, generator=g)}, torch.full((30,), 4))
    model = efa.EFA(efa.EFAConfig([efa.Value("y", LearnedGaussian(2.0))], max_len=4))
    hist = efa.fit(model, data, data, max_epochs=2, progress=False,
                   checkpoint_dir=str(tmp_path / "ck"))
    assert hist.epochs_run == 2 and float(model.field("y").family.sigma) != 2.0
    assert checkpoint_mod.weights_fingerprint({"s": torch.tensor(1.0)}) != \
        checkpoint_mod.weights_fingerprint({"s": torch.tensor(2.0)})


def test_the_default_batch_size_follows_the_data(capsys):
    """256 sequences per step from 4,096 training sequences on; below, the largest power of two
    ≤ n/16 (at least 16), so an epoch has at least 16 steps; a multiple of the world size."""
    from efa.training.settings import default_batch_size

    assert [default_batch_size(n) for n in (10, 150, 512, 800, 4095, 4096, 50_000)] == \
        [16, 16, 32, 32, 128, 256, 256]
    assert default_batch_size(800, world=3) == 30 and default_batch_size(10, world=32) == 32
    data = efa.Sequences.from_lists({"x": [[i % 5, (i + 1) % 5] for i in range(40)]})
    model = efa.EFA(efa.EFAConfig([efa.Category("x", 5)], max_len=2))
    hist = efa.fit(model, data, max_epochs=1, progress=True, threads=1)
    assert hist.batch_size == 16  # recorded, and said once
    assert capsys.readouterr().err.count("chose batch_size=16 for 40 training sequences") == 1
    hist = efa.fit(model, data, data, max_epochs=1, progress=True, threads=1)
    assert (hist.batch_size, hist.patience) == (16, 18)  # 3 steps per epoch: 6-epoch tests
    assert "chose batch_size=16 and patience=18 for 40" in capsys.readouterr().err
    hist = efa.fit(model, data, max_epochs=1, batch_size=8, progress=True, threads=1)
    assert hist.batch_size == 8 and "chosen" not in capsys.readouterr().err
    with pytest.raises(ValueError, match="batch_size"):
        efa.TrainConfig(batch_size=0)


@pytest.mark.parametrize("n, drop_last", [(1000, False), (1000, True), (1024, False)])
def test_bucketed_batches_hold_every_sequence_once_sorted_within_windows(n, drop_last):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 30, (n,), generator=g)
    order = torch.randperm(n, generator=g)
    n_batches = n // 64 if drop_last else -(-n // 64)
    got = steps_mod.batches(order, lengths, 64, n_batches, 4, torch.Generator().manual_seed(1))
    assert len(got) == n_batches
    seen = torch.cat(got)
    assert len(set(seen.tolist())) == len(seen)  # nothing twice
    assert len(seen) == (n_batches * 64 if drop_last else n)
    # each window of 4 · 64 of the order, sorted by length, is cut into the same batches
    window = order[:256][torch.sort(lengths[order[:256]], descending=True, stable=True).indices]
    firsts = {tuple(b.tolist()) for b in got}
    assert all(tuple(window[k : k + 64].tolist()) in firsts for k in range(0, 256, 64))
    pad = sum(len(b) * int(lengths[b].max()) for b in got)
    plain = steps_mod.batches(order, lengths, 64, n_batches, None, g)
    assert pad < sum(len(b) * int(lengths[b].max()) for b in plain)
    # without bucket: the shuffled order's slices, no draw from the generator
    state = g.get_state()
    assert torch.equal(torch.cat(steps_mod.batches(order, lengths, 64, n_batches, None, g)),
                       order[: len(torch.cat(plain))])
    assert torch.equal(g.get_state(), state)


def test_a_bucketed_fit_is_reproducible():
    runs = []
    for _ in range(2):
        model = _model()
        hist = efa.fit(model, _data(), _data(seed=1), max_epochs=3, seed=5, progress=False,
                       batch_size=8, bucket=2)
        runs.append((hist.train_loss, hist.val_loss))
    assert runs[0] == runs[1]
    plain = efa.fit(_model(), _data(), _data(seed=1), max_epochs=3, seed=5, progress=False,
                    batch_size=8)
    assert plain.train_loss != runs[0][0]  # another batching, another path
    with pytest.raises(ValueError, match="bucket"):
        efa.TrainConfig(bucket=0)


def test_a_checkpoint_older_than_a_setting_resumes_at_its_default(tmp_path, monkeypatch):
    """A checkpoint written before TrainConfig had a setting (here: one whose saved settings
    lack "bucket") resumes a fit that leaves it at its default, and refuses one that sets it."""
    first = efa.fit(_model(), _data(), None, max_epochs=2, progress=False,
                    checkpoint_dir=str(tmp_path))
    real_load = checkpoint_mod.load

    def older(folder):
        state = real_load(folder)
        del state[1]["fingerprint"]["settings"]["bucket"]
        return state

    monkeypatch.setattr(checkpoint_mod, "load", older)
    hist = efa.fit(_model(), _data(), None, max_epochs=2, progress=False,
                   checkpoint_dir=str(tmp_path))
    assert hist.train_loss == first.train_loss  # the finished run resumed, nothing retrained
    with pytest.raises(ValueError, match="bucket: null in the checkpoint, 2 now"):
        efa.fit(_model(), _data(), None, max_epochs=2, progress=False, bucket=2,
                checkpoint_dir=str(tmp_path))


def test_history_records_each_epochs_wall_time():
    hist = efa.fit(_model(), _data(), _data(seed=1), max_epochs=3, patience=3, progress=False)
    assert len(hist.epoch_seconds) == hist.epochs_run == 3
    assert all(t > 0 for t in hist.epoch_seconds)
    assert sum(hist.epoch_seconds) <= hist.seconds + 1e-6


def test_numpy_numbers_are_taken_as_settings():
    cfg = efa.TrainConfig(seed=np.int64(3), lr=np.float32(1e-3), batch_size=np.int64(16),
                          max_epochs=np.int32(2), time_limit=np.int64(30))
    assert type(cfg.seed) is int and type(cfg.lr) is float and type(cfg.batch_size) is int
    assert type(cfg.max_epochs) is int and type(cfg.time_limit) is int
    torch.manual_seed(0)
    efa.fit(efa.EFA(one_item_config()), item_rows(), None, seed=np.int64(3), max_epochs=np.int64(1),
            progress=False)


def test_a_half_precision_model_is_refused_with_the_way_to_train_it():
    with pytest.raises(ValueError, match="autocast='fp16'"):
        efa.fit(efa.EFA(one_item_config()).half(), item_rows(), None, max_epochs=1, progress=False)


def test_the_warnings_count_the_best_epoch_as_the_history_does():
    torch.manual_seed(0)
    ones = efa.Sequences.from_lists({"item": [[1, 1, 1, 1]] * 40})  # quickly learnt
    with pytest.warns(efa.training.settings.StillImproving,
                      match=r"epoch 2 counted from 1, best_epoch=1"):
        h = efa.fit(efa.EFA(one_item_config()), ones, ones[:10], max_epochs=2, lr=0.01,
                    progress=False)
    assert h.best_epoch == 1


def test_fit_warns_of_a_fixed_sigma_far_from_the_data_and_of_float32_far_from_zero():
    from efa.core.families import Gaussian, HeteroscedasticGaussian
    with pytest.warns(UserWarning, match="fixed sigma 1"):
        item_value_model(Gaussian()).standardise(item_value_data(scale=1e3))
    with pytest.warns(UserWarning, match="resolve them to about 1"):
        item_value_model(HeteroscedasticGaussian()).standardise(item_value_data(offset=1e7))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        item_value_model(HeteroscedasticGaussian()).standardise(item_value_data(scale=1e5))
        item_value_model(HeteroscedasticGaussian()).double().standardise(item_value_data(offset=1e7))
