"""efa.fit_restarts: several initial draws, the lowest validation loss kept."""

import pytest
import torch

import efa
from efa.training.restarts import Restarts
from tests.helpers import item_rows, mixed_data, mixed_fields, one_item_config

CONFIG = efa.EFAConfig(mixed_fields(), num_layers=1, num_heads=2, head_dim=3, max_len=8)
FIT = {"max_epochs": 3, "progress": False}


def _build():
    return efa.EFA(CONFIG)


def _data(n=40, seed=0):
    return mixed_data(n=n, seed=seed, dtype=torch.float32)


def test_restarts_keep_the_lowest_validation_loss_and_equal_the_hand_written_loop():
    """Each restart is the fit a user would write by hand (torch.manual_seed(seed + k), build,
    fit), bit for bit; the kept one has the lowest best validation loss; the caller's random
    state is left as it was."""
    train, val, test = _data(), _data(seed=1), _data(seed=2)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    result = efa.fit_restarts(_build, train, val, restarts=3, seed=10, **FIT)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert isinstance(result, Restarts)
    assert result.seeds == [10, 11, 12] and len(result.histories) == 3
    by_hand = []
    for s in result.seeds:
        torch.manual_seed(s)
        model = _build()
        by_hand.append((efa.fit(model, train, val, **FIT), model))
    for got, (want, _) in zip(result.histories, by_hand, strict=True):
        assert (got.train_loss, got.val_loss, got.best_val) == (
            want.train_loss, want.val_loss, want.best_val)
    vals = [h.best_val for h in result.histories]
    assert len(set(vals)) == 3  # the draws differ, so the choice means something
    assert result.best == vals.index(min(vals))
    assert result.history is result.histories[result.best]
    assert efa.evaluate(result.model, test) == efa.evaluate(by_hand[result.best][1], test)
    assert -sum(efa.evaluate(result.model, val).values()) == pytest.approx(min(vals), abs=1e-6)


def test_one_restart_is_one_fit_and_checkpoints_go_to_a_folder_per_restart(tmp_path):
    train, val = _data(), _data(seed=1)
    one = efa.fit_restarts(_build, train, val, restarts=1, seed=4, **FIT)
    torch.manual_seed(4)
    model = _build()
    hist = efa.fit(model, train, val, **FIT)
    assert one.best == 0 and one.history.val_loss == hist.val_loss
    folder = tmp_path / "ck"
    first = efa.fit_restarts(_build, train, val, restarts=2, checkpoint_dir=str(folder), **FIT)
    assert sorted(p.name for p in folder.iterdir()) == ["restart0", "restart1"]
    again = efa.fit_restarts(_build, train, val, restarts=2, checkpoint_dir=str(folder), **FIT)
    assert [h.val_loss for h in again.histories] == [h.val_loss for h in first.histories]


def test_bad_requests_are_refused(tmp_path):
    train, val = _data(), _data(seed=1)
    with pytest.raises(ValueError, match="on validation data: pass val"):
        efa.fit_restarts(_build, train, None, **FIT)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="restarts must be an integer >= 1"):
            efa.fit_restarts(_build, train, val, restarts=bad, **FIT)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        efa.fit_restarts(_build, train, val, seed=-1, **FIT)
    with pytest.raises(TypeError, match="build must be a callable"):
        efa.fit_restarts(_build(), train, val, **FIT)
    with pytest.raises(TypeError, match="returned dict, not a model"):
        efa.fit_restarts(lambda: {}, train, val, **FIT)
    model = _build()
    with pytest.raises(ValueError, match="returned a model it had returned before"):
        efa.fit_restarts(lambda: model, train, val, restarts=2, **FIT,
                         checkpoint_dir=str(tmp_path / "none"))
    assert not (tmp_path / "none").exists()

    def seeded():  # a build that sets its own seed draws the same weights every restart
        torch.manual_seed(0)
        return _build()

    with pytest.raises(ValueError, match="restart 1's model starts from the same weights as "
                                         "restart 0: build.. must draw them"):
        efa.fit_restarts(seeded, train, val, restarts=2, **FIT,
                         checkpoint_dir=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()  # refused before any fit began
    with pytest.raises(TypeError, match="unknown settings"):
        efa.fit_restarts(_build, train, val, epochs=3)


def test_restarts_with_dropout_repeat_whatever_the_callers_random_state():
    train, val = item_rows(60, 0), item_rows(20, 1)
    runs = []
    for noise in (1, 2):
        torch.manual_seed(noise)  # the caller's state before the call
        r = efa.fit_restarts(lambda: efa.EFA(one_item_config(dropout=0.3)), train, val, restarts=2,
                             seed=0, max_epochs=2, progress=False)
        runs.append([h.best_val for h in r.histories])
    assert runs[0] == runs[1]


def test_restarts_leave_the_callers_random_state_as_it_was():
    train, val = item_rows(40, 0), item_rows(10, 1)
    torch.manual_seed(5)
    before = torch.get_rng_state()
    efa.fit_restarts(lambda: efa.EFA(one_item_config(dropout=0.3)), train, val, restarts=2, seed=0,
                     max_epochs=1, progress=False)
    assert torch.equal(torch.get_rng_state(), before)
