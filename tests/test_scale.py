"""Scale: device-agnostic code, sampled positions, data-parallel training, large vocabularies."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.overrides import TorchFunctionMode

import efa
from efa import Attribute, Category, Sequences, Value
from efa.core.families import Gaussian, Poisson
from tests.helpers import make_model, mixed_data

# --------------------------------------------------------------------------- devices

FACTORIES = {torch.arange, torch.eye, torch.zeros, torch.ones, torch.full, torch.empty,
             torch.tensor, torch.as_tensor, torch.rand, torch.randn, torch.randint,
             torch.randperm, torch.linspace}
HOST = {torch.Tensor.cpu, torch.Tensor.numpy}


class DeviceGuard(TorchFunctionMode):
    """Fails on any tensor made without saying where (it would land on the CPU while the
    model is on a GPU) and on any copy to the host: on a CPU-only machine, this is how CI
    proves the model code is device-agnostic."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES and "device" not in kwargs:
            raise AssertionError(f"{func.__name__} without device= in the model's code path")
        if func in HOST:
            raise AssertionError(f"Tensor.{func.__name__} in the model's code path")
        return func(*args, **kwargs)


FIELD_SETS = {
    "category": lambda: [Category("item", 7, dim=4)],
    "value": lambda: [Value("temp", Gaussian(1.5), dim=3, hidden=4)],
    "mixed": None,  # tests.helpers.mixed_fields: attribute, category, two values
    "table": lambda: [Category("item", 7, dim=4, target=False),
                      Value("count", Poisson(shift=1), dim=3, encoder="table", num_values=6)],
    "distinct": lambda: [Category("item", 40, dim=4, distinct=True)],
    "attribute": lambda: [Attribute("where", size=2, dim=3, hidden=5),
                          Value("temp", Gaussian(1.5), dim=3, hidden=4)],
}


def _data_for(name):
    data = mixed_data(n=3)
    if name == "distinct":
        g = torch.Generator().manual_seed(0)
        items = torch.stack([torch.randperm(40, generator=g)[: data.max_len] for _ in range(3)])
        return Sequences({"item": items}, data.lengths)
    keep = {"category": ["item"], "value": ["temp"], "mixed": list(data.fields),
            "table": ["item", "count"], "attribute": ["where", "temp"]}[name]
    return Sequences({k: data.fields[k] for k in keep}, data.lengths,
                     {k: v for k, v in data.observed.items() if k in keep})


@pytest.mark.parametrize("fields,direction,layers,mode", [
    (f, d, layer, m) for f, d, layer, m in itertools.product(
        FIELD_SETS, ["unidirectional", "bidirectional"], [1, 2], ["two_stream", "copies"])
    if not (m == "two_stream" and d == "bidirectional" and layer == 2)
])
def test_every_mode_and_field_kind_is_device_agnostic(fields, direction, layers, mode):
    make = FIELD_SETS[fields]
    model = make_model(fields=make() if make else None, num_layers=layers, direction=direction,
                       mode=mode)
    data = _data_for(fields)
    model.check(data)  # the checks may look at the data on the host; the model may not
    with DeviceGuard():
        loss = model.loss(data)
        loss.backward()
        model.attention_weights(data, model.target_fields[0].name)


def test_devices_are_checked():
    data = mixed_data(n=2)
    with pytest.raises(ValueError, match="does not exist"):
        data.to("cuda:7")
    with pytest.raises(ValueError, match="does not exist"):
        efa.fit(make_model(), data, None, max_epochs=1, progress=False, device="cuda:7")
    moved = data.to("cpu", torch.float32)
    assert moved.fields["temp"].dtype == torch.float32 and moved.device.type == "cpu"


def test_autocast_trains():
    model = make_model(dtype=torch.float32, num_layers=1)
    hist = efa.fit(model, mixed_data(n=4, max_len=4, dtype=torch.float32), None, max_epochs=1,
                   progress=False, autocast="bf16")
    assert all(torch.isfinite(torch.tensor(hist.train_loss)))


# --------------------------------------------------------------------------- sampled positions


def test_sampled_positions_are_an_unbiased_estimate_of_the_exact_objective():
    model = make_model(num_layers=2, direction="bidirectional", mode="copies")
    data = mixed_data(n=4, max_len=5)
    exact = float(model.loss(data))
    counts = {f.name: int(data.predicted(f.name).sum()) for f in model.target_fields}
    from efa.training.steps import sample_positions

    g = torch.Generator().manual_seed(0)
    draws = []
    with torch.no_grad():
        for _ in range(150):
            batch, w = sample_positions(data, 2, g)
            assert (batch.scored_positions().sum(1) <= 2).all()
            draws.append(float(model.loss(batch, weights=w, counts=counts)))
    draws = torch.tensor(draws, dtype=torch.float64)
    se = float(draws.std() / len(draws) ** 0.5)
    assert abs(float(draws.mean()) - exact) < 4 * se
    # m as large as the sequences: the exact objective, every time.
    batch, w = sample_positions(data, 5, g)
    assert float(model.loss(batch, weights=w, counts=counts)) == pytest.approx(exact)


def test_bad_position_counts_are_refused():
    model, data = make_model(), mixed_data(n=4)
    with pytest.raises(ValueError, match="positions must be an integer >= 1"):
        efa.fit(model, data, None, max_epochs=1, positions=0, progress=False)
    with pytest.raises(ValueError, match="more than the sequences hold"):
        efa.fit(model, data, None, max_epochs=1, positions=data.max_len + 1, progress=False)


def test_training_with_sampled_positions_lowers_the_exact_loss():
    torch.manual_seed(0)
    model = make_model(dtype=torch.float32, num_layers=2, direction="bidirectional")
    data = mixed_data(n=32, dtype=torch.float32)
    before = -sum(efa.evaluate(model, data).values())
    efa.fit(model, data, None, max_epochs=15, positions=2, lr=1e-2, progress=False)
    assert -sum(efa.evaluate(model, data).values()) < before - 0.3


def test_the_guard_catches_a_tensor_made_on_the_host():
    with pytest.raises(AssertionError, match="arange without device"), DeviceGuard():
        torch.arange(3)
    with pytest.raises(AssertionError, match="Tensor.cpu"), DeviceGuard():
        torch.ones(2, device="cpu").cpu()


# --------------------------------------------------------------------------- data parallel

DRIVER = r'''
import os, signal, sys, torch
torch.set_num_threads(1)
sys.path.insert(0, {root!r})
import efa
from efa.training import checkpoint as checkpoint_mod, distributed
from tests.helpers import make_model, mixed_data

distributed.init_from_environment()
rank, size = distributed.world()
data = mixed_data(n=16, seed=0)
val = mixed_data(n=6, seed=1)
model = make_model(seed=0, num_layers=2, direction="bidirectional")
if os.environ.get("DIE_AFTER"):  # simulate a kill right after a checkpoint is written
    real, saves = checkpoint_mod.save_state, []
    def dying(*args):
        real(*args)
        saves.append(1)
        if len(saves) == int(os.environ["DIE_AFTER"]):
            os.killpg(os.getpgid(0), signal.SIGKILL)
    checkpoint_mod.save_state = dying
efa.fit(model, data, val, max_epochs=4, batch_size=8, lr=1e-2, seed=3, progress=False,
        checkpoint_dir={ckpt!r})
if rank == 0:
    torch.save(model.state_dict(), {out!r})
'''


def _torchrun(script, env=None):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "--master_port", "29531", str(script)],
        capture_output=True, text=True, timeout=300, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


@pytest.mark.slow
def test_two_gloo_processes_match_one_and_a_killed_run_resumes(tmp_path):
    """float64: Adam's first steps move every weight by about lr·sign(gradient), so in float32
    a gradient component near 0 whose sign depends on the summation order (one process vs an
    all-reduce of two) moves by ±lr; in float64 the two runs agree to ~1e-13."""
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    script = tmp_path / "driver.py"
    out = tmp_path / "two.pt"
    script.write_text(DRIVER.format(root=root, ckpt=str(tmp_path / "ckpt"), out=str(out)))
    killed = _torchrun(script, {"DIE_AFTER": "2"})
    assert killed.returncode != 0 and not out.exists()
    assert (tmp_path / "ckpt" / "checkpoint.safetensors").exists()
    resumed = _torchrun(script)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    two = torch.load(out)
    # One process, the same global batches of 8.
    one = make_model(seed=0, num_layers=2, direction="bidirectional")
    efa.fit(one, mixed_data(n=16, seed=0), mixed_data(n=6, seed=1), max_epochs=4, batch_size=8,
            lr=1e-2, seed=3, progress=False, threads=1)
    for k, v in one.state_dict().items():
        torch.testing.assert_close(two[k], v, atol=1e-5, rtol=0)


def test_world_sizes_that_do_not_divide_the_data_are_refused():
    from efa.training.distributed import check_sizes

    with pytest.raises(ValueError, match="not a multiple of the world size 2"):
        check_sizes(16, 7, 2, False)
    with pytest.raises(ValueError, match="leave a last batch of 5; pass drop_last=True"):
        check_sizes(21, 8, 2, False)
    check_sizes(21, 8, 2, True)
    check_sizes(16, 8, 2, False)


# --------------------------------------------------------------------------- large vocabularies


def test_chunked_log_softmax_is_the_dense_one_with_its_gradient():
    from efa.core.softmax import EXCLUDED, chunked_log_prob

    g = torch.Generator().manual_seed(0)
    h = torch.randn(4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(11, 3, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(11, dtype=torch.float64, generator=g, requires_grad=True)
    y = torch.randint(0, 11, (4,), generator=g)
    rows, items = torch.tensor([0, 0, 3, 2]), torch.tensor([1, 10, 5, 9])
    items = torch.where(items == y[rows], (items + 1) % 11, items)
    dense = h @ w.T + b
    dense = dense.index_put((rows, items), torch.tensor(EXCLUDED, dtype=torch.float64))
    ref = torch.log_softmax(dense, -1)[torch.arange(4), y]
    got = chunked_log_prob(h, w, b, y, 4, (rows, items))
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=0)
    assert torch.autograd.gradcheck(
        lambda h, w, b: chunked_log_prob(h, w, b, y, 4, (rows, items)), (h, w, b))


def test_efa_with_a_chunked_vocabulary_is_exact_in_every_mode():
    for direction, layers, mode in [("unidirectional", 2, "two_stream"),
                                    ("bidirectional", 1, "two_stream"),
                                    ("bidirectional", 2, "copies")]:
        data = _data_for("distinct")
        a = make_model(fields=[Category("item", 40, dim=4, distinct=True)], num_layers=layers,
                       direction=direction, mode=mode)
        b = make_model(fields=[Category("item", 40, dim=4, distinct=True, vocab_chunk=7)],
                       num_layers=layers, direction=direction, mode=mode)
        la, lb = a.loss(data), b.loss(data)
        torch.testing.assert_close(la, lb, atol=1e-10, rtol=0)
        la.backward()
        lb.backward()
        for (k, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
            torch.testing.assert_close(pa.grad, pb.grad, atol=1e-10, rtol=0, msg=k)


def test_unigram_with_distinct_needs_no_dense_logits():
    from efa.baselines import Unigram

    data = _data_for("distinct")
    item = Category("item", 40, distinct=True)
    for direction in ("unidirectional", "bidirectional"):
        model = Unigram.from_data(item, data, direction=direction)
        fast = model.log_likelihood_sums(data)["item"][0]
        dense = super(Unigram, model).log_probs_at(data, {"item": data.predicted("item")})
        torch.testing.assert_close(fast, dense["item"].sum(), atol=1e-4, rtol=0)


def test_sampled_softmax_is_the_corrected_softmax_over_the_samples_and_trains():
    """The negatives' logits minus log(k·Q), the target's as it is, accidental hits removed
    (TensorFlow's sampled_softmax_loss also corrects the target: its normaliser then misses
    the target's term as k grows), and the model it trains improves on the exact likelihood."""
    from efa.core.softmax import sampled_log_prob

    g = torch.Generator().manual_seed(0)
    h = torch.randn(4, 6, dtype=torch.float64, generator=g)
    w = torch.randn(50, 6, dtype=torch.float64, generator=g)
    y = torch.tensor([3, 7, 11, 40])
    q = torch.rand(50, dtype=torch.float64, generator=g) + 0.1
    log_q = (q / q.sum()).log()
    state = g.get_state()
    got = sampled_log_prob(h, w, None, y, 6, log_q, g)
    g.set_state(state)
    neg = torch.multinomial(log_q.exp(), 6, replacement=True, generator=g)
    for r in range(4):
        z = [float(h[r] @ w[y[r]])]
        z += [float(h[r] @ w[j] - log_q[j] - torch.log(torch.tensor(6.0, dtype=torch.float64)))
              for j in neg.tolist() if j != int(y[r])]
        z = torch.tensor(z, dtype=torch.float64)
        assert float(got[r]) == pytest.approx(float(z[0] - torch.logsumexp(z, 0)), abs=1e-10)
    model = make_model(dtype=torch.float32, fields=[Category("item", 40, dim=4, distinct=True)],
                       num_layers=1)
    data = _data_for("distinct").to(torch.float32)
    before = -efa.evaluate(model, data)["item"]
    efa.fit(model, data, None, max_epochs=30, lr=3e-2, sampled_softmax=8, progress=False)
    assert -efa.evaluate(model, data)["item"] < before and not hasattr(model, "sampling")


@pytest.mark.slow
def test_the_device_parity_benchmark_runs_quick_and_writes_nothing():
    """benchmarks/device_parity.py --quick (the CPU against itself): every output it compares
    on a GPU is computed, each difference is zero, and no result file is written."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    before = sorted((root / "results" / "scale").iterdir())
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "device_parity.py"),
                          "--quick"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("{'output'")]
    assert len(rows) == 11
    assert all("difference': 0.0" in r or "differing': 0.0" in r for r in rows), rows
    assert sorted((root / "results" / "scale").iterdir()) == before


@pytest.mark.slow
def test_the_bucketing_benchmark_runs_quick_and_writes_nothing():
    """benchmarks/bucketing.py --quick: the committed benchmark's code path on 1,000 Instacart
    baskets (real data, through the one data root), printed only."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    committed = (root / "results" / "bucketing" / "benchmark.json").read_text()
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "bucketing.py"), "--quick",
                          "--seeds", "0", "--buckets", "4"], capture_output=True, text=True,
                         timeout=300, cwd=root,
                         env={**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| 0 | 4 | 2 |" in run.stdout and "bucket 4: speed-up" in run.stdout
    assert (root / "results" / "bucketing" / "benchmark.json").read_text() == committed
