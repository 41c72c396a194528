"""Hostile probes of the efa library (the fresh round of issue #32, session 15).

Each probe is a small function registered with an id, an area, the exact call it makes and
an expectation. Kinds:

- "err":    the call must raise an error whose message names what is wrong (the ``needles``,
            case-insensitive, all present) -> OK-clear-error; an error without them ->
            UNHELPFUL-crash; no error -> SILENT-WRONG (the input was accepted).
- "works":  the probe computes and checks a result and returns (ok, detail): ok ->
            OK-works, not ok -> SILENT-WRONG; an exception -> UNHELPFUL-crash.
- "either": a clear error (needles) or a verified result are both fine.
- "sec":    returns (safe, detail); not safe -> SECURITY; a refusal with needles -> OK.

Run: .venv/bin/python tests/probes/hostile_round3.py -> $EFA_PROBES/results.json (default
/tmp/probes; a summary on stdout); then tests/probes/make_summary.py writes summary.md there.
Everything is written under $EFA_PROBES/work; nothing in the checkout is touched.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import torch

torch.set_num_threads(1)
os.environ.setdefault("EFA_WORKERS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's experiments/

import efa  # noqa: E402
from efa.core import families as fam  # noqa: E402
from efa.core.data import Sequences  # noqa: E402
from efa.core.fields import Attribute, Category, Value  # noqa: E402

OUT = Path(os.environ.get("EFA_PROBES", "/tmp/probes"))  # results.json goes here
WORK = OUT / "work"
shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
EFA_BIN = "/work/main/.venv/bin/efa"
PY = "/work/main/.venv/bin/python"

OK_ERR, OK_WORKS, UNHELPFUL, SILENT, SECURITY = (
    "OK-clear-error", "OK-works", "UNHELPFUL-crash", "SILENT-WRONG", "SECURITY")

PROBES: list[dict] = []
_counts: dict[str, int] = {}


def add(area, call, fn, kind="err", needles=(), should="", fix=""):
    _counts[area] = _counts.get(area, 0) + 1
    PROBES.append(dict(id=f"{area}-{_counts[area]:03d}", area=area, call=call, fn=fn,
                       kind=kind, needles=tuple(needles), should=should, fix=fix))


def probe(area, call, kind="err", needles=(), should="", fix=""):
    def deco(fn):
        add(area, call, fn, kind, needles, should, fix)
        return fn
    return deco


def short(v, n=300):
    try:
        s = repr(v)
    except Exception:  # noqa: BLE001
        s = f"<{type(v).__name__}>"
    s = s.replace("\n", " ")
    return s if len(s) <= n else s[: n - 3] + "..."


def tmpdir(name) -> Path:
    p = WORK / name
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return p


BARE = re.compile(r"(KeyError: ('[^' ]*'|\d+|None)$)|(index -?\d+ is out of bounds for axis)")


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("probe took longer than 90 s")


def run_probe(p) -> dict:
    out = {k: p[k] for k in ("id", "area", "call", "kind", "needles", "should", "fix")}
    out["needles"] = list(out["needles"])
    t0 = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(90)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = p["fn"]()
            err = None
        except Timeout as e:
            r, err = None, e
        except BaseException as e:  # noqa: BLE001  (SystemExit from typer too)
            r, err = None, e
        finally:
            signal.alarm(0)
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["warnings"] = [f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught][:5]
    kind, needles = p["kind"], p["needles"]
    if err is not None:
        msg = f"{type(err).__name__}: {err}"
        out["error"] = msg[:1500]
        clear = bool(needles) and all(n.lower() in msg.lower() for n in needles)
        if BARE.search(msg.strip()):
            clear = False  # a bare KeyError('x') / numpy IndexError names no place or cause
        if isinstance(err, Timeout):
            out["outcome"] = UNHELPFUL
        elif kind in ("err", "either", "sec"):
            out["outcome"] = OK_ERR if clear else UNHELPFUL
        else:  # works: an exception where a result was expected
            out["outcome"] = UNHELPFUL
        if out["outcome"] == UNHELPFUL:
            out["traceback_tail"] = "".join(traceback.format_exception(err)[-3:])[-800:]
        return out
    if kind == "err":
        if isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], bool):
            # an "err" probe may return (acceptable, detail) when the call did not raise
            out["outcome"] = OK_WORKS if r[0] else SILENT
            out["detail"] = str(r[1])[:1500]
        else:
            out["outcome"] = SILENT
            out["detail"] = "no error; returned " + short(r)
        return out
    if not (isinstance(r, tuple) and len(r) == 2):
        out["outcome"] = UNHELPFUL
        out["detail"] = f"probe bug: returned {short(r)}"
        return out
    ok, detail = r
    out["detail"] = str(detail)[:1500]
    if kind == "sec":
        out["outcome"] = OK_WORKS if ok else SECURITY
    else:
        out["outcome"] = OK_WORKS if ok else SILENT
    return out


# --------------------------------------------------------------------------- fixtures

_cache: dict = {}


def cached(key, make):
    if key not in _cache:
        _cache[key] = make()
    return _cache[key]


def cat_lists(n=8, k=6, seed=0):
    g = np.random.default_rng(seed)
    return [g.choice(k, size=int(g.integers(2, 5)), replace=False).tolist() for _ in range(n)]


def cat_data(n=8, k=6, seed=0):
    return Sequences.from_lists({"item": cat_lists(n, k, seed)})


def cat_model(k=6, dim=4, max_len=4, **cfg):
    cfg.setdefault("num_layers", 1)
    cfg.setdefault("num_heads", 1)
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([Category("item", k, dim=dim)], max_len=max_len, **cfg))


def mr_data(n=8, seed=0):
    movies = cat_lists(n, 6, seed)
    ratings = [[1 + (m % 3) for m in s] for s in movies]
    return Sequences.from_lists({"movie": movies, "rating": ratings})


def mr_model(**cfg):
    cfg.setdefault("num_layers", 1)
    cfg.setdefault("num_heads", 1)
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([Category("movie", 6, dim=4),
                                  Value("rating", fam.Poisson(shift=1), dim=4, hidden=8,
                                        readout_hidden=(4,))], max_len=4, **cfg))


def gv_data(n=8, length=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(n, length, 1, generator=g)
    y = 2 * c[..., 0] + 0.1 * torch.randn(n, length, generator=g)
    return Sequences({"c": c, "y": y}, torch.full((n,), length))


def gv_model(**cfg):
    cfg.setdefault("num_layers", 1)
    cfg.setdefault("num_heads", 1)
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([Attribute("c", size=1, dim=4, hidden=8),
                                  Value("y", fam.Gaussian(0.5), dim=4, hidden=8,
                                        readout_hidden=(4,))], **cfg))


def quiet_fit(model, train, val=None, **kw):
    kw.setdefault("max_epochs", 1)
    kw.setdefault("progress", False)
    kw.setdefault("threads", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return efa.fit(model, train, val, **kw)


def snapshot(data: Sequences):
    return ({k: v.clone() for k, v in data.fields.items()}, data.lengths.clone(),
            {k: v.clone() for k, v in data.observed.items()},
            None if data.scored is None else data.scored.clone())


def same_snapshot(a, b) -> bool:
    fa, la, oa, sa = a
    fb, lb, ob, sb = b
    return (fa.keys() == fb.keys() and all(torch.equal(fa[k], fb[k]) for k in fa)
            and torch.equal(la, lb) and oa.keys() == ob.keys()
            and all(torch.equal(oa[k], ob[k]) for k in oa)
            and ((sa is None and sb is None) or (sa is not None and sb is not None
                                                 and torch.equal(sa, sb))))


def planted_pickle(path: Path, marker: Path):
    """A pickle whose loading creates ``marker`` (code execution)."""
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    path.write_bytes(pickle.dumps(Evil()))


def tamper_safetensors(path: Path, edit_tensors=None, edit_meta=None):
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        t = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    if edit_tensors:
        t = edit_tensors(t)
    if edit_meta:
        meta = edit_meta(meta)
    save_file(t, str(path), metadata=meta)


# =========================================================================== sequences
A = "sequences"
T = torch.tensor
fx = "src/efa/core/data.py"

add(A, "Sequences({}, T([1]))", lambda: Sequences({}, T([1])), needles=("field",))
add(A, "Sequences({'a': [[1, 2]]}, T([2]))", lambda: Sequences({"a": [[1, 2]]}, T([2])),
    needles=("tensor", "a"))
add(A, "Sequences({'a': T([[1,2]])}, T([2.0]))", lambda: Sequences({"a": T([[1, 2]])}, T([2.0])),
    needles=("lengths",))
add(A, "Sequences({'a': T([[1,2]])}, T([[2]]))", lambda: Sequences({"a": T([[1, 2]])}, T([[2]])),
    needles=("lengths",))
add(A, "Sequences({'a': T([[1,2]])}, T([0]))", lambda: Sequences({"a": T([[1, 2]])}, T([0])),
    needles=("length 0",))
add(A, "Sequences({'a': T([[1,2]])}, T([3]))", lambda: Sequences({"a": T([[1, 2]])}, T([3])),
    needles=("length 3",))
add(A, "Sequences({'a': T([[1,2]]), 'b': T([[1,2,3]])}, T([2]))",
    lambda: Sequences({"a": T([[1, 2]]), "b": T([[1, 2, 3]])}, T([2])), needles=("same",))
add(A, "Sequences({'a': torch.zeros(0, 3)}, torch.zeros(0, dtype=long))",
    lambda: Sequences({"a": torch.zeros(0, 3)}, torch.zeros(0, dtype=torch.long)),
    needles=("empty",))
add(A, "Sequences({'a': T([1,2])}, T([2]))  # 1-d field",
    lambda: Sequences({"a": T([1, 2])}, T([2])), needles=("[N, I]",))
add(A, "Sequences({'a': ...}, T([2]), observed={'a': T([[1,1]])})  # int mask",
    lambda: Sequences({"a": T([[1, 2]])}, T([2]), {"a": T([[1, 1]])}), needles=("observed",))
add(A, "Sequences({'a': ...}, T([2]), observed={'zz': T([[True,True]])})",
    lambda: Sequences({"a": T([[1, 2]])}, T([2]), {"zz": T([[True, True]])}),
    needles=("observed", "zz"))
add(A, "Sequences({'a': ...}, T([2]), observed={'a': [[True, True]]})  # list mask",
    lambda: Sequences({"a": T([[1, 2]])}, T([2]), {"a": [[True, True]]}),
    needles=("observed", "tensor"), should="ValueError: observed['a'] must be a bool tensor",
    fix=f"{fx}: Sequences.__post_init__ (check isinstance(m, Tensor))")
add(A, "Sequences({'a': ...}, T([2]), scored=[[True, True]])  # list",
    lambda: Sequences({"a": T([[1, 2]])}, T([2]), scored=[[True, True]]),
    needles=("scored", "tensor"), should="ValueError: scored must be a bool tensor",
    fix=f"{fx}: Sequences.__post_init__ (check isinstance(scored, Tensor))")
add(A, "Sequences({'a': ...}, T([2]), scored=T([[1, 1]]))",
    lambda: Sequences({"a": T([[1, 2]])}, T([2]), scored=T([[1, 1]])), needles=("scored",))


@probe(A, "Sequences({'a': T([[1,2],[3,0]])}, [2, 1])  # python list lengths", kind="works")
def _():
    s = Sequences({"a": T([[1, 2], [3, 0]])}, [2, 1])
    return s.lengths.tolist() == [2, 1] and s.lengths.dtype == torch.int64, s.lengths


add(A, "Sequences.from_lists({})", lambda: Sequences.from_lists({}), needles=("field",))
add(A, "Sequences.from_lists({'x': []})", lambda: Sequences.from_lists({"x": []}),
    needles=("empty",))
add(A, "Sequences.from_lists({'x': [[1]], 'y': [[1], [2]]})",
    lambda: Sequences.from_lists({"x": [[1]], "y": [[1], [2]]}), needles=("'y'", "sequences"))
add(A, "Sequences.from_lists({'x': [[1, 2]], 'y': [[1]]})",
    lambda: Sequences.from_lists({"x": [[1, 2]], "y": [[1]]}), needles=("sequence 0",))
add(A, "Sequences.from_lists({'x': [[1], []]})", lambda: Sequences.from_lists({"x": [[1], []]}),
    needles=("sequence 1", "empty"))
add(A, "Sequences.from_lists({'x': [['a', 'b']]})",
    lambda: Sequences.from_lists({"x": [["a", "b"]]}), needles=("'x'", "numbers"))
add(A, "Sequences.from_lists({'x': [[1, None]]})",
    lambda: Sequences.from_lists({"x": [[1, None]]}), needles=("'x'", "numbers"))
add(A, "Sequences.from_lists({'x': 'abc'})  # a string, not lists",
    lambda: Sequences.from_lists({"x": "abc"}), needles=("'x'",))
add(A, "Sequences.from_lists({'x': [[1, 2**70]]})",
    lambda: Sequences.from_lists({"x": [[1, 2**70]]}), needles=("'x'",))


@probe(A, "Sequences.from_lists({'x': [np.array([2**63 + 5], dtype=np.uint64)]})",
       kind="either", needles=("'x'",), should="an error (the value does not fit int64) or the "
       "exact value", fix=f"{fx}: _pad (refuse uint64 values above int64 max)")
def _():
    s = Sequences.from_lists({"x": [np.array([2**63 + 5], dtype=np.uint64)]})
    v = int(s.fields["x"][0, 0])
    return v == 2**63 + 5, f"stored {v} (dtype {s.fields['x'].dtype}) for 2**63+5"


add(A, "Sequences.from_lists({'x': [[1, 2]]}, observed={'zz': [[True, True]]})",
    lambda: Sequences.from_lists({"x": [[1, 2]]}, observed={"zz": [[True, True]]}),
    needles=("zz", "no field"))
add(A, "Sequences.from_lists({'x': [[1, 2]]}, observed={'x': [[True]]})",
    lambda: Sequences.from_lists({"x": [[1, 2]]}, observed={"x": [[True]]}),
    needles=("observed['x']", "sequence 0"))
add(A, "Sequences.from_lists({'x': [[1, 2]]}, scored=[[True, True], [True]])",
    lambda: Sequences.from_lists({"x": [[1, 2]]}, scored=[[True, True], [True]]),
    needles=("scored",))
add(A, "Sequences.from_lists({'x': [[[1, 2], [3]]]})  # ragged vectors",
    lambda: Sequences.from_lists({"x": [[[1, 2], [3]]]}), needles=("'x'",))


@probe(A, "Sequences.from_lists({'x': [[1.5, 2.5], [3]]}) -> the documented dtype", kind="works",
       should="behaviour and docstring agree (session 16: Python floats stay float64, as "
       "documented)", fix=f"{fx}: _pad (or the from_lists docstring)")
def _():
    s = Sequences.from_lists({"x": [[1.5, 2.5], [3]]})
    doc = "Python floats, float64" in " ".join(Sequences.from_lists.__doc__.split())
    ok = doc and s.fields["x"].dtype == torch.float64 and s.fields["x"].tolist() == [
        [1.5, 2.5], [3.0, 0.0]]
    return ok, (s.fields["x"].dtype, s.fields["x"].tolist())


@probe(A, "Sequences.from_lists({'x': [np.array([0.1, 0.2])]}) keeps float64", kind="works")
def _():
    s = Sequences.from_lists({"x": [np.array([0.1, 0.2])]})
    return s.fields["x"].dtype == torch.float64 and s.fields["x"][0, 0].item() == 0.1, \
        s.fields["x"].dtype


@probe(A, "Sequences.from_lists({'x': [[True, False]]}) bools -> int64", kind="works")
def _():
    s = Sequences.from_lists({"x": [[True, False]]})
    return s.fields["x"].dtype == torch.int64 and s.fields["x"].tolist() == [[1, 0]], s.fields


@probe(A, "Sequences.from_lists(observed={'x': [[1, 0, 2]]}) non-bool mask values",
       kind="either", needles=("observed",), should="refuse a mask entry that is not a bool "
       "(2) or take it; 2 -> True silently is questionable")
def _():
    s = Sequences.from_lists({"x": [[1, 2, 3]]}, observed={"x": [[1, 0, 2]]})
    return s.observed["x"].tolist() == [[True, False, True]], s.observed["x"].tolist()


@probe(A, "from_lists does not mutate the user's lists", kind="works")
def _():
    lists = {"x": [[1, 2], [3]]}
    before = copy.deepcopy(lists)
    Sequences.from_lists(lists)
    return lists == before, lists


d8 = lambda: cat_data()  # noqa: E731
add(A, "cat_data()[8]  # out of range", lambda: d8()[8], needles=("8", "out of range"))
add(A, "cat_data()[-9]", lambda: d8()[-9], needles=("out of range",))
add(A, "cat_data()[T([True, False])]  # wrong mask length",
    lambda: d8()[T([True, False])], needles=("mask",))
add(A, "cat_data()[T([0.0, 1.0])]", lambda: d8()[T([0.0, 1.0])], needles=("integer",))
add(A, "cat_data()[T([[0, 1]])]  # 2-d index", lambda: d8()[T([[0, 1]])], needles=("1-d",))
add(A, "cat_data()[[]]  # empty list", lambda: d8()[[]], needles=("empty",),
    should="ValueError: the selection is empty", fix=f"{fx}: Sequences.__getitem__ (an empty "
    "list becomes a float64 array; treat len(idx) == 0 before the dtype check)")
add(A, "cat_data()[T([], dtype=long)]", lambda: d8()[torch.tensor([], dtype=torch.long)],
    needles=("empty",))
add(A, "cat_data()['a']", lambda: d8()["a"], needles=("select",),
    should="IndexError naming the accepted index types",
    fix=f"{fx}: Sequences.__getitem__ (refuse other index types)")
add(A, "cat_data()[True]", lambda: d8()[True], needles=("select",),
    should="refuse a bare bool index (or treat it as an error)",
    fix=f"{fx}: Sequences.__getitem__")
add(A, "cat_data()[::-1]", lambda: d8()[::-1], needles=("step",))
add(A, "cat_data()[1.5]", lambda: d8()[1.5], needles=("select",),
    fix=f"{fx}: Sequences.__getitem__")


@probe(A, "cat_data()[-1] equals last sequence", kind="works")
def _():
    d = d8()
    s = d[-1]
    n = int(d.lengths[-1])
    return torch.equal(s.fields["item"][0, :n], d.fields["item"][-1, :n]) and s.max_len == n, \
        s.fields["item"]


@probe(A, "cat_data()[np.int64(2)] and [1:3] and [[True]*8 mask]", kind="works")
def _():
    d = d8()
    a, b = d[np.int64(2)], d[1:3]
    c = d[[True, False] * 4]
    return len(a) == 1 and len(b) == 2 and len(c) == 4, (len(a), len(b), len(c))


@probe(A, "cat_data()[T([3, 1])] keeps order and trims padding", kind="works")
def _():
    d = d8()
    s = d[T([3, 1])]
    ok = torch.equal(s.lengths, d.lengths[T([3, 1])]) and s.max_len == int(s.lengths.max())
    return ok, (s.lengths, s.max_len)


add(A, "gv_data().to(torch.int64)  # casts floats to ints", lambda: gv_data().to(torch.int64),
    needles=("floating",), should="refuse a non-floating dtype (it truncates values silently)",
    fix=f"{fx}: Sequences.to (accept only floating dtypes)")
add(A, "cat_data().to('cuda:7')", lambda: d8().to("cuda:7"), needles=("cuda:7",))
add(A, "cat_data().to('nonsense')", lambda: d8().to("nonsense"), needles=("nonsense",))


@probe(A, "gv_data().to(torch.float64) casts only floats", kind="works")
def _():
    d = mr_data().to(torch.float64)
    return d.fields["movie"].dtype == torch.int64 and d.fields["rating"].dtype == torch.int64, \
        {k: v.dtype for k, v in d.fields.items()}


@probe(A, "Sequences.save(existing file) without overwrite", needles=("exists",))
def _():
    p = tmpdir("seqsave") / "a.safetensors"
    d8().save(p)
    d8().save(p)


add(A, "Sequences.save(<a folder>)", lambda: d8().save(tmpdir("seqdir")), needles=("folder",))
add(A, "Sequences.save('/tmp/probes/work/nope/x/y.safetensors')  # missing parent",
    lambda: d8().save(WORK / "nope" / "x" / "y.safetensors"), needles=("nope",))
add(A, "Sequences.load('/tmp/probes/work/missing.safetensors')",
    lambda: Sequences.load(WORK / "missing.safetensors"), needles=("missing.safetensors",))


@probe(A, "Sequences.load(<planted pickle>)", kind="sec", needles=("not a readable",))
def _():
    d = tmpdir("seqpickle")
    planted_pickle(d / "x.safetensors", d / "PWNED")
    try:
        Sequences.load(d / "x.safetensors")
    finally:
        if (d / "PWNED").exists():
            return False, "the pickle ran"
    return True, "loaded?!"


@probe(A, "Sequences.load(<efa.save model.safetensors>)", needles=("not written by",))
def _():
    p = tmpdir("seqmodel")
    efa.save(cat_model(), p / "m")
    Sequences.load(p / "m" / "model.safetensors")


def _saved_seq(name):
    p = tmpdir(name) / "d.safetensors"
    mr_data().save(p)
    return p


@probe(A, "Sequences.load(file whose metadata lacks 'order')", needles=("order",),
       should="ValueError: <file> is not a complete sequences file (no 'order')",
       fix=f"{fx}: Sequences.load (validate metadata and keys)")
def _():
    p = _saved_seq("seq_noorder")
    tamper_safetensors(p, edit_meta=lambda m: {"efa": "sequences"})
    Sequences.load(p)


@probe(A, "Sequences.load(file whose 'order' names an absent field)", needles=("ghost", ".safetensors"),
       should="ValueError naming the file and the missing field",
       fix=f"{fx}: Sequences.load")
def _():
    p = _saved_seq("seq_ghost")
    tamper_safetensors(p, edit_meta=lambda m: {**m, "order": json.dumps(["movie", "ghost"])})
    Sequences.load(p)


@probe(A, "Sequences.load(file without 'lengths' tensor)", needles=("lengths", ".safetensors"),
       should="ValueError naming the file and 'lengths'", fix=f"{fx}: Sequences.load")
def _():
    p = _saved_seq("seq_nolen")
    tamper_safetensors(p, edit_tensors=lambda t: {k: v for k, v in t.items() if k != "lengths"})
    Sequences.load(p)


@probe(A, "Sequences.load(file whose 'order' is not JSON)", needles=(".safetensors",),
       should="ValueError naming the file", fix=f"{fx}: Sequences.load")
def _():
    p = _saved_seq("seq_badjson")
    tamper_safetensors(p, edit_meta=lambda m: {**m, "order": "{oops"})
    Sequences.load(p)


@probe(A, "Sequences.load(file whose 'order' is a JSON string)", needles=(".safetensors",),
       fix=f"{fx}: Sequences.load")
def _():
    p = _saved_seq("seq_strorder")
    tamper_safetensors(p, edit_meta=lambda m: {**m, "order": json.dumps("movie")})
    Sequences.load(p)


@probe(A, "Sequences.load(file with lengths > I)", needles=("length",))
def _():
    p = _saved_seq("seq_badlen")
    tamper_safetensors(p, edit_tensors=lambda t: {**t, "lengths": t["lengths"] + 10})
    Sequences.load(p)


@probe(A, "save/load round trip (fields, order, observed, scored)", kind="works")
def _():
    d = Sequences.from_lists({"b": [[1, 2], [3]], "a": [[0.5, 1.5], [2.5]]},
                             observed={"a": [[True, False], [True]]},
                             scored=[[False, True], [True]])
    p = tmpdir("seqrt") / "d.safetensors"
    d.save(p)
    e = Sequences.load(p)
    return list(e.fields) == ["b", "a"] and same_snapshot(snapshot(d), snapshot(e)), list(e.fields)


@probe(A, "Sequences.save(overwrite=True) replaces", kind="works")
def _():
    p = tmpdir("seqow") / "d.safetensors"
    d8().save(p)
    mr_data().save(p, overwrite=True)
    return list(Sequences.load(p).fields) == ["movie", "rating"], "replaced"


add(A, "cat_data().split_scored(per_row=0)", lambda: d8().split_scored(0), needles=("per_row",),
    should="ValueError: per_row must be a positive integer",
    fix=f"{fx}: Sequences.split_scored (validate per_row)")
add(A, "cat_data().split_scored(per_row=-1)", lambda: d8().split_scored(-1),
    needles=("per_row",), fix=f"{fx}: Sequences.split_scored")
add(A, "cat_data().split_scored(per_row=1.5)", lambda: d8().split_scored(1.5),
    needles=("per_row",), fix=f"{fx}: Sequences.split_scored")
add(A, "cat_data().thin_scored(per_row=-1)",
    lambda: (lambda d, t: (bool((t.scored.sum(1) == d.lengths).all()),
                           f"kept {t.scored.sum(1).tolist()} of {d.lengths.tolist()}"))(
        d8(), d8().thin_scored(-1)),
    needles=("per_row",), should="ValueError: per_row must be >= 1 (-1 silently keeps all "
    "but one scored position per sequence, Python slicing)",
    fix=f"{fx}: Sequences.thin_scored (validate per_row)")
add(A, "cat_data().thin_scored(per_row=1.5)", lambda: d8().thin_scored(1.5),
    needles=("per_row",), fix=f"{fx}: Sequences.thin_scored")


@probe(A, "split_scored(2) keeps every scored term exactly once", kind="works")
def _():
    d = d8()
    s = d.split_scored(2, seed=3)
    return int(s.scored.sum()) == int(d.lengths.sum()) and int(s.scored.sum(1).max()) <= 2, \
        (int(s.scored.sum()), int(d.lengths.sum()))


@probe(A, "thin_scored(1) keeps one scored position per sequence", kind="works")
def _():
    t = d8().thin_scored(1)
    return bool((t.scored.sum(1) == 1).all()), t.scored.sum(1).tolist()


add(A, "cat_data().with_scored(torch.ones(2, 2, dtype=bool))",
    lambda: d8().with_scored(torch.ones(2, 2, dtype=torch.bool)), needles=("scored",))
add(A, "cat_data().predicted('nonexistent')",
    lambda: d8().predicted("nonexistent"), needles=("nonexistent",),
    should="KeyError naming the unknown field (it returns every real position instead)",
    fix=f"{fx}: Sequences.predicted (check name in self.fields)")

# ---------------------------------------------------------------- from_frame
ff = lambda: pd.DataFrame({"u": [1, 1, 2, 2, 2], "t": [2, 1, 1, 3, 2],  # noqa: E731
                           "x": [10, 11, 12, 13, 14], "y": [0.5, 1.5, 2.5, 3.5, 4.5]})
add(A, "Sequences.from_frame(df.values, 'u', {'x': 'x'})",
    lambda: Sequences.from_frame(ff().values, "u", {"x": "x"}), needles=("DataFrame",))
add(A, "Sequences.from_frame(pd.DataFrame(), 'u', {'x': 'x'})",
    lambda: Sequences.from_frame(pd.DataFrame(), "u", {"x": "x"}), needles=("empty",))
add(A, "Sequences.from_frame(df, 'u', {'x': 'nope'})",
    lambda: Sequences.from_frame(ff(), "u", {"x": "nope"}), needles=("nope",))
add(A, "Sequences.from_frame(df, 'u', {'x': 'x'}, order='nope')",
    lambda: Sequences.from_frame(ff(), "u", {"x": "x"}, order="nope"), needles=("nope",))
add(A, "Sequences.from_frame(df with NaN in by)",
    lambda: Sequences.from_frame(ff().assign(u=[1, 1, np.nan, 2, 2]), "u", {"x": "x"}),
    needles=("'u'", "missing"))
add(A, "Sequences.from_frame(df with string column)",
    lambda: Sequences.from_frame(ff().assign(s=list("abcde")), "u", {"s": "s"}),
    needles=("'s'", "category"))
add(A, "Sequences.from_frame(df with datetime column)",
    lambda: Sequences.from_frame(ff().assign(s=pd.date_range("2020", periods=5)), "u",
                                 {"s": "s"}), needles=("'s'",))
add(A, "Sequences.from_frame(df with NaN value, missing=False)",
    lambda: Sequences.from_frame(ff().assign(y=[0.5, np.nan, 1, 2, 3]), "u", {"y": "y"}),
    needles=("'y'", "sequence 0", "missing=True"))
add(A, "Sequences.from_frame(df with int column labels, fields={'x': 0})",
    lambda: (lambda s: (s.fields["x"].tolist() == [[1], [1]], s.fields["x"].tolist()))(
        Sequences.from_frame(pd.DataFrame({0: [1, 1], 1: [5, 6]}), 1, {"x": 0})),
    kind="works", should="works, or a clear error on the non-string column name",
    fix=f"{fx}: Sequences.from_frame (cols: `[c] if isinstance(c, str)` -> treat any "
    "hashable scalar as one column)")
add(A, "Sequences.from_frame(df, by=0) where column 0 does not exist",
    lambda: Sequences.from_frame(ff(), 0, {"x": "x"}), needles=("columns", "0"),
    should="KeyError 'columns [0] are not in the frame'",
    fix=f"{fx}: Sequences.from_frame (`if c and c not in frame` skips the falsy name 0: "
    "use `c is not None`)")
add(A, "Sequences.from_frame(df with mixed-type by column 1 / 'a')",
    lambda: (lambda s: (s.fields["x"].tolist() == [[10, 11, 0], [12, 13, 14]],
                        s.fields["x"].tolist()))(
        Sequences.from_frame(ff().assign(u=[1, 1, "a", "a", "a"]), "u", {"x": "x"})),
    kind="either", needles=("'u'",))


@probe(A, "from_frame(df, order='t') with NaN in the order column", kind="err",
       needles=("'t'",), should="an error naming the order column (NaN rows are silently "
       "moved to the end of their sequence)", fix=f"{fx}: Sequences.from_frame")
def _():
    df = ff().assign(t=[2.0, np.nan, 1.0, 3.0, 2.0])
    s = Sequences.from_frame(df, "u", {"x": "x"}, order="t")
    return False, f"accepted; sequence 0 = {s.fields['x'][0].tolist()} (x=11 had t=NaN)"


@probe(A, "from_frame(order='t') is independent of the table's row order", kind="works")
def _():
    a = Sequences.from_frame(ff(), "u", {"x": "x", "y": "y"}, order="t")
    b = Sequences.from_frame(ff().sample(frac=1, random_state=3), "u", {"x": "x", "y": "y"},
                             order="t")
    return same_snapshot(snapshot(a), snapshot(b)), a.fields["x"].tolist()


@probe(A, "from_frame without order keeps table order within a sequence", kind="works")
def _():
    s = Sequences.from_frame(ff(), "u", {"x": "x"})
    return s.fields["x"].tolist() == [[10, 11, 0], [12, 13, 14]], s.fields["x"].tolist()


@probe(A, "from_frame does not mutate the frame", kind="works")
def _():
    df = ff().assign(c=pd.Categorical(list("abcab")))
    before = df.copy()
    Sequences.from_frame(df, "u", {"c": "c", "y": "y"}, order="t")
    return df.equals(before), "unchanged"


@probe(A, "from_frame categorical column uses codes; NaN -> unobserved", kind="works")
def _():
    df = ff().assign(c=pd.Categorical(["b", None, "a", "b", "a"], categories=["a", "b"]))
    s = Sequences.from_frame(df, "u", {"c": "c"}, missing=True)
    ok = (s.fields["c"].dtype == torch.int64 and s.fields["c"][0, 0].item() == 1
          and s.observed["c"].tolist() == [[True, False, False], [True, True, True]])
    return ok, (s.fields["c"].tolist(), s.observed["c"].tolist())


@probe(A, "from_frame Int64 nullable with NA, missing=True keeps int dtype", kind="works")
def _():
    df = ff().assign(n=pd.array([1, None, 3, 4, 5], dtype="Int64"))
    s = Sequences.from_frame(df, "u", {"n": "n"}, missing=True)
    return s.fields["n"].dtype == torch.int64 and not s.observed["n"][0, 1], s.fields["n"]


@probe(A, "from_frame attribute from a list of columns -> [N, I, 2]", kind="works")
def _():
    s = Sequences.from_frame(ff(), "u", {"xy": ["x", "y"]})
    return tuple(s.fields["xy"].shape) == (2, 3, 2) and s.fields["xy"][1, 2].tolist() == [14.0, 4.5], \
        s.fields["xy"].shape


@probe(A, "from_frame bool column -> Bernoulli Value evaluates", kind="works",
       should="bool columns are integers 0/1 (from_frame makes them float, and the "
       "Bernoulli field then refuses them with a hint about pandas NaN)",
       fix=f"{fx}: Sequences.from_frame (treat dtype kind 'b' and 'boolean' as integer)")
def _():
    df = ff().assign(b=[True, False, True, True, False])
    s = Sequences.from_frame(df, "u", {"b": "b"})
    m = efa.EFA(efa.EFAConfig([Value("b", fam.Bernoulli(), dim=4, hidden=4)], num_layers=1,
                              num_heads=1))
    r = efa.evaluate(m, s)
    return math.isfinite(r["b"]), (s.fields["b"].dtype, r)


@probe(A, "from_frame pandas 'boolean' (nullable) column with NA", kind="works",
       fix=f"{fx}: Sequences.from_frame")
def _():
    df = ff().assign(b=pd.array([True, None, True, False, False], dtype="boolean"))
    s = Sequences.from_frame(df, "u", {"b": "b"}, missing=True)
    m = efa.EFA(efa.EFAConfig([Value("b", fam.Bernoulli(), dim=4, hidden=4)], num_layers=1,
                              num_heads=1))
    r = efa.evaluate(m, s)
    return math.isfinite(r["b"]), (s.fields["b"].dtype, r)


# =========================================================================== fields
A = "fields"
fx = "src/efa/core/fields.py"
for name in ("1abc", "", 5, "a-b", None):
    add(A, f"Category({name!r}, 5)", lambda name=name: Category(name, 5), needles=("identifier",))


@probe(A, "Category('δ_ünï', 5) unicode identifier works end to end", kind="works")
def _():
    m = efa.EFA(efa.EFAConfig([Category("δ_ünï", 5, dim=4)], max_len=3, num_layers=1,
                              num_heads=1))
    d = Sequences.from_lists({"δ_ünï": [[0, 1, 2]]})
    p = tmpdir("unicode_field")
    efa.save(m, p / "m")
    r1, r2 = efa.evaluate(m, d), efa.evaluate(efa.load(p / "m"), d)
    return r1 == r2, r1


for v in (1, 0, -3, 2.5, "5", True, None, float("nan")):
    add(A, f"Category('x', {v!r})", lambda v=v: Category("x", v), needles=("num_categories",),
        fix=f"{fx}: Category.__post_init__ / families.Categorical / _integer")


@probe(A, "Category('x', np.int64(5))", kind="works")
def _():
    c = Category("x", np.int64(5))
    return c.num_categories == 5 and type(c.num_categories) is int, c.num_categories


for v in (0, -1, 2.5, "4", True):
    add(A, f"Category('x', 5, dim={v!r})", lambda v=v: Category("x", 5, dim=v), needles=("dim",))
add(A, "Category('x', 5, vocab_chunk=0)", lambda: Category("x", 5, vocab_chunk=0),
    needles=("vocab_chunk",))
add(A, "Category('x', 5, bag=True, vocab_chunk=2)", lambda: Category("x", 5, bag=True,
                                                                      vocab_chunk=2),
    needles=("bag",))
add(A, "Category('x', 5, bag=True, target=False)", lambda: Category("x", 5, bag=True,
                                                                     target=False),
    needles=("bag", "target"))
for k, v in (("bag_l2", -1), ("bag_l2", float("nan")), ("bag_scale", 0),
             ("bag_scale", float("inf")), ("bag_l2", "big")):
    add(A, f"Category('x', 5, bag=True, {k}={v!r})",
        lambda k=k, v=v: Category("x", 5, bag=True, **{k: v}), needles=(k,),
        fix=f"{fx}: Category.__post_init__ (float(v) before the check)")
add(A, "Category('x', 3, labels=['a', 'b'])", lambda: Category("x", 3, labels=["a", "b"]),
    needles=("labels",))
add(A, "Category('x', 3, labels=['a', 'a', 'b'])", lambda: Category("x", 3,
                                                                     labels=["a", "a", "b"]),
    needles=("labels",))
add(A, "Category('x', 3, labels=[[1], [2], [3]])", lambda: Category("x", 3,
                                                                     labels=[[1], [2], [3]]),
    needles=("labels",))
add(A, "Category('x', 3, labels='abc')  # a string is 3 labels",
    lambda: (lambda c: (False, f"accepted labels={c.labels}"))(Category("x", 3, labels="abc")),
    needles=("labels",), should="refuse a bare string (it is split into characters)",
    fix=f"{fx}: Category.__post_init__ (labels)")


@probe(A, "Category('x', 3, labels=np.array([10, 20, 30]))  # numpy ints", kind="works",
       should="numpy integer labels accepted (as sizes are) or the message should say "
       "'Python' numbers: np.int64 is a number", fix=f"{fx}: Category.__post_init__ (labels: "
       "convert numpy scalars with .item())")
def _():
    c = Category("x", 3, labels=np.array([10, 20, 30]))
    return c.labels == (10, 20, 30), c.labels


for k, v in (("distinct", "False"), ("target", "no"), ("readout_bias", "False"),
             ("bag", "False")):
    add(A, f"Category('x', 5, {k}={v!r})  # a string where a bool is expected",
        lambda k=k, v=v: (lambda c: (False, f"accepted; {k} = {getattr(c, k)!r}, truthy"))(
            Category("x", 5, **({k: v} if k != "bag" else {k: v}))),
        needles=(k,), should=f"refuse a non-bool {k} (the string 'False' is truthy)",
        fix=f"{fx}: Category.__post_init__ (check bool options)")
for v in (("z",), (), ("q", "q"), "qk", 5):
    add(A, f"Category('x', 5, feeds={v!r})", lambda v=v: Category("x", 5, feeds=v),
        needles=("feeds",))


@probe(A, "Category('x', 5, feeds='v') (a string = one role)", kind="works")
def _():
    return Category("x", 5, feeds="v").feeds == ("v",), Category("x", 5, feeds="v").feeds


add(A, "Value('y', fam.Poisson)  # the class", lambda: Value("y", fam.Poisson),
    needles=("family", "instance"))
add(A, "Value('y', 'gaussian')", lambda: Value("y", "gaussian"), needles=("family",))
add(A, "Value('y', fam.Gaussian(), encoder='rnn')", lambda: Value("y", fam.Gaussian(),
                                                                   encoder="rnn"),
    needles=("encoder",))
add(A, "Value('y', fam.Gaussian(), readout='deep')", lambda: Value("y", fam.Gaussian(),
                                                                    readout="deep"),
    needles=("readout",))
add(A, "Value('y', fam.Gaussian(), readout_activation='gelu')",
    lambda: Value("y", fam.Gaussian(), readout_activation="gelu"), needles=("activation",))
add(A, "Value('y', fam.Gaussian(), encoder='identity', dim=2)",
    lambda: Value("y", fam.Gaussian(), encoder="identity", dim=2), needles=("identity",))
add(A, "Value('y', fam.Gaussian(), encoder='table', num_values=3)",
    lambda: Value("y", fam.Gaussian(), encoder="table", num_values=3), needles=("table",))
add(A, "Value('y', fam.Poisson(), encoder='table')  # no num_values",
    lambda: Value("y", fam.Poisson(), encoder="table"), needles=("num_values",))
add(A, "Value('y', fam.Poisson(), encoder='table', num_values=-1)",
    lambda: Value("y", fam.Poisson(), encoder="table", num_values=-1), needles=("num_values",),
    should="ValueError: num_values must be a positive integer",
    fix=f"{fx}: Value.__post_init__ (`not self.num_values` lets -1 through)")
add(A, "Value('y', fam.Poisson(), encoder='table', num_values=2.5)",
    lambda: efa.EFA(efa.EFAConfig([Value("y", fam.Poisson(), encoder="table", num_values=2.5)],
                                  num_layers=1)),
    needles=("num_values",), fix=f"{fx}: Value.__post_init__")
for k, v in (("loc", float("nan")), ("loc", float("inf")), ("scale", 0), ("scale", -1),
             ("scale", float("nan")), ("scale", float("inf")), ("loc", "abc")):
    add(A, f"Value('y', fam.Gaussian(), {k}={v!r})",
        lambda k=k, v=v: Value("y", fam.Gaussian(), **{k: v}), needles=(k,),
        fix=f"{fx}: Value.__post_init__ (float(loc) raises before the check names loc)")
add(A, "Value('y', fam.Gaussian(), dim=0)", lambda: Value("y", fam.Gaussian(), dim=0),
    needles=("dim",))
add(A, "Value('y', fam.Gaussian(), hidden=0)",
    lambda: (lambda v: (False, f"accepted hidden={v.hidden}: λ₁ is then a constant"))(
        Value("y", fam.Gaussian(), hidden=0)),
    needles=("hidden",), should="ValueError: hidden must be a positive integer (0 makes the "
    "MLP encoder a constant: the model cannot see the value)",
    fix=f"{fx}: Value.__post_init__ (_check_positive on hidden)")
add(A, "EFA with Value('y', fam.Gaussian(), hidden=-1)",
    lambda: efa.EFA(efa.EFAConfig([Value("y", fam.Gaussian(), hidden=-1)], num_layers=1)),
    needles=("hidden",), should="ValueError naming field 'y' and hidden",
    fix=f"{fx}: Value.__post_init__")
add(A, "EFA with Value('y', fam.Gaussian(), readout_hidden=(-2,))",
    lambda: efa.EFA(efa.EFAConfig([Value("y", fam.Gaussian(), readout_hidden=(-2,))],
                                  num_layers=1)),
    needles=("readout_hidden",), fix=f"{fx}: Value.__post_init__ (check readout_hidden)")
add(A, "Value('y', fam.Gaussian(), readout_hidden=('a',))",
    lambda: efa.EFA(efa.EFAConfig([Value("y", fam.Gaussian(), readout_hidden=("a",))],
                                  num_layers=1)),
    needles=("readout_hidden",), fix=f"{fx}: Value.__post_init__")
add(A, "Value('y', fam.Gaussian(), readout_hidden=5)  # int, not tuple",
    lambda: Value("y", fam.Gaussian(), readout_hidden=5), needles=("readout_hidden",),
    fix=f"{fx}: Value.__post_init__ (tuple(5) -> TypeError)")
add(A, "Value('y', fam.Gaussian(), readout_hidden=(0,))",
    lambda: (lambda v: (False, "accepted a zero-width read-out layer"))(
        Value("y", fam.Gaussian(), readout_hidden=(0,))),
    needles=("readout_hidden",), should="refuse a zero-width hidden layer",
    fix=f"{fx}: Value.__post_init__")
add(A, "Attribute('c', size=0)", lambda: Attribute("c", size=0), needles=("size",))
add(A, "Attribute('c', size=2, encoder='identity', dim=3)",
    lambda: Attribute("c", size=2, encoder="identity", dim=3), needles=("identity",))
add(A, "Attribute('c', size=2, loc=[0.0])", lambda: Attribute("c", size=2, loc=[0.0]),
    needles=("loc",))
add(A, "Attribute('c', size=1, scale=[0.0])", lambda: Attribute("c", size=1, scale=[0.0]),
    needles=("scale",))
add(A, "Attribute('c', size=1, encoder='table')", lambda: Attribute("c", encoder="table"),
    needles=("encoder",))
add(A, "Attribute('c', size=1, loc=[float('nan')])",
    lambda: (lambda a: (False, f"accepted loc={a.loc}"))(Attribute("c", loc=[float("nan")])),
    needles=("loc",), should="refuse a non-finite loc (every embedding becomes NaN)",
    fix=f"{fx}: Attribute.__post_init__ (check loc finite, as scale is)")
add(A, "Attribute('c', size=1, loc=[float('inf')])",
    lambda: (lambda a: (False, f"accepted loc={a.loc}"))(Attribute("c", loc=[float("inf")])),
    needles=("loc",), fix=f"{fx}: Attribute.__post_init__")
add(A, "Attribute('c', size=1, hidden=0)",
    lambda: (lambda a: (False, f"accepted hidden={a.hidden}"))(Attribute("c", hidden=0)),
    needles=("hidden",), fix=f"{fx}: Attribute.__post_init__ (check hidden)")
add(A, "Attribute('c', size=1, loc=5.0)  # scalar, not list", lambda: Attribute("c", loc=5.0),
    needles=("loc",), fix=f"{fx}: Attribute.__post_init__ (iterating a float)")
add(A, "field_from_config({'name': 'x', 'num_categories': 3})  # no kind",
    lambda: efa.core.fields.field_from_config({"name": "x", "num_categories": 3}),
    needles=("kind",), should="ValueError: field config has no 'kind'",
    fix=f"{fx}: field_from_config")
add(A, "field_from_config({'kind': 'tensor', 'name': 'x'})",
    lambda: efa.core.fields.field_from_config({"kind": "tensor", "name": "x"}), needles=("tensor",))
add(A, "field_from_config({'kind': 'category', 'name': 'x', 'num_categories': 3, 'colour': 1})",
    lambda: efa.core.fields.field_from_config({"kind": "category", "name": "x", "num_categories": 3,
                                          "colour": 1}), needles=("colour",))


@probe(A, "Field config round trip (Category labels, Value, Attribute)", kind="works")
def _():
    fs = [Category("a", 3, labels=["x", "y", "z"], distinct=True),
          Value("b", fam.NegativeBinomial(2.5), loc=1.0, scale=2.0, readout_hidden=(3, 2)),
          Attribute("c", size=2, loc=[1, 2], scale=[3, 4])]
    back = [efa.core.fields.field_from_config(json.loads(json.dumps(f.config()))) for f in fs]
    return all(a.config() == b.config() for a, b in zip(fs, back)), [f.config() for f in back]


# =========================================================================== families
A = "families"
fx = "src/efa/core/families.py"
for v in (1, 2.5, "3", None, float("inf")):
    add(A, f"fam.Categorical({v!r})", lambda v=v: fam.Categorical(v), needles=("num_categories",),
        fix=f"{fx}: _integer (int(None)/int(inf) raise before the message)")
add(A, "fam.Ordinal(1)", lambda: fam.Ordinal(1), needles=("num_classes",))
for v in (0.5, float("nan"), float("inf"), None, "1"):
    add(A, f"fam.Poisson(shift={v!r})", lambda v=v: fam.Poisson(shift=v), needles=("shift",),
        fix=f"{fx}: Poisson.__init__ (int(nan)/int(inf)/int(None) raise first)")
add(A, "fam.Poisson(link='identity')", lambda: fam.Poisson(link="identity"), needles=("link",))
for v in (0, 2.5, float("inf"), float("nan"), None):
    add(A, f"fam.Binomial({v!r})", lambda v=v: fam.Binomial(v), needles=("total_count",),
        fix=f"{fx}: _integer")
for v in (0, -1, float("nan"), "2"):
    add(A, f"fam.NegativeBinomial({v!r})", lambda v=v: fam.NegativeBinomial(v),
        needles=("total_count",), fix=f"{fx}: NegativeBinomial.__init__")
add(A, "fam.NegativeBinomial(float('inf'))",
    lambda: (lambda f: (False, f"accepted total_count={f.total_count}; log_prob(1, eta=-1) = "
                        f"{f.log_prob(torch.tensor([1]), torch.tensor([[-1.0]])).item()}"))(
        fam.NegativeBinomial(float("inf"))),
    needles=("total_count",), should="refuse a non-finite total_count",
    fix=f"{fx}: NegativeBinomial.__init__ (check finite)")
for v in (0, -1, float("nan"), "1"):
    add(A, f"fam.Gaussian({v!r})", lambda v=v: fam.Gaussian(v), needles=("sigma",))
add(A, "fam.Gaussian(float('inf'))",
    lambda: (lambda f: (False, f"accepted; log_prob(1, eta=0.5) = "
                        f"{f.log_prob(torch.tensor([1.0]), torch.tensor([[0.5]])).item()}"))(
        fam.Gaussian(float("inf"))),
    needles=("sigma",), should="ValueError: sigma must be finite (inf gives NaN/-inf "
    "log-likelihoods)", fix=f"{fx}: Gaussian.__init__")
add(A, "fam.LearnedGaussian(0)", lambda: fam.LearnedGaussian(0), needles=("init_sigma",))
add(A, "fam.LearnedGaussian(float('inf'))",
    lambda: (lambda f: (False, f"accepted; log_sigma = {f.log_sigma.item()}"))(
        fam.LearnedGaussian(float("inf"))),
    needles=("init_sigma",), fix=f"{fx}: LearnedGaussian.__init__ (check finite)")
add(A, "fam.HeteroscedasticGaussian(-1)", lambda: fam.HeteroscedasticGaussian(-1),
    needles=("min_scale",))
add(A, "fam.HeteroscedasticGaussian(float('nan'))",
    lambda: fam.HeteroscedasticGaussian(float("nan")), needles=("min_scale",))
add(A, "fam.HeteroscedasticGaussian(float('inf'))",
    lambda: (lambda f: (False, f"accepted min_scale={f.min_scale}"))(
        fam.HeteroscedasticGaussian(float("inf"))),
    needles=("min_scale",), fix=f"{fx}: _non_negative (check finite)")
add(A, "fam.Gamma(floor=-1)", lambda: fam.Gamma(floor=-1), needles=("floor",))
add(A, "fam.Gamma(floor=float('inf'))",
    lambda: (lambda f: (False, f"accepted floor={f.floor}"))(fam.Gamma(floor=float("inf"))),
    needles=("floor",), fix=f"{fx}: _non_negative")
add(A, "family_from_config({'family': 'poisson', 'shift': 1, 'extra': 1})",
    lambda: fam.family_from_config({"family": "poisson", "shift": 1, "extra": 1}),
    needles=("extra",))
add(A, "family_from_config({})", lambda: fam.family_from_config({}), needles=("family",))
add(A, "family_from_config({'family': 'student_t'})",
    lambda: fam.family_from_config({"family": "student_t"}), needles=("student_t",))
add(A, "fam.Poisson().log_prob(T([1,2]), T([0.1, 0.2]))  # eta without trailing dim",
    lambda: fam.Poisson().log_prob(T([1, 2]), T([0.1, 0.2])), needles=("trailing",))
add(A, "fam.Categorical(3).log_prob(T([0]), torch.zeros(1, 4))",
    lambda: fam.Categorical(3).log_prob(T([0]), torch.zeros(1, 4)), needles=("trailing",))
add(A, "fam.Poisson().validate(T([1.5]), 'y')", lambda: fam.Poisson().validate(T([1.5]), "y"),
    needles=("whole",))
add(A, "fam.Poisson().validate(T([1.0]), 'y')", lambda: fam.Poisson().validate(T([1.0]), "y"),
    needles=(".long()",))
add(A, "fam.Bernoulli().validate(T([2]), 'y')", lambda: fam.Bernoulli().validate(T([2]), "y"),
    needles=("0 or 1",))
add(A, "fam.Bernoulli().validate(T([True]), 'y')",
    lambda: fam.Bernoulli().validate(T([True]), "y"), needles=("integer",))
add(A, "fam.Gamma().validate(T([0.0]), 'y')", lambda: fam.Gamma().validate(T([0.0]), "y"),
    needles=("positive",))
add(A, "fam.Binomial(3).validate(T([4]), 'y')", lambda: fam.Binomial(3).validate(T([4]), "y"),
    needles=("0..3",))
add(A, "fam.Gaussian().validate(T([1]), 'y')  # int", lambda: fam.Gaussian().validate(T([1]),
                                                                                     "y"),
    needles=(".float()",))
add(A, "fam.Gaussian().validate([1.0], 'y')  # list", lambda: fam.Gaussian().validate([1.0], "y"),
    needles=("tensor",))
add(A, "fam.NegativeBinomial(2).validate(T([-1]), 'y')",
    lambda: fam.NegativeBinomial(2).validate(T([-1]), "y"), needles=("negative",))


def _vs_torch(f, y, eta, dist_y=None):
    mine = f.log_prob(y, eta)
    ref = f.distribution(eta).log_prob(dist_y if dist_y is not None else y.to(eta.dtype))
    return torch.allclose(mine, ref.to(mine.dtype), atol=1e-6), (mine.tolist(), ref.tolist())


add(A, "Poisson(shift=1).log_prob == torch Poisson(y-1)", lambda: _vs_torch(
    fam.Poisson(shift=1), T([1, 2, 5]), T([[0.3], [-1.0], [1.2]], dtype=torch.float64),
    T([0.0, 1.0, 4.0], dtype=torch.float64)), kind="works")
add(A, "Binomial(4).log_prob == torch Binomial", lambda: _vs_torch(
    fam.Binomial(4), T([0, 2, 4]), T([[0.3], [-1.0], [1.2]], dtype=torch.float64)), kind="works")
add(A, "NegativeBinomial(2.5).log_prob == torch NegativeBinomial", lambda: _vs_torch(
    fam.NegativeBinomial(2.5), T([0, 3, 7]), T([[-0.3], [-1.0], [-2.2]], dtype=torch.float64)),
    kind="works")
add(A, "Gamma().log_prob == torch Gamma", lambda: _vs_torch(
    fam.Gamma(), T([0.5, 2.0], dtype=torch.float64),
    fam.Gamma().link(T([[0.1, 0.2], [1.0, -1.0]], dtype=torch.float64))), kind="works")
add(A, "HeteroscedasticGaussian.log_prob == torch Normal", lambda: _vs_torch(
    fam.HeteroscedasticGaussian(), T([0.5, -2.0], dtype=torch.float64),
    fam.HeteroscedasticGaussian().link(T([[0.1, 0.2], [1.0, -1.0]], dtype=torch.float64))),
    kind="works")
add(A, "Gaussian(0.7).log_prob == torch Normal", lambda: _vs_torch(
    fam.Gaussian(0.7), T([0.5, -2.0], dtype=torch.float64),
    fam.Gaussian(0.7).link(T([[0.1], [1.0]], dtype=torch.float64))), kind="works")
add(A, "Bernoulli.log_prob == torch Bernoulli", lambda: _vs_torch(
    fam.Bernoulli(), T([0, 1]), T([[0.1], [-3.0]], dtype=torch.float64)), kind="works")


@probe(A, "Ordinal(4): probabilities sum to 1 and exp(log_prob) over classes sums to 1",
       kind="works")
def _():
    f = fam.Ordinal(4)
    eta = T([[0.3], [-2.0]])
    p = f.probabilities(eta)
    lp = torch.stack([f.log_prob(torch.full((2,), k), eta) for k in range(4)], -1)
    return torch.allclose(p.sum(-1), torch.ones(2)) and torch.allclose(lp.exp(), p, atol=1e-6), \
        (p.sum(-1).tolist(), lp.exp().sum(-1).tolist())


@probe(A, "Categorical(5).mean sums to 1 under extreme logits", kind="works")
def _():
    p = fam.Categorical(5).mean(T([[1e4, -1e4, 0, 0, 0], [0.0, 0, 0, 0, 0]]))
    return bool(torch.isfinite(p).all()) and torch.allclose(p.sum(-1), torch.ones(2)), p.tolist()


@probe(A, "Poisson().sample with huge eta (exp overflow)", kind="either",
       needles=("rate",), should="a clear error or a non-negative count")
def _():
    y = fam.Poisson().sample(T([[100.0]]))
    return bool((y >= 0).all()), y.tolist()


# =========================================================================== model / config
A = "model"
fx = "src/efa/core/model.py"
C4 = lambda **kw: Category("item", 6, dim=4, **kw)  # noqa: E731
cfgerr = [
    ("fields=[C4(), C4()]", dict(fields=[C4(), C4()]), ("unique",)),
    ("fields=[C4(target=False)]", dict(fields=[C4(target=False)]), ("target",)),
    ("direction='bi'", dict(direction="bi"), ("direction",)),
    ("scale='log'", dict(scale="log"), ("scale",)),
    ("block='resnet'", dict(block="resnet"), ("block",)),
    ("mix='nonlinear'", dict(mix="nonlinear"), ("mix",)),
    ("mode='fast'", dict(mode="fast"), ("mode",)),
    ("attention='flash'", dict(attention="flash"), ("flash",)),
    ("attention=['softmax']", dict(attention=["softmax"]), ("attention",)),
    ("attention={'name': 'softmax'}", dict(attention={"name": "softmax"}), ("kernel",)),
    ("dropout=1.0", dict(dropout=1.0), ("dropout",)),
    ("dropout=-0.1", dict(dropout=-0.1), ("dropout",)),
    ("dropout=float('nan')", dict(dropout=float("nan")), ("dropout",)),
    ("dropout='0.1'", dict(dropout="0.1"), ("dropout",)),
    ("num_layers=0", dict(num_layers=0), ("num_layers",)),
    ("num_layers=2.0", dict(num_layers=2.0), ("num_layers",)),
    ("num_layers=True", dict(num_layers=True), ("num_layers",)),
    ("num_heads=0", dict(num_heads=0), ("num_heads",)),
    ("chunk=0", dict(chunk=0), ("chunk",)),
    ("ffn_hidden=-5", dict(ffn_hidden=-5), ("ffn_hidden",)),
    ("mix_hidden=0", dict(mix_hidden=0), ("mix_hidden",)),
    ("head_dim=0", dict(head_dim=0), ("head_dim",)),
    ("d_model=0", dict(d_model=0), ("d_model",)),
    ("max_len=0", dict(max_len=0), ("max_len",)),
    ("max_len=4.0", dict(max_len=4.0), ("max_len",)),
    ("mode='two_stream', num_layers=2 (bidirectional)", dict(mode="two_stream", num_layers=2),
     ("two",)),
]
for desc, kw, needles in cfgerr:
    def _f(kw=kw):
        kw = dict(kw)
        fields = kw.pop("fields", [C4()])
        return efa.EFAConfig(fields, **kw)
    add(A, f"EFAConfig({desc})", _f, needles=needles)
add(A, "EFAConfig(C4())  # a field, not a list", lambda: efa.EFAConfig(C4()),
    needles=("fields", "list"), should="TypeError: fields must be a list of Field objects",
    fix=f"{fx}: EFAConfig.__post_init__ (validate fields first)")
add(A, "EFAConfig(['item'])  # names, not fields", lambda: efa.EFAConfig(["item"]),
    needles=("fields",), should="TypeError: fields must be Field objects, got str 'item'",
    fix=f"{fx}: EFAConfig.__post_init__")
add(A, "EFAConfig([])", lambda: efa.EFAConfig([]), needles=("field",))
add(A, "EFA(EFAConfig([C4(dim=2)], num_heads=4))  # head_dim = 2 // 4 = 0",
    lambda: efa.EFA(efa.EFAConfig([C4(dim=2) if False else Category("item", 6, dim=2)],
                                  max_len=4, num_heads=4)),
    needles=("num_heads",), should="ValueError: the token width 2 is smaller than num_heads=4 "
    "(head_dim would be 0); set head_dim", fix=f"{fx}: EFA.__init__ (head_dim = d // "
    "num_heads can be 0 -> ZeroDivisionError in attention.SCALES)")
add(A, "EFA(EFAConfig([C4()], d_model=8))  # mix='none'",
    lambda: efa.EFA(efa.EFAConfig([C4()], d_model=8)), needles=("d_model",))
add(A, "EFA(EFAConfig([C4(feeds=('v',)), Value(...)], mix='linear', d_model=8))",
    lambda: efa.EFA(efa.EFAConfig([C4(feeds=("v",)), Value("y", fam.Gaussian(), dim=4)],
                                  mix="linear", d_model=8)), needles=("mix",))
add(A, "EFA(EFAConfig([C4(feeds=('q', 'k', 'v'))]))  # residual block without skip",
    lambda: efa.EFA(efa.EFAConfig([C4(feeds=("q", "k", "v"))])), needles=("skip",))
add(A, "EFA(EFAConfig([C4(feeds=('k', 'v', 'skip'))], block='concat'))  # nothing feeds q",
    lambda: efa.EFA(efa.EFAConfig([C4(feeds=("k", "v", "skip"))], block="concat")),
    needles=("'q'",))
add(A, "EFA(EFAConfig([C4()], out_proj=False, num_heads=3))",
    lambda: efa.EFA(efa.EFAConfig([C4()], out_proj=False, num_heads=3, head_dim=1)),
    needles=("out_proj",))
add(A, "EFA(EFAConfig([C4()]), num_layers=5)  # keyword ignored",
    lambda: (lambda m: (len(m.blocks) == 5, f"config has {len(m.blocks)} blocks; "
                        "num_layers=5 was silently ignored"))(
        efa.EFA(efa.EFAConfig([C4()]), num_layers=5)),
    needles=("num_layers",), should="TypeError: pass either a config or keywords, not both",
    fix=f"{fx}: EFA.__init__ (config or EFAConfig(**kwargs) drops kwargs)")
add(A, "EFA()", lambda: efa.EFA(), needles=("fields",))
add(A, "EFAConfig.from_dict({...'colour': 1})",
    lambda: efa.EFAConfig.from_dict({**efa.EFAConfig([C4()]).to_dict(), "colour": 1}),
    needles=("colour",))


@probe(A, "EFAConfig to_dict/from_dict round trip through JSON", kind="works")
def _():
    c = efa.EFAConfig([C4(distinct=True), Value("y", fam.Poisson(1), loc=1.0, scale=2.0),
                       Attribute("a", size=2)], attention={"kernel": "ot", "gamma": 0.5,
                                                           "cost": "positions"},
                      max_len=5, meta={"k": [1, 2]})
    d = json.loads(json.dumps(c.to_dict()))
    return efa.EFAConfig.from_dict(d).to_dict() == c.to_dict(), d["attention"]


add(A, "evaluate(model, data with extra field)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"item": [[1, 2]], "zz": [[0, 0]]})),
    needles=("zz",))
add(A, "evaluate(model, data without its field)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"other": [[1, 2]]})),
    needles=("item", "missing"))
add(A, "evaluate(model(max_len=4), sequences of length 5)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"item": [[0, 1, 2, 3, 4]]})),
    needles=("max_len",))
add(A, "evaluate(model, category id 6 of 6)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"item": [[0, 6]]})),
    needles=("sequence 0", "position 1"))
add(A, "evaluate(model, category id -1)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"item": [[0, -1]]})),
    needles=("position 1",))
add(A, "evaluate(model, categories as floats 1.0)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"item": [[0.0, 1.0]]})),
    needles=(".long()",))
add(A, "evaluate(model, categories 1.5)",
    lambda: efa.evaluate(cat_model(), Sequences.from_lists({"item": [[0.0, 1.5]]})),
    needles=("whole",))
add(A, "evaluate(mr_model, NaN rating)",
    lambda: efa.evaluate(mr_model(), Sequences.from_lists({"movie": [[0, 1]],
                                                           "rating": [[1.0, float("nan")]]})),
    needles=("rating",))
add(A, "evaluate(gv_model, NaN in padding of y)",
    lambda: efa.evaluate(gv_model(), Sequences({"c": torch.zeros(1, 2, 1),
                                                "y": T([[1.0, float("nan")]])}, T([1]))),
    needles=("padding",))
add(A, "evaluate(gv_model, y = 1e300 in float64 for a float32 model)",
    lambda: efa.evaluate(gv_model(), Sequences({"c": torch.zeros(1, 2, 1, dtype=torch.float64),
                                                "y": T([[1.0, 1e300]], dtype=torch.float64)},
                                               T([2]))), needles=("float32",))
add(A, "evaluate(gv_model, attribute of shape [N, I] instead of [N, I, 1])",
    lambda: efa.evaluate(gv_model(), Sequences({"c": torch.zeros(1, 2), "y": torch.zeros(1, 2)},
                                               T([2]))), needles=("'c'",))
add(A, "evaluate(gv_model, attribute int dtype)",
    lambda: efa.evaluate(gv_model(), Sequences({"c": torch.zeros(1, 2, 1, dtype=torch.long),
                                                "y": torch.zeros(1, 2)}, T([2]))),
    needles=("floating",))
add(A, "evaluate(distinct model, repeated item)",
    lambda: efa.evaluate(efa.EFA(efa.EFAConfig([Category("item", 6, dim=4, distinct=True)],
                                               max_len=4, num_layers=1, num_heads=1)),
                         Sequences.from_lists({"item": [[1, 2, 1]]})),
    needles=("distinct", "sequence 0"))


@probe(A, "evaluate: NaN at an unobserved position is ignored (finite result)", kind="works")
def _():
    d = Sequences.from_lists({"movie": [[0, 1, 2]], "rating": [[1.0, float("nan"), 2.0]]},
                             observed={"rating": [[True, False, True]]})
    d.fields["rating"] = torch.where(torch.isnan(d.fields["rating"]), -5.0,
                                     d.fields["rating"]).long()
    r = efa.evaluate(mr_model(), d)
    return all(math.isfinite(v) for v in r.values()), r


@probe(A, "evaluate: int32 categories work like int64", kind="works")
def _():
    d = cat_data()
    d32 = Sequences({"item": d.fields["item"].int()}, d.lengths)
    return efa.evaluate(cat_model(), d) == efa.evaluate(cat_model(), d32), "equal"


@probe(A, "evaluate: a field with no predicted position -> NaN + warning", kind="works")
def _():
    d = mr_data()
    d = Sequences(d.fields, d.lengths, {"rating": torch.zeros_like(d.valid())})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = efa.evaluate(mr_model(), d)
    return math.isnan(r["rating"]) and any("no predicted" in str(x.message) for x in w), r


@probe(A, "evaluate does not depend on batch_size", kind="works")
def _():
    m, d = mr_model(), mr_data()
    a, b = efa.evaluate(m, d, batch_size=1), efa.evaluate(m, d, batch_size=1000)
    return all(abs(a[k] - b[k]) < 1e-5 for k in a), (a, b)


@probe(A, "evaluate does not depend on the order of the sequences", kind="works")
def _():
    m, d = mr_model(), mr_data()
    a, b = efa.evaluate(m, d), efa.evaluate(m, d[torch.arange(len(d) - 1, -1, -1)])
    return all(abs(a[k] - b[k]) < 1e-5 for k in a), (a, b)


@probe(A, "set model (max_len=None, bidirectional): permuting tokens permutes log-liks",
       kind="works")
def _():
    m = gv_model()
    d = gv_data(n=2, length=4)
    perm = T([2, 0, 3, 1])
    dp = Sequences({"c": d.fields["c"][:, perm], "y": d.fields["y"][:, perm]}, d.lengths)
    a = efa.log_likelihoods(m, d)["y"][:, perm]
    b = efa.log_likelihoods(m, dp)["y"]
    return torch.allclose(a, b, atol=1e-5), (a[0].tolist(), b[0].tolist())


@probe(A, "evaluate/log_likelihoods do not mutate data and restore train mode", kind="works")
def _():
    m, d = mr_model(dropout=0.2), mr_data()
    before = snapshot(d)
    m.train()
    efa.evaluate(m, d)
    efa.log_likelihoods(m, d)
    return same_snapshot(before, snapshot(d)) and m.training, m.training


@probe(A, "predict_mean: class probabilities sum to 1 at real positions, NaN at padding",
       kind="works")
def _():
    m, d = cat_model(), cat_data()
    p = m.predict_mean(d)["item"]
    v = d.valid()
    return (torch.allclose(p[v].sum(-1), torch.ones(int(v.sum())), atol=1e-5)
            and bool(torch.isnan(p[~v]).all())), p[v].sum(-1)[:3].tolist()


@probe(A, "predict_mean of a distinct model puts zero mass on context items", kind="works")
def _():
    torch.manual_seed(0)
    m = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4, distinct=True)], max_len=4,
                              num_layers=1, num_heads=1))
    d = Sequences.from_lists({"item": [[0, 3, 5]]})
    p = m.predict_mean(d)["item"][0]
    return float(p[0, 3] + p[0, 5] + p[1, 0] + p[1, 5]) < 1e-6, p.tolist()


add(A, "model.predict_mean(data, at=<long 0/1 mask>)",
    lambda: cat_model().predict_mean(Sequences.from_lists({"item": [[0, 1, 2]]}),
                                     at=torch.ones(1, 3, dtype=torch.long)),
    needles=("at", "bool"), should="TypeError: at must be a bool tensor of shape [N, I]",
    fix=f"{fx}: ConditionalModel.predict_mean (and attention_weights) validate `at`")
add(A, "model.predict_mean(data, at=<bool of wrong shape [1, 2]>)",
    lambda: cat_model().predict_mean(Sequences.from_lists({"item": [[0, 1, 2]]}),
                                     at=torch.ones(1, 2, dtype=torch.bool)),
    needles=("at", "shape"), fix=f"{fx}: ConditionalModel.predict_mean")
add(A, "model.attention_weights(data, 'item', at=<long mask [[0, 1, 0]]>) == bool mask",
    lambda: (lambda m, d: (lambda a, b: (torch.equal(a, b), "same as the bool mask"))(
        m.attention_weights(d, "item", at=T([[0, 1, 0]])),
        m.attention_weights(d, "item", at=T([[False, True, False]]))))(
        cat_model(), Sequences.from_lists({"item": [[0, 1, 2]]})),
    kind="either", needles=("at",))
add(A, "mr_model().attention_weights(data, 'nope')",
    lambda: mr_model().attention_weights(mr_data(), "nope"), needles=("nope",))
add(A, "EFA with Category target=False: attention_weights(data, 'movie')",
    lambda: efa.EFA(efa.EFAConfig([Category("movie", 6, dim=4, target=False),
                                   Value("rating", fam.Poisson(1), dim=4)], max_len=4))
    .attention_weights(mr_data(), "movie"), needles=("not predicted",))


@probe(A, "attention_weights: softmax rows sum to 1 at asked rows, 0 elsewhere", kind="works")
def _():
    m, d = cat_model(num_layers=2, num_heads=2), cat_data()
    w = m.attention_weights(d, "item")
    s = w.sum(-1)  # [L, B, H, I]
    v = d.valid()[None, :, None, :].expand_as(s)
    return (torch.allclose(s[v], torch.ones(int(v.sum())), atol=1e-5)
            and bool((s[~v] == 0).all())), s[0, 0, 0].tolist()


def _nan_model():
    m = cat_model()
    with torch.no_grad():
        m.readouts["item"].net.weight[0, 0] = float("nan")
    return m


add(A, "model with a NaN weight: predict_mean",
    lambda: (lambda p: (bool(torch.isfinite(p[cat_data().valid()]).all()),
                        f"returned {int(torch.isnan(p).any(-1).sum())} NaN rows, no error"))(
        _nan_model().predict_mean(cat_data())["item"]),
    needles=("non-finite",), should="FloatingPointError naming field and position (README: "
    "no function returns a non-finite number without an error)",
    fix=f"{fx}: ConditionalModel.predict_mean (check finiteness like train.predictions)")
add(A, "model with a NaN weight: efa.log_likelihoods",
    lambda: (lambda lp: (False, f"{int(torch.isnan(lp[cat_data().valid()]).sum())} NaN "
                         "log-likelihoods at predicted positions, indistinguishable from "
                         "'not predicted'"))(efa.log_likelihoods(_nan_model(), cat_data())["item"]),
    needles=("non-finite",), should="FloatingPointError naming the position",
    fix="src/efa/training/train.py: log_likelihoods (check finiteness at predicted positions, as "
    "evaluate does)")
add(A, "model with a NaN weight: evaluate", lambda: efa.evaluate(_nan_model(), cat_data()),
    needles=("non-finite", "sequence"))
add(A, "model with a NaN weight: attention_weights",
    lambda: (lambda w: (bool(torch.isfinite(w).all()), "finite"))(
        _nan_model().attention_weights(cat_data(), "item")), kind="either",
    needles=("non-finite",))


@probe(A, "log_likelihoods with an extreme value (y = 1e30, float32 model)", kind="either",
       needles=("non-finite",), should="an error naming the position (evaluate raises for the "
       "same data)", fix="src/efa/training/train.py: log_likelihoods")
def _():
    m = gv_model()
    d = gv_data(n=1, length=3)
    d.fields["y"][0, 1] = 1e30
    lp = efa.log_likelihoods(m, d)["y"]
    ev = None
    try:
        efa.evaluate(m, d)
    except Exception as e:  # noqa: BLE001
        ev = type(e).__name__
    return bool(torch.isfinite(lp).all()), f"log_likelihoods = {lp.tolist()}, evaluate -> {ev}"


@probe(A, "EFA does not mutate the user's Value field (fit standardises a copy)", kind="works")
def _():
    v = Value("y", fam.Gaussian(), dim=4, hidden=4)
    m = efa.EFA(efa.EFAConfig([Attribute("c", dim=4, hidden=4), v], num_layers=1, num_heads=1))
    quiet_fit(m, gv_data())
    return v.loc is None and v.scale is None and m.fields[1].loc is not None, (v.loc, v.scale)


@probe(A, "fit does not mutate the training data", kind="works")
def _():
    d = mr_data()
    before = snapshot(d)
    quiet_fit(mr_model(), d, d)
    return same_snapshot(before, snapshot(d)), "unchanged"


@probe(A, "vocab_chunk model evaluates like the dense model", kind="works")
def _():
    torch.manual_seed(0)
    a = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4)], max_len=4, num_layers=1))
    b = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4, vocab_chunk=4)], max_len=4,
                              num_layers=1))
    b.load_state_dict(a.state_dict())
    x, y = efa.evaluate(a, cat_data()), efa.evaluate(b, cat_data())
    return abs(x["item"] - y["item"]) < 1e-5, (x, y)


@probe(A, "bag=True model: fit + evaluate finite", kind="works")
def _():
    torch.manual_seed(0)
    m = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4, bag=True, bag_l2=0.1)], max_len=4,
                              num_layers=1))
    quiet_fit(m, cat_data(), cat_data(seed=1))
    r = efa.evaluate(m, cat_data(seed=2))
    return math.isfinite(r["item"]), r


add(A, "warm_start(base with other mix)", lambda: mr_model(mix="linear", d_model=8).warm_start(
    mr_model()), needles=("mix",))
add(A, "warm_start(base with a field this model lacks)",
    lambda: efa.EFA(efa.EFAConfig([Category("movie", 6, dim=4)], max_len=4, mix="linear",
                                  d_model=8)).warm_start(mr_model(mix="linear", d_model=8)),
    needles=("rating",))


@probe(A, "warm_start copies a same-day model exactly", kind="works")
def _():
    base = efa.EFA(efa.EFAConfig([Category("movie", 6, dim=4),
                                  Value("rating", fam.Poisson(1), dim=4)], max_len=4,
                                 mix="linear", d_model=8, num_layers=1))
    big = efa.EFA(efa.EFAConfig([Category("movie", 6, dim=4),
                                 Value("rating", fam.Poisson(1), dim=4),
                                 Category("extra", 3, dim=4, target=False)], max_len=4,
                                mix="linear", d_model=8, num_layers=1)).warm_start(base)
    d = mr_data()
    d2 = Sequences({**d.fields, "extra": torch.zeros_like(d.fields["movie"])}, d.lengths)
    a, b = efa.evaluate(base, d), efa.evaluate(big, d2)
    return all(abs(a[k] - b[k]) < 1e-5 for k in a), (a, b)


# =========================================================================== kernels
A = "kernels"
fx = "src/efa/core/kernels/"


def kcfg(att, **kw):
    return efa.EFAConfig([Category("item", 6, dim=4)], max_len=4, attention=att, **kw)


kerr = [
    ({"kernel": "softmax", "temperature": 2}, ("softmax",)),
    ({"kernel": "linear", "x": 1}, ("linear",)),
    ({"kernel": "generalized", "alpha": 0}, ("alpha",)),
    ({"kernel": "generalized", "alpha": -1}, ("alpha",)),
    ({"kernel": "generalized", "alpha": float("inf")}, ("alpha",)),
    ({"kernel": "generalized", "alpha": float("nan")}, ("alpha",)),
    ({"kernel": "generalized", "alpha": "1"}, ("alpha",)),
    ({"kernel": "generalized", "alpha": True}, ("alpha",)),
    ({"kernel": "generalized", "relative": "yes"}, ("relative",)),
    ({"kernel": "generalized", "relative": "auto", "num_buckets": 3}, ("num_buckets",)),
    ({"kernel": "generalized", "relative": "auto", "max_distance": 2}, ("max_distance",)),
    ({"kernel": "generalized", "relative": "auto", "num_buckets": 2.0}, ("num_buckets",)),
    ({"kernel": "generalized", "context": -1}, ("context",)),
    ({"kernel": "generalized", "context": 2, "context_hidden": 0}, ("context_hidden",)),
    ({"kernel": "generalized", "learn_alpha": "yes"}, ("learn_alpha",)),
    ({"kernel": "generalized", "alhpa": 2}, ("alhpa",)),
    ({"kernel": "fenchel", "tol": 0}, ("tol",)),
    ({"kernel": "fenchel", "tol": 1.5}, ("tol",)),
    ({"kernel": "fenchel", "max_iter": 0}, ("max_iter",)),
    ({"kernel": "fenchel", "max_iter": 2.5}, ("max_iter",)),
    ({"kernel": "fenchel", "precision": "float16"}, ("precision",)),
    ({"kernel": "second_order", "tol": 2}, ("tol",)),
    ({"kernel": "second_order", "max_iter": 5}, ("max_iter",)),
    ({"kernel": "ot", "gamma": 0}, ("gamma",)),
    ({"kernel": "ot", "gamma": float("inf")}, ("gamma",)),
    ({"kernel": "ot", "cost_scale": -1}, ("cost_scale",)),
    ({"kernel": "ot", "cost": "euclid"}, ("cost",)),
    ({"kernel": "ot", "cost": [[0, 1], [2, 0]]}, ("symmetric",)),
    ({"kernel": "ot", "cost": [[0, -1], [-1, 0]]}, ("non-negative",)),
    ({"kernel": "ot", "cost": [[0, float("nan")], [float("nan"), 0]]}, ("nan",)),
    ({"kernel": "ot", "cost": [[0, 1], [1]]}, ("square",)),
    ({"kernel": "ot", "cost": [[0, 1, 2], [1, 0, 1]]}, ("square",)),
    ({"kernel": "ot", "cost": [["a", "b"], ["b", "a"]]}, ("cost",)),
    ({"kernel": "ot", "cost": [[5, 1], [1, 5]]}, ("diagonal",)),
    ({"kernel": "ot", "learn_gamma": "no"}, ("learn_gamma",)),
    ({"kernel": "cme", "similarity": "cosine"}, ("similarity",)),
    ({"kernel": "cme", "bandwidth": 0}, ("bandwidth",)),
    ({"kernel": "cme", "bandwidth": float("nan")}, ("bandwidth",)),
    ({"kernel": "cme", "bandwidth": True}, ("bandwidth",)),
    ({"kernel": "cme", "ridge": 1e-5}, ("ridge",)),
    ({"kernel": "cme", "min_ridge": 0}, ("min_ridge",)),
    ({"kernel": "cme", "learn": "yes"}, ("learn",)),
    ({"kernel": "cme", "posterior_variance": 1}, ("posterior_variance",)),
    ({"kernel": "cme", "rbf_dims": 1}, ("rbf_dims",)),
    ({"kernel": "cme", "similarity": "rbf+linear"}, ("rbf_dims",)),
    ({"kernel": "cme", "similarity": "rbf+linear", "rbf_dims": 0}, ("rbf_dims",)),
    ({"kernel": "cme", "similarity": "rbf+linear", "rbf_dims": 1.0}, ("rbf_dims",)),
    ({"kernel": "cme", "bandwith": 1}, ("bandwith",)),
    ({"kernel": None}, ("kernel",)),
    ({}, ("kernel",)),
]
for att, needles in kerr:
    add(A, f"EFAConfig(attention={att!r})", lambda att=att: kcfg(att), needles=needles,
        fix=f"{fx} check_options")
add(A, "EFA(attention={'kernel': 'cme', 'similarity': 'rbf+linear', 'rbf_dims': 9}) head_dim 2",
    lambda: efa.EFA(kcfg({"kernel": "cme", "similarity": "rbf+linear", "rbf_dims": 9},
                         num_heads=2)), needles=("rbf_dims",))


@probe(A, "ot cost matrix smaller than the sequences", needles=("cost matrix", "positions"))
def _():
    m = efa.EFA(kcfg({"kernel": "ot", "cost": [[0, 1], [1, 0]]}, num_layers=1, num_heads=1))
    efa.evaluate(m, Sequences.from_lists({"item": [[0, 1, 2, 3]]}))


for att in ("softmax", "linear", {"kernel": "generalized", "relative": "auto", "context": 2},
            {"kernel": "second_order"}, {"kernel": "fenchel", "alpha": 2.0},
            {"kernel": "ot", "gamma": 0.5}, {"kernel": "ot", "cost": "positions"},
            {"kernel": "cme"}, {"kernel": "cme", "similarity": "linear"},
            {"kernel": "cme", "similarity": "exponential"},
            {"kernel": "cme", "posterior_variance": True}):
    for direction in ("bidirectional", "unidirectional"):
        def _k(att=att, direction=direction):
            torch.manual_seed(0)
            m = efa.EFA(kcfg(att, num_layers=2, num_heads=2, direction=direction))
            r = efa.evaluate(m, cat_data())
            p = m.predict_mean(cat_data())["item"][cat_data().valid()]
            ok = math.isfinite(r["item"]) and torch.allclose(p.sum(-1), torch.ones(len(p)),
                                                             atol=1e-4)
            return ok, r
        add(A, f"evaluate + predict_mean, attention={att!r}, {direction}, 2 layers", _k,
            kind="works")


@probe(A, "two_stream and copies agree (1-layer generalized, bidirectional)", kind="works")
def _():
    torch.manual_seed(0)
    a = efa.EFA(kcfg({"kernel": "generalized", "relative": "auto"}, num_layers=1,
                     mode="two_stream"))
    b = efa.EFA(kcfg({"kernel": "generalized", "relative": "auto"}, num_layers=1, mode="copies"))
    b.load_state_dict(a.state_dict())
    x, y = efa.evaluate(a, cat_data()), efa.evaluate(b, cat_data())
    return abs(x["item"] - y["item"]) < 1e-5, (x, y)


@probe(A, "register_kernel(class without name)", needles=("name",))
def _():
    class K(efa.core.kernels.Kernel):
        pass
    efa.register_kernel(K)


@probe(A, "register_kernel(a plug-in named 'softmax') replaces the built-in", kind="err",
       needles=("softmax", "registered"), should="refuse to replace an already registered "
       "kernel (every model in the process silently switches kernel)",
       fix="src/efa/core/attention.py: register_kernel")
def _():
    old = efa.KERNELS["softmax"]

    class Fake(efa.core.kernels.dot.Softmax):
        name = "softmax"
    try:
        efa.register_kernel(Fake)
        replaced = efa.KERNELS["softmax"] is Fake
    finally:
        if efa.KERNELS["softmax"] is not old:
            efa.KERNELS.unregister("softmax")
            efa.KERNELS.register(old, name="softmax")
    return (not replaced), f"replaced silently: {replaced}"


# =========================================================================== train
A = "train"
fx = "src/efa/training/train.py"
tcerr = [
    ("lr", 0), ("lr", -1), ("lr", float("nan")), ("lr", float("inf")), ("lr", "0.1"),
    ("lr", True), ("weight_decay", -1), ("weight_decay", float("nan")), ("batch_size", 0),
    ("batch_size", 1.5), ("batch_size", True), ("batch_size", -1), ("max_epochs", 0),
    ("max_epochs", 2.0), ("patience", 0), ("warmup_steps", -1), ("seed", 1.5), ("seed", "0"),
    ("eval_batch_size", 0), ("threads", 0), ("positions", 0), ("sampled_softmax", 0),
    ("grad_clip", 0), ("grad_clip", -1), ("grad_clip", float("nan")), ("min_delta", -1),
    ("schedule", "cosin"), ("proposal", "zipf"), ("autocast", "fp8"), ("monitor", "rating"),
    ("monitor", ()), ("monitor", (1,)),
]
for k, v in tcerr:
    add(A, f"efa.fit(mr_model(), mr_data(), {k}={v!r})",
        lambda k=k, v=v: efa.fit(mr_model(), mr_data(), progress=False, **{k: v}),
        needles=(k,))
for k, v in (("progress", "no"), ("resume", "False"), ("drop_last", "False")):
    add(A, f"efa.TrainConfig({k}={v!r})  # string for a bool",
        lambda k=k, v=v: (lambda c: (False, f"accepted {k}={getattr(c, k)!r} (truthy)"))(
            efa.TrainConfig(**{k: v})),
        needles=(k,), should=f"refuse a non-bool {k} ('False' is truthy: resume/drop_last do "
        "the opposite of what was written)", fix=f"{fx}: TrainConfig.__post_init__")
add(A, "efa.fit(m, d, None, {'lr': 0.1})  # dict as config",
    lambda: efa.fit(mr_model(), mr_data(), None, {"lr": 0.1}), needles=("TrainConfig",))
add(A, "efa.fit(m, d, max_epoch=3)  # misspelt", lambda: efa.fit(mr_model(), mr_data(),
                                                                 max_epoch=3),
    needles=("max_epoch",))
add(A, "efa.fit(m, d, monitor=('nope',))",
    lambda: efa.fit(mr_model(), mr_data(), mr_data(), monitor=("nope",), progress=False),
    needles=("nope",))
add(A, "efa.fit(m, 'data.safetensors')", lambda: efa.fit(mr_model(), "data.safetensors"),
    needles=("Sequences",))
add(A, "efa.fit(m, d, efa.TrainConfig())  # config in val's place",
    lambda: efa.fit(mr_model(), mr_data(), efa.TrainConfig()), needles=("Sequences",))
add(A, "efa.fit(m, d, device='cuda')", lambda: efa.fit(mr_model(), mr_data(), device="cuda",
                                                       progress=False),
    needles=("cuda",))
add(A, "efa.fit(m, d, device='tpu')", lambda: efa.fit(mr_model(), mr_data(), device="tpu",
                                                      progress=False),
    needles=("tpu",))
add(A, "efa.fit(m, d, positions=9)  # > max_len", lambda: efa.fit(mr_model(), mr_data(),
                                                                  positions=9, progress=False),
    needles=("positions",))
add(A, "efa.fit(m, d, batch_size=100, drop_last=True)",
    lambda: efa.fit(mr_model(), mr_data(), batch_size=100, drop_last=True, progress=False),
    needles=("drop_last",))
add(A, "efa.fit(m, data with every rating unobserved)",
    lambda: efa.fit(mr_model(), Sequences(mr_data().fields, mr_data().lengths,
                                          {"rating": torch.zeros(8, 4, dtype=torch.bool)}),
                    progress=False), needles=("rating", "no predicted"))
add(A, "efa.fit(m, d, val with scored all False)",
    lambda: efa.fit(mr_model(), mr_data(), mr_data().with_scored(
        torch.zeros(8, 4, dtype=torch.bool)), progress=False), needles=("validation",))
add(A, "efa.fit(CategoricalFM, d, sampled_softmax=2)",
    lambda: (lambda h: (True, f"ran {h.epochs_run} epochs"))(
        quiet_fit(efa.CategoricalFM(Category("item", 6), dim=4), cat_data(),
                  sampled_softmax=2)), kind="either", needles=("sampled",))
add(A, "efa.fit(bag model, sampled_softmax=2)",
    lambda: quiet_fit(efa.EFA(efa.EFAConfig([Category("item", 6, dim=4, bag=True)], max_len=4,
                                            num_layers=1)), cat_data(), sampled_softmax=2),
    needles=("bag",))


@probe(A, "fit restores the best epoch: History.best_val == -evaluate(val)", kind="works")
def _():
    m = mr_model()
    h = quiet_fit(m, mr_data(), mr_data(seed=1), max_epochs=4, lr=0.05)
    v = -sum(efa.evaluate(m, mr_data(seed=1)).values())
    return abs(h.best_val - v) < 1e-5, (h.best_val, v, h.val_loss)


@probe(A, "fit: same seed, same weights", kind="works")
def _():
    a, b = mr_model(), mr_model()
    quiet_fit(a, mr_data(), max_epochs=2, seed=3, batch_size=3)
    quiet_fit(b, mr_data(), max_epochs=2, seed=3, batch_size=3)
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values())), "identical"


@probe(A, "fit(threads=1) restores the caller's thread count", kind="works")
def _():
    torch.set_num_threads(2)
    try:
        quiet_fit(mr_model(), mr_data(), threads=1)
        n = torch.get_num_threads()
    finally:
        torch.set_num_threads(1)
    return n == 2, n


@probe(A, "fit(lr=1e6) diverging -> FloatingPointError and finite weights left",
       kind="either", needles=("non-finite",))
def _():
    m = mr_model()
    try:
        quiet_fit(m, mr_data(), mr_data(seed=1), max_epochs=3, lr=1e6, grad_clip=None)
    except FloatingPointError as e:
        ok = all(torch.isfinite(p).all() for p in m.parameters())
        return ok, f"raised ({str(e)[:120]}); weights finite: {ok}"
    ok = all(torch.isfinite(p).all() for p in m.parameters())
    return ok, f"no error; weights finite: {ok}"


@probe(A, "fit warns StillImproving when the best epoch is the last", kind="works")
def _():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        efa.fit(mr_model(), mr_data(), mr_data(), max_epochs=1, progress=False)
    return any(issubclass(x.category, efa.training.train.StillImproving) for x in w), [str(x.message)[:60]
                                                                           for x in w]


@probe(A, "fit(positions=2) on EFA runs and is finite", kind="works")
def _():
    h = quiet_fit(mr_model(), mr_data(), positions=2, max_epochs=2)
    return all(math.isfinite(v) for v in h.train_loss), h.train_loss


@probe(A, "fit on a float64 model", kind="works")
def _():
    m = mr_model().double()
    h = quiet_fit(m, mr_data())
    return math.isfinite(h.train_loss[0]) and next(m.parameters()).dtype == torch.float64, \
        h.train_loss


@probe(A, "efa.fit(checkpoint_dir=<a file>)", needles=("checkpoint",),
       should="an error before training naming checkpoint_dir and saying it is a file",
       fix=f"{fx}: fit (check checkpoint_dir up front)")
def _():
    f = tmpdir("ckfile") / "afile"
    f.write_text("x")
    quiet_fit(mr_model(), mr_data(), checkpoint_dir=str(f))


@probe(A, "checkpoint resume gives the same weights as an uninterrupted fit", kind="works")
def _():
    d = tmpdir("ckres")
    a = mr_model()
    quiet_fit(a, mr_data(), max_epochs=3, checkpoint_dir=str(d / "a"))
    b = mr_model()
    quiet_fit(b, mr_data(), max_epochs=3, checkpoint_dir=str(d / "b"))  # fresh
    c = mr_model()
    quiet_fit(c, mr_data(), max_epochs=3, checkpoint_dir=str(d / "a"))  # resumes at the end
    same = all(torch.equal(x, y) for x, y in zip(b.state_dict().values(),
                                                 c.state_dict().values()))
    return same, "resumed == fresh"


add(A, "resume a checkpoint with other data", lambda: (
    quiet_fit(mr_model(), mr_data(), checkpoint_dir=str(tmpdir("ckdata"))),
    quiet_fit(mr_model(), mr_data(seed=5), checkpoint_dir=str(WORK / "ckdata")))[1],
    needles=("another data",))
add(A, "resume a checkpoint with other settings (lr)", lambda: (
    quiet_fit(mr_model(), mr_data(), checkpoint_dir=str(tmpdir("ckset"))),
    quiet_fit(mr_model(), mr_data(), lr=0.1, checkpoint_dir=str(WORK / "ckset")))[1],
    needles=("lr",))


def _ck():
    d = tmpdir("cktamper")
    quiet_fit(mr_model(), mr_data(), max_epochs=1, checkpoint_dir=str(d))
    return d, d / "checkpoint.safetensors"


@probe(A, "resume: checkpoint with a wrongly sized RNG state (weights untouched?)",
       needles=("damaged",), should="ValueError '... is damaged' before the model changes "
       "(the docstring promises: a damaged file leaves the model as it was)",
       fix=f"{fx}: _restore (validate rng tensors, optimizer and weight shapes inside the "
       "try block, before load_state_dict)")
def _():
    d, p = _ck()
    tamper_safetensors(p, edit_tensors=lambda t: {**t, "rng/generator": torch.zeros(3,
                                                                                   dtype=torch.uint8)})
    m = mr_model()
    before = {k: v.detach().clone() for k, v in m.named_parameters()}
    try:
        quiet_fit(m, mr_data(), max_epochs=1, checkpoint_dir=str(d))
    except Exception as e:
        changed = not all(torch.equal(before[k], v) for k, v in m.named_parameters())
        raise type(e)(f"{e} [model weights changed before the error: {changed}]") from None


@probe(A, "resume: checkpoint with a weight of the wrong shape", needles=("damaged",),
       fix=f"{fx}: _restore")
def _():
    d, p = _ck()

    def edit(t):
        k = next(k for k in t if k.startswith("model/") and k.endswith("table.weight"))
        return {**t, k: torch.zeros(2, 2)}
    tamper_safetensors(p, edit_tensors=edit)
    quiet_fit(mr_model(), mr_data(), max_epochs=1, checkpoint_dir=str(d))


@probe(A, "resume: checkpoint metadata 'bad' = 'x'", needles=("damaged",))
def _():
    d, p = _ck()

    def edit(m):
        meta = json.loads(m["efa_checkpoint"])
        meta["bad"] = "x"
        return {"efa_checkpoint": json.dumps(meta)}
    tamper_safetensors(p, edit_meta=edit)
    quiet_fit(mr_model(), mr_data(), max_epochs=1, checkpoint_dir=str(d))


@probe(A, "resume: checkpoint metadata not JSON", needles=("not a readable",))
def _():
    d, p = _ck()
    tamper_safetensors(p, edit_meta=lambda m: {"efa_checkpoint": "{oops"})
    quiet_fit(mr_model(), mr_data(), max_epochs=2, checkpoint_dir=str(d))


@probe(A, "resume: checkpoint truncated", needles=("not a readable",))
def _():
    d, p = _ck()
    p.write_bytes(p.read_bytes()[:100])
    quiet_fit(mr_model(), mr_data(), max_epochs=2, checkpoint_dir=str(d))


@probe(A, "resume: a planted checkpoint.safetensors pickle", kind="sec",
       needles=("not a readable",))
def _():
    d = tmpdir("ckpickle")
    planted_pickle(d / "checkpoint.safetensors", d / "PWNED")
    try:
        quiet_fit(mr_model(), mr_data(), checkpoint_dir=str(d))
    finally:
        if (d / "PWNED").exists():
            return False, "pickle executed"
    return True, "not executed"


@probe(A, "resume: a planted checkpoint.pt (efa 0.1 pickle)", kind="sec", needles=("pickle",))
def _():
    d = tmpdir("ckpt_legacy")
    planted_pickle(d / "checkpoint.pt", d / "PWNED")
    try:
        quiet_fit(mr_model(), mr_data(), checkpoint_dir=str(d))
    finally:
        if (d / "PWNED").exists():
            return False, "pickle executed"
    return True, "not executed"


@probe(A, "checkpoint settings: resume with more max_epochs continues the run", kind="either",
       needles=("max_epochs",), should="either continue (a longer run) or say max_epochs "
       "differs")
def _():
    d = tmpdir("ckmore")
    quiet_fit(mr_model(), mr_data(), max_epochs=1, checkpoint_dir=str(d))
    h = quiet_fit(mr_model(), mr_data(), max_epochs=2, checkpoint_dir=str(d))
    return h.epochs_run == 2, h.epochs_run


add(A, "efa.evaluate(m, d, fields='rating')  # a string, not a tuple",
    lambda: efa.evaluate(mr_model(), mr_data(), fields="rating"),
    needles=("'rating'",), should="treat a string as one field name, or say fields must be a "
    "tuple (it lists the characters ['r', 'a', ...] as unknown fields)",
    fix=f"{fx}: evaluate / check_targets")
add(A, "efa.evaluate(m, d, fields=('nope',))",
    lambda: efa.evaluate(mr_model(), mr_data(), fields=("nope",)), needles=("nope",))
add(A, "efa.evaluate(m, d, batch_size=0)", lambda: efa.evaluate(mr_model(), mr_data(),
                                                                batch_size=0),
    needles=("batch_size",))
add(A, "efa.evaluate(m, d.fields)", lambda: efa.evaluate(mr_model(), mr_data().fields),
    needles=("Sequences",))
add(A, "efa.log_likelihoods(m, d, batch_size=0)",
    lambda: efa.log_likelihoods(mr_model(), mr_data(), batch_size=0), needles=("batch_size",))
add(A, "efa.predictions(m, d, None)", lambda: efa.predictions(mr_model(), mr_data(), None),
    needles=("name",), should="use the first target field (as model.target(None) does) or "
    "refuse None with a message", fix=f"{fx}: predictions (uses `name` after resolving `f`: "
    "use f.name)")
add(A, "efa.predictions(m, d, 'nope')", lambda: efa.predictions(mr_model(), mr_data(), "nope"),
    needles=("nope",))
add(A, "efa.mean_squared_error(m, d, 'movie')",
    lambda: efa.mean_squared_error(mr_model(), mr_data(), "movie"), needles=("movie",))
add(A, "efa.mean_squared_error(m, d, None)",
    lambda: efa.mean_squared_error(gv_model(), gv_data(), None), needles=("name",),
    fix=f"{fx}: mean_squared_error / predictions (KeyError: None)")
add(A, "efa.mean_squared_error(gv_model(), data with every y unobserved)",
    lambda: efa.mean_squared_error(gv_model(), Sequences(
        gv_data().fields, gv_data().lengths, {"y": torch.zeros(8, 4, dtype=torch.bool)}), "y"),
    needles=("no predicted",))


@probe(A, "mean_squared_error equals mean((y - predictions)^2)", kind="works")
def _():
    m, d = gv_model(), gv_data()
    y, mu = efa.predictions(m, d, "y")
    mse = efa.mean_squared_error(m, d, "y")
    return abs(mse - float(((y - mu) ** 2).mean())) < 1e-6 and len(y) == 32, (mse, len(y))


@probe(A, "log_likelihoods: NaN exactly where not predicted, sum = evaluate * count",
       kind="works")
def _():
    m, d = mr_model(), mr_data()
    lp = efa.log_likelihoods(m, d)
    ev = efa.evaluate(m, d)
    ok = True
    for k, v in lp.items():
        pred = d.predicted(k)
        ok &= bool(torch.isnan(v[~pred]).all()) and bool(torch.isfinite(v[pred]).all())
        ok &= abs(float(v[pred].mean()) - ev[k]) < 1e-5
    return ok, ev


add(A, "efa.seed_everything(-1)", lambda: efa.seed_everything(-1), needles=("seed",))
add(A, "efa.seed_everything('a')", lambda: efa.seed_everything("a"), needles=("seed",),
    fix=f"{fx}: seed_everything (validate)")
add(A, "efa.seed_everything(2**40)", lambda: efa.seed_everything(2**40), needles=("seed",),
    fix=f"{fx}: seed_everything")


# =========================================================================== io
A = "io"
fx = "src/efa/training/storage.py"
add(A, "efa.save(CategoricalFM(...), dir)",
    lambda: efa.save(efa.CategoricalFM(Category("item", 6)), tmpdir("save_fm")),
    needles=("EFA",))
add(A, "efa.save('not a model', dir)", lambda: efa.save("m", tmpdir("save_str")),
    needles=("EFA",))


@probe(A, "efa.save(model, <a file>)", needles=("not a folder",))
def _():
    f = tmpdir("save_file") / "f"
    f.write_text("x")
    efa.save(cat_model(), f)


@probe(A, "efa.save twice without overwrite", needles=("overwrite",))
def _():
    p = tmpdir("save_twice") / "m"
    efa.save(cat_model(), p)
    efa.save(cat_model(), p)


@probe(A, "efa.save(model with EFAConfig(meta={'w': np.float32(1)}))", needles=("meta",),
       should="refuse non-JSON meta before writing anything (it raises a bare TypeError after "
       "model.safetensors was written, leaving a folder without config.json)",
       fix=f"{fx}: save (json.dumps the metadata first) and model.EFAConfig.__post_init__ "
       "(check meta is JSON)")
def _():
    p = tmpdir("save_meta") / "m"
    m = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4)], max_len=4,
                              meta={"w": np.float32(1)}))
    try:
        efa.save(m, p)
    except Exception as e:
        left = sorted(x.name for x in p.iterdir()) if p.exists() else []
        raise type(e)(f"{e} [left behind: {left}]") from None


@probe(A, "efa.save(overwrite=True) over a model, meta not JSON: old config + new weights?",
       kind="works", should="the folder still holds one consistent model",
       fix=f"{fx}: save (serialise the config before replacing the weights)")
def _():
    p = tmpdir("save_meta2") / "m"
    a = cat_model()
    efa.save(a, p)
    torch.manual_seed(5)
    b = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4)], max_len=4, num_layers=1,
                              num_heads=1, meta={"w": np.float32(1)}))
    with contextlib.suppress(TypeError):
        efa.save(b, p, overwrite=True)
    c = efa.load(p)
    d = cat_data()
    ra, rb, rc = efa.evaluate(a, d), efa.evaluate(b, d), efa.evaluate(c, d)
    return rc == ra, f"after a failed save the folder's model scores {rc}, the old {ra}, " \
        f"the new {rb}"


@probe(A, "save/load round trip of a fitted model: identical predictions", kind="works")
def _():
    p = tmpdir("save_rt") / "m"
    m = gv_model()
    hist = quiet_fit(m, gv_data(), max_epochs=2)
    efa.save(m, p, history=hist)
    n = efa.load(p)
    a, b = m.predict_mean(gv_data())["y"], n.predict_mean(gv_data())["y"]
    threads = efa.training.storage.metadata(p)["train_threads"]
    return torch.equal(a, b) and n.fields[1].loc == m.fields[1].loc \
        and threads == 1, (float((a - b).abs().max()), threads)


@probe(A, "save/load round trip with every kernel option and a bag", kind="works")
def _():
    p = tmpdir("save_rt2") / "m"
    torch.manual_seed(0)
    m = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4, bag=True, labels=list("abcdef"))],
                              max_len=4, num_layers=1,
                              attention={"kernel": "ot", "cost": [[0, 1, 2, 3], [1, 0, 1, 2],
                                                                  [2, 1, 0, 1], [3, 2, 1, 0]]}))
    efa.save(m, p)
    n = efa.load(p)
    return efa.evaluate(m, cat_data()) == efa.evaluate(n, cat_data()), n.fields[0].labels


@probe(A, "efa.save to a unicode path with spaces", kind="works")
def _():
    p = tmpdir("save uni") / "mödel ü"
    efa.save(cat_model(), p)
    return efa.evaluate(efa.load(p), cat_data()) == efa.evaluate(cat_model(), cat_data()), p


add(A, "efa.load('/tmp/probes/work/none')", lambda: efa.load(WORK / "none"),
    needles=("not found",))


def _saved_model(name):
    p = tmpdir(name) / "m"
    efa.save(mr_model(), p)
    return p


def _edit_config(p, fn):
    meta = json.loads((p / "config.json").read_text())
    meta = fn(meta)
    (p / "config.json").write_text(json.dumps(meta) if not isinstance(meta, str) else meta)


add(A, "efa.load(config.json not JSON)", lambda: (lambda p: (
    (p / "config.json").write_text("{oops"), efa.load(p)))(_saved_model("ld_badjson")),
    needles=("config.json", "JSON"))
add(A, "efa.load(config.json = [])", lambda: (lambda p: (
    _edit_config(p, lambda m: []), efa.load(p)))(_saved_model("ld_list")),
    needles=("config.json",))
add(A, "efa.load(config.json format 2)", lambda: (lambda p: (
    _edit_config(p, lambda m: {**m, "format": 2}), efa.load(p)))(_saved_model("ld_fmt")),
    needles=("config.json",))
add(A, "efa.load(config with field kind 'tensor')", lambda: (lambda p: (
    _edit_config(p, lambda m: {**m, "config": {**m["config"], "fields": [
        {**m["config"]["fields"][0], "kind": "tensor"}]}}), efa.load(p)))(
    _saved_model("ld_kind")), needles=("config.json", "tensor"))
add(A, "efa.load(config with attention 'flash')", lambda: (lambda p: (
    _edit_config(p, lambda m: {**m, "config": {**m["config"], "attention": "flash"}}),
    efa.load(p)))(_saved_model("ld_att")), needles=("config.json", "flash"))
add(A, "efa.load(config with num_layers -1)", lambda: (lambda p: (
    _edit_config(p, lambda m: {**m, "config": {**m["config"], "num_layers": -1}}),
    efa.load(p)))(_saved_model("ld_layers")), needles=("config.json", "num_layers"))
add(A, "efa.load(config without 'config')", lambda: (lambda p: (
    _edit_config(p, lambda m: {k: v for k, v in m.items() if k != "config"}),
    efa.load(p)))(_saved_model("ld_noconf")), needles=("config.json",),
    fix=f"{fx}: load (meta['config'] KeyError)")
add(A, "efa.load(config with num_layers 3: weights do not fit)", lambda: (lambda p: (
    _edit_config(p, lambda m: {**m, "config": {**m["config"], "num_layers": 3}}),
    efa.load(p)))(_saved_model("ld_fit")), needles=("model.safetensors", "does not fit"))
add(A, "efa.load(config with num_categories 10**14)", lambda: (lambda p: (
    _edit_config(p, lambda m: {**m, "config": {**m["config"], "fields": [
        {**m["config"]["fields"][0], "num_categories": 10**14},
        m["config"]["fields"][1]]}}), efa.load(p)))(_saved_model("ld_huge")),
    needles=("config.json",), should="a ValueError naming the file (a tampered config makes "
    "a raw allocator RuntimeError)", fix=f"{fx}: load (wrap EFA(config) errors, or check sizes)")
add(A, "efa.load(model.safetensors truncated)", lambda: (lambda p: (
    (p / "model.safetensors").write_bytes((p / "model.safetensors").read_bytes()[:50]),
    efa.load(p)))(_saved_model("ld_trunc")), needles=("model.safetensors",))
add(A, "efa.load(model.safetensors with an extra tensor)", lambda: (lambda p: (
    tamper_safetensors(p / "model.safetensors",
                       edit_tensors=lambda t: {**t, "evil": torch.zeros(1)}), efa.load(p)))(
    _saved_model("ld_extra")), needles=("model.safetensors",))


@probe(A, "efa.load(model.safetensors is a planted pickle)", kind="sec",
       needles=("model.safetensors",))
def _():
    p = _saved_model("ld_pickle")
    planted_pickle(p / "model.safetensors", p / "PWNED")
    try:
        efa.load(p)
    finally:
        if (p / "PWNED").exists():
            return False, "pickle executed"
    return True, "loaded?!"


@probe(A, "efa.load(config.json is a folder)", needles=("config.json",))
def _():
    p = _saved_model("ld_dir")
    (p / "config.json").unlink()
    (p / "config.json").mkdir()
    efa.load(p)


@probe(A, "efa.load(config.json not UTF-8)", needles=("config.json",))
def _():
    p = _saved_model("ld_latin")
    (p / "config.json").write_bytes(b"\xff\xfe{")
    efa.load(p)


@probe(A, "efa.load(weights with a NaN tensor) then evaluate", needles=("non-finite",))
def _():
    p = _saved_model("ld_nan")
    tamper_safetensors(p / "model.safetensors", edit_tensors=lambda t: {
        k: (v.fill_(float("nan")) if k.startswith("readouts.movie") else v) for k, v in t.items()})
    efa.evaluate(efa.load(p), mr_data())


# =========================================================================== tabular
A = "tabular"
fx = "src/efa/tabular.py"
from efa.tabular import AttentionTableClassifier as ATC  # noqa: E402


def tab(n=30, seed=0):
    g = np.random.default_rng(seed)
    df = pd.DataFrame({"colour": g.choice(["red", "green", "blue"], n),
                       "size": pd.Categorical(g.choice(["S", "M", "L"], n),
                                              categories=["S", "M", "L"]),
                       "weight": g.normal(70, 10, n).round(1)})
    y = np.where((df.colour == "red") | (df.weight > 75), "buy", "skip")
    return df, y


def clf(**kw):
    base = dict(max_epochs=2, embedding_dim=4, num_heads=1, ffn_hidden=4, random_state=0,
                n_bins=3, batch_size=16)
    base.update(kw)
    return ATC(**base)


def fitted(**kw):
    key = ("fitted", tuple(sorted((k, repr(v)) for k, v in kw.items())))
    return cached(key, lambda: clf(**kw).fit(*tab()))


def tfit(X=None, y=None, **kw):
    X0, y0 = tab()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return clf(**kw).fit(X0 if X is None else X, y0 if y is None else y)


perr = [
    ("backbone", "gpt"), ("response", "poisson"), ("numeric", "bins"), ("handle_unknown", "ignore"),
    ("missing", "drop"), ("n_bins", 1), ("n_bins", 2.5), ("n_bins", True), ("additive", "yes"),
    ("init", "zeros"), ("early_stopping", "no"), ("stop_on", "loss"),
    ("validation_fraction", 0), ("validation_fraction", 1), ("validation_fraction", float("nan")),
    ("lr", 0), ("batch_size", 0), ("max_epochs", 0), ("patience", 0), ("dropout", 1.0),
    ("weight_decay", -1), ("num_layers", 0), ("ffn_hidden", 0),
]
for k, v in perr:
    add(A, f"AttentionTableClassifier({k}={v!r}).fit(X, y)",
        lambda k=k, v=v: tfit(**{k: v}), needles=(k,), fix=f"{fx}: _check_params")
add(A, "AttentionTableClassifier(validation_fraction='0.2').fit(X, y)",
    lambda: tfit(validation_fraction="0.2"), needles=("validation_fraction",),
    should="ValueError: validation_fraction must be a number in (0, 1)",
    fix=f"{fx}: _check_params (0 < '0.2' raises a bare TypeError)")
add(A, "AttentionTableClassifier(num_heads=0).fit(X, y)", lambda: tfit(num_heads=0),
    needles=("num_heads",), should="ValueError: num_heads must be a positive integer",
    fix=f"{fx}: _build (d // self.num_heads -> ZeroDivisionError); validate in _check_params")
add(A, "AttentionTableClassifier(num_heads=2.5).fit(X, y)", lambda: tfit(num_heads=2.5),
    needles=("num_heads",), fix=f"{fx}: _check_params")
add(A, "AttentionTableClassifier(embedding_dim=0).fit(X, y)", lambda: tfit(embedding_dim=0),
    needles=("embedding_dim",), should="ValueError naming embedding_dim (the error names the "
    "internal field 'cat' and 'dim')", fix=f"{fx}: _check_params")
add(A, "AttentionTableClassifier(init='glm', additive=False)",
    lambda: tfit(init="glm"), needles=("additive",))
add(A, "AttentionTableClassifier(additive='ordinal', response='ordinal')",
    lambda: tfit(additive="ordinal", response="ordinal"), needles=("ordinal",))
for v in (1.0, 1.5, float("nan")):
    add(A, f"AttentionTableClassifier(cell_dropout={v!r}).fit(X, y)",
        lambda v=v: tfit(cell_dropout=v), needles=("cell_dropout",),
        should="ValueError: cell_dropout must be in [0, 1)",
        fix=f"{fx}: _check_params (validate cell_dropout; at 1 TableEFA.loss returns the float "
        "0.0 and fit crashes in torch.isfinite)")
add(A, "AttentionTableClassifier(cell_dropout=-0.5).fit(X, y)",
    lambda: (lambda c: (False, "accepted a negative rate (no dropout)"))(tfit(cell_dropout=-0.5)),
    needles=("cell_dropout",), fix=f"{fx}: _check_params")
add(A, "AttentionTableClassifier(categorical=[5]).fit(X (3 columns), y)",
    lambda: tfit(categorical=[5]), needles=("categorical", "5"),
    should="ValueError: categorical names columns [5] that X does not have",
    fix=f"{fx}: _column_kinds (X.columns[c] raises IndexError for an out-of-range index)")
add(A, "AttentionTableClassifier(categorical='colour').fit(X, y)",
    lambda: tfit(categorical="colour"), needles=("categorical", "colour"),
    should="treat a string as one column name (it is split into characters c, o, l, ...)",
    fix=f"{fx}: _column_kinds")
add(A, "AttentionTableClassifier(categorical=['nope']).fit(X, y)",
    lambda: tfit(categorical=["nope"]), needles=("nope",))
add(A, "AttentionTableClassifier(random_state='abc').fit(X, y)",
    lambda: tfit(random_state="abc"), needles=("abc",))
add(A, "fit(X, y=None)", lambda: clf().fit(tab()[0], None), needles=("y",))
add(A, "fit(X, y of all NaN)", lambda: clf().fit(tab()[0], np.full(30, np.nan)),
    needles=("no label",))
add(A, "fit(X, y with one class)", lambda: clf().fit(tab()[0], np.array(["a"] * 30)),
    needles=("one class",))
add(A, "fit(X, y continuous floats)", lambda: clf().fit(tab()[0], np.linspace(0, 1, 30)),
    needles=("continuous",))
add(A, "fit(X, y of 29 labels)", lambda: clf().fit(tab()[0], tab()[1][:29]),
    needles=("29",))
add(A, "fit(X, y 2-d (30, 2))", lambda: clf().fit(tab()[0], np.stack([tab()[1]] * 2, 1)),
    needles=("1-dimensional",))
add(A, "fit(X 1-d, y)", lambda: clf().fit(np.arange(30), tab()[1]), needles=("2D",))
add(A, "fit(X with 0 rows)", lambda: clf().fit(tab()[0].iloc[:0], tab()[1][:0]),
    needles=("0 sample",))
add(A, "fit(X with 0 columns)", lambda: clf().fit(pd.DataFrame(index=range(30)), tab()[1]),
    needles=("0 feature",))
add(A, "fit(complex X)", lambda: clf().fit(np.ones((30, 2)) * 1j, tab()[1]),
    needles=("complex",))
add(A, "fit(scipy sparse X)", lambda: clf().fit(__import__("scipy.sparse").sparse.csr_matrix(
    np.ones((30, 2))), tab()[1]), needles=("sparse",))
add(A, "fit(X with a datetime column)",
    lambda: clf().fit(tab()[0].assign(d=pd.date_range("2020", periods=30)), tab()[1]),
    needles=("'d'", "datetime"))
add(A, "fit(X with a timedelta column)",
    lambda: clf().fit(tab()[0].assign(d=pd.to_timedelta(np.arange(30), "s")), tab()[1]),
    needles=("'d'",))
add(A, "fit(X with a column of lists)",
    lambda: clf().fit(tab()[0].assign(d=[[1]] * 30), tab()[1]), needles=("'d'",))
add(A, "fit(X with NaN, missing='error')",
    lambda: clf().fit(tab()[0].assign(weight=[np.nan] + [70.0] * 29), tab()[1]),
    needles=("weight", "row 0"))
add(A, "fit(X with None in a string column, missing='error')",
    lambda: clf().fit(tab()[0].assign(colour=[None] + ["red"] * 29), tab()[1]),
    needles=("colour", "row 0"))
add(A, "fit(X with inf in an object column)",
    lambda: clf().fit(tab()[0].assign(colour=pd.Series([np.inf] + ["red"] * 29, dtype=object)),
                      tab()[1]), needles=("colour", "inf"))
add(A, "fit(X with inf in a float column, missing='mask')",
    lambda: (lambda c: (True, "inf treated as missing"))(
        tfit(X=tab()[0].assign(weight=[np.inf] + [70.0] * 29), missing="mask")),
    kind="either", needles=("weight",))
add(A, "fit(X with an all-NaN float column, missing='mask')",
    lambda: tfit(X=tab()[0].assign(weight=np.nan), missing="mask"),
    needles=("weight", "no finite"))
add(A, "fit(X with duplicate column names)",
    lambda: tfit(X=pd.concat([tab()[0], tab()[0][["colour"]]], axis=1)),
    needles=("colour", "duplicate"), should="ValueError: duplicate column name 'colour'",
    fix=f"{fx}: fit (check X.columns.is_unique)")
add(A, "fit(X with mixed int/str column names)",
    lambda: tfit(X=tab()[0].rename(columns={"colour": 0})), needles=("string",))
add(A, "shared_vocabulary=True with columns whose levels differ from the classes",
    lambda: tfit(shared_vocabulary=True), needles=("shared_vocabulary",))


def _proba_ok(c, X):
    p = c.predict_proba(X)
    return p.shape == (len(X), len(c.classes_)) and np.allclose(p.sum(1), 1) and \
        bool(np.isfinite(p).all())


@probe(A, "predict_proba rows sum to 1, predict in classes_", kind="works")
def _():
    c = fitted()
    X, _y = tab(seed=1)
    pred = c.predict(X)
    return _proba_ok(c, X) and set(pred) <= set(c.classes_), c.classes_


@probe(A, "predict_proba does not depend on X's index labels", kind="works")
def _():
    c = fitted()
    X, _y = tab(seed=1)
    a = c.predict_proba(X)
    b = c.predict_proba(X.set_index(pd.Index([7] * len(X))))
    return np.allclose(a, b), "same"


@probe(A, "predict_proba with columns in another order", kind="either",
       needles=("order",), should="reorder by name or refuse clearly")
def _():
    c = fitted()
    X, _y = tab(seed=1)
    a = c.predict_proba(X)
    b = c.predict_proba(X[["weight", "colour", "size"]])
    return np.allclose(a, b), f"max diff {np.abs(a - b).max()}"


@probe(A, "fit/predict do not mutate X or y", kind="works")
def _():
    X, y = tab()
    X0, y0 = X.copy(), y.copy()
    c = tfit(X, y)
    c.predict_proba(X)
    c.predict_column_proba(X, "colour")
    return X.equals(X0) and (y == y0).all(), "unchanged"


@probe(A, "y as a Series with an index unrelated to X (positional)", kind="works")
def _():
    X, y = tab()
    a = tfit(X, y).predict_proba(X)
    b = tfit(X, pd.Series(y, index=np.arange(100, 130)[::-1])).predict_proba(X)
    return np.allclose(a, b), "positional"


@probe(A, "semi-supervised: y with NaN labels trains", kind="works")
def _():
    X, y = tab()
    y = y.astype(object)
    y[:10] = np.nan
    c = tfit(X, y)
    return list(c.classes_) == ["buy", "skip"] and _proba_ok(c, X), c.classes_


add(A, "predict with an unseen level (handle_unknown='error')",
    lambda: fitted().predict(tab()[0].assign(colour="purple")), needles=("colour", "purple"))


@probe(A, "predict with an unseen level, handle_unknown='unk'", kind="works")
def _():
    c = fitted(handle_unknown="unk")
    return _proba_ok(c, tab()[0].assign(colour="purple")), "finite, sums to 1"


add(A, "predict with NaN in X (missing='error')",
    lambda: fitted().predict(tab()[0].assign(weight=np.nan)), needles=("weight",))
add(A, "predict with an extra column", lambda: fitted().predict(tab()[0].assign(extra=1)),
    needles=("extra",))
add(A, "predict with a column missing", lambda: fitted().predict(tab()[0].drop(columns="size")),
    needles=("size",))
add(A, "predict before fit", lambda: clf().predict(tab()[0]), needles=("fit",))
add(A, "predict(X with 0 rows)", lambda: fitted().predict(tab()[0].iloc[:0]),
    needles=("0 sample",))


@probe(A, "predict on a NumPy array when fitted on a DataFrame", kind="either",
       needles=("feature names",))
def _():
    c = fitted()
    X, _y = tab(seed=1)
    a = c.predict_proba(X)
    b = c.predict_proba(X.to_numpy())
    return np.allclose(a, b), f"max diff {np.abs(a - b).max()}"


add(A, "predict_column_proba(X, 'nope')", lambda: fitted().predict_column_proba(tab()[0], "nope"),
    needles=("nope",))
add(A, "predict_column_proba(X, 'weight') with numeric='gaussian'",
    lambda: fitted(numeric="gaussian").predict_column_proba(tab()[0], "weight"),
    needles=("weight", "Gaussian"))
add(A, "predict_column_proba(X, 'colour', y=<unseen label>)",
    lambda: fitted().predict_column_proba(tab()[0], "colour", y=["maybe"] * 30),
    needles=("maybe",))


@probe(A, "predict_column_proba rows sum to 1 over the column's levels", kind="works")
def _():
    c = fitted()
    p = c.predict_column_proba(tab()[0], "colour")
    q = c.predict_column_proba(tab()[0], None)
    return (list(p.columns) == ["blue", "green", "red"] and np.allclose(p.sum(1), 1)
            and np.allclose(q.to_numpy(), c.predict_proba(tab()[0]))), list(p.columns)


@probe(A, "impute fills only holes, with levels of the column / bin medians", kind="works")
def _():
    c = fitted(missing="mask")
    X, _y = tab(seed=2)
    X = X.astype({"colour": object})
    X.loc[0, "colour"] = None
    X.loc[1, "weight"] = np.nan
    X.loc[2, "size"] = None
    out = c.impute(X)
    others = out.drop(index=[0, 1, 2]).equals(X.drop(index=[0, 1, 2]))
    ok = (out.loc[0, "colour"] in ("red", "green", "blue") and np.isfinite(out.loc[1, "weight"])
          and out.loc[2, "size"] in ("S", "M", "L") and others and X.loc[0, "colour"] is None)
    return ok, out.iloc[:3].to_dict("records")


@probe(A, "impute with numeric='gaussian' writes a finite number", kind="works")
def _():
    c = fitted(missing="mask", numeric="gaussian")
    X, _y = tab(seed=2)
    X.loc[1, "weight"] = np.nan
    out = c.impute(X)
    return bool(np.isfinite(out.loc[1, "weight"])) and str(out["weight"].dtype) == "float64", \
        out.loc[1, "weight"]


@probe(A, "quantile bins of a column with values ±1e308 keep them apart", kind="works",
       should="two distinct training values land in two distinct bins and every bin has a "
       "finite training median", fix=f"{fx}: bin_edges (lo + (hi - lo) / 2 overflows to inf; "
       "use lo / 2 + hi / 2)")
def _():
    X, y = tab()
    X = X.assign(weight=np.where(np.arange(30) % 2, 1e308, -1e308))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tfit(X, y)
    edges, med = c.bins_["weight"], c.bin_values_["weight"]
    b = np.searchsorted(edges, [-1e308, 1e308], "right")
    return b[0] != b[1] and all(np.isfinite(med)), f"edges {edges}, bins {b}, medians {med}"


@probe(A, "numeric='gaussian' with values near 1e308", kind="either", needles=("weight",),
       should="standardise without overflow or name the column",
       fix=f"{fx}: _learn_columns (mean/std overflow to inf -> NaN cells)")
def _():
    X, y = tab()
    X = X.assign(weight=np.linspace(1e307, 1.7e308, 30))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = tfit(X, y, numeric="gaussian")
    p = c.predict_proba(X)
    return bool(np.isfinite(p).all()) and np.isfinite(c.stats_["weight"]).all(), \
        f"stats {c.stats_['weight']}"


@probe(A, "a constant numeric column", kind="works")
def _():
    X, y = tab()
    c = tfit(X.assign(weight=5.0), y)
    return _proba_ok(c, X.assign(weight=5.0)), c.levels_["weight"]


@probe(A, "a feature column named '__response__'", kind="works")
def _():
    X, y = tab()
    c = tfit(X.rename(columns={"colour": "__response__"}), y)
    return _proba_ok(c, X.rename(columns={"colour": "__response__"})), c._target


@probe(A, "integer column names (NumPy input)", kind="works")
def _():
    X, y = tab()
    Xn = X.assign(size=X["size"].astype(str)).to_numpy()
    c = tfit(Xn, y)
    return _proba_ok(c, Xn), c.feature_columns_


@probe(A, "pandas nullable Int64 and boolean columns with NA, missing='mask'", kind="works")
def _():
    X, y = tab()
    X = X.assign(n=pd.array([1, 2, None] * 10, dtype="Int64"),
                 b=pd.array([True, None, False] * 10, dtype="boolean"))
    c = tfit(X, y, missing="mask")
    return _proba_ok(c, X), c.kinds_


@probe(A, "mixed-type object column (1 and '1' are different levels)", kind="works")
def _():
    X, y = tab()
    X = X.assign(m=pd.Series([1, "1", 2] * 10, dtype=object))
    c = tfit(X, y)
    return len(c.levels_["m"]) == 3 and _proba_ok(c, X), c.levels_["m"]


@probe(A, "ordinal response keeps a pandas Categorical's order", kind="works")
def _():
    X, _y = tab()
    y = pd.Categorical(np.array(["lo", "mid", "hi"])[np.arange(30) % 3],
                       categories=["lo", "mid", "hi"], ordered=True)
    c = tfit(X, y, response="ordinal")
    return list(c.classes_) == ["lo", "mid", "hi"] and _proba_ok(c, X), list(c.classes_)


@probe(A, "additive=True, init='glm' fits", kind="works")
def _():
    c = tfit(additive=True, init="glm")
    return _proba_ok(c, tab()[0]) and c.n_iter_ >= 2, c.n_iter_


@probe(A, "additive='ordinal' on a categorical response fits", kind="works")
def _():
    c = tfit(additive="ordinal")
    return _proba_ok(c, tab()[0]), c.classes_


@probe(A, "gates (linear backbone): weights over the columns sum to 1", kind="works")
def _():
    c = fitted(backbone="linear")
    g = c.gates(tab()[0])
    return g.shape == (30, 1, 4) and np.allclose(g.sum(-1), 1), g.shape


add(A, "experts() on the paper backbone", lambda: fitted().experts(tab()[0]),
    needles=("linear",))
add(A, "gates(X, column='nope')", lambda: fitted().gates(tab()[0], "nope"), needles=("nope",))


@probe(A, "experts (linear): Σ π·f reproduces the response logits' softmax", kind="works")
def _():
    c = fitted(backbone="linear")
    pi, f = c.experts(tab()[0])
    logits = (pi[..., None] * f).sum((1, 2))
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    return np.allclose(p, c.predict_proba(tab()[0]), atol=1e-4), \
        float(np.abs(p - c.predict_proba(tab()[0])).max())


@probe(A, "pickle round trip of a fitted classifier", kind="works")
def _():
    c = fitted()
    d = pickle.loads(pickle.dumps(c))
    return np.array_equal(c.predict_proba(tab()[0]), d.predict_proba(tab()[0])), "equal"


@probe(A, "sklearn.clone + cross_val_score in a pipeline", kind="works")
def _():
    from sklearn.base import clone
    from sklearn.model_selection import cross_val_score
    X, y = tab(n=45)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = cross_val_score(clone(clf()), X, y, cv=3)
    return bool(np.isfinite(s).all()), s


add(A, "efa.save(fitted classifier's TableEFA)",
    lambda: efa.save(fitted().model_, tmpdir("save_table")), needles=("TableEFA",))


@probe(A, "fit twice: second fit on other columns forgets the first", kind="works")
def _():
    c = clf()
    X, y = tab()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c.fit(X, y)
        c.fit(X[["colour", "weight"]], y)
    return c.feature_columns_ == ["colour", "weight"] and _proba_ok(c, X[["colour", "weight"]]), \
        c.feature_columns_


@probe(A, "from efa.datasets.tabular import as_numbers: unknown level", needles=("size", "XL"))
def _():
    from efa.datasets.tabular import as_numbers
    as_numbers(pd.DataFrame({"size": ["S", "XL"]}), {"size": ["S", "M", "L"]})


add(A, "as_numbers(non-numeric column without levels)",
    lambda: __import__("efa.datasets.tabular", fromlist=["x"]).as_numbers(
        pd.DataFrame({"c": ["a"]})), needles=("'c'",))


@probe(A, "as_numbers keeps NaN, index and does not mutate", kind="either", needles=("size",), should="keep missing cells NaN (the classifier takes missing='mask') or say so")
def _():
    from efa.datasets.tabular import as_numbers
    X = pd.DataFrame({"size": ["S", None, "L"], "w": [1, np.nan, 3]}, index=[5, 6, 7])
    X0 = X.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = as_numbers(X, {"size": ["S", "M", "L"]})
    ok = X.equals(X0) and list(out.index) == [5, 6, 7] and out["size"].tolist()[0] == 0.0
    return ok and np.isnan(out["size"].tolist()[1]), out.to_dict()


# =========================================================================== regression
A = "regression"
fx = "src/efa/regression.py"
from efa import regression as reg  # noqa: E402


def reg_frame(nf=12, seed=0):
    g = np.random.default_rng(seed)
    rows = []
    for fn in range(nf):
        off = g.normal(0, 1.0, 2)
        for x in g.uniform(0, 10, int(g.integers(3, 7))):
            ch = int(g.integers(2))
            rows.append((fn, x, np.sin(x) + off[ch] + g.normal(0, 0.1), ch))
    return pd.DataFrame(rows, columns=["function", "x", "y", "channel"])


def reg_model(kind="regression_efa"):
    def make():
        data, ch = reg.frame_to_sequences(reg_frame(), "function", "x", "y", "channel")
        torch.manual_seed(0)
        if kind == "note":
            m = reg.note_model(data, e=8, ell=8, hidden=8, channels=ch)
        elif kind == "gp":
            m = reg.gp_attention(data, channels=ch, readout_hidden=8)
        else:
            m = reg.regression_efa(data, layers=1, heads=1, x_dim=4, y_dim=4, channel_dim=4,
                                   hidden=8, ffn=8, readout_hidden=8, channels=ch)
        quiet_fit(m, data, max_epochs=1)
        return m
    return cached(("reg", kind), make)


f2s = reg.frame_to_sequences
add(A, "frame_to_sequences(df.values, ...)", lambda: f2s(reg_frame().values, "function", "x", "y"),
    needles=("DataFrame",))
add(A, "frame_to_sequences(df, 'function', 'x', 'nope')",
    lambda: f2s(reg_frame(), "function", "x", "nope"), needles=("nope",))
add(A, "frame_to_sequences(df with NaN x)",
    lambda: f2s(reg_frame().assign(x=[np.nan] + [1.0] * (len(reg_frame()) - 1)), "function",
                "x", "y"), needles=("'x'", "row 0"))
add(A, "frame_to_sequences(df with inf y)",
    lambda: f2s(reg_frame().assign(y=[1.0, np.inf] + [1.0] * (len(reg_frame()) - 2)),
                "function", "x", "y"), needles=("'y'", "row 1"))
add(A, "frame_to_sequences(df with string x)",
    lambda: f2s(reg_frame().assign(x="a"), "function", "x", "y"), needles=("'x'",))
add(A, "frame_to_sequences(df, channel='channel', channels=[0])  # channel 1 unknown",
    lambda: f2s(reg_frame(), "function", "x", "y", "channel", channels=[0]),
    needles=("unknown channel", "row"))
add(A, "frame_to_sequences(df with NaN channel)",
    lambda: f2s(reg_frame().assign(channel=[np.nan] + [0] * (len(reg_frame()) - 1)),
                "function", "x", "y", "channel"), needles=("channel", "row 0"))
add(A, "frame_to_sequences(df with NaN function id)",
    lambda: f2s(reg_frame().assign(function=[np.nan] + [1] * (len(reg_frame()) - 1)),
                "function", "x", "y"), needles=("function",))
add(A, "frame_to_sequences(df, channels=[0, 0, 1]) duplicate labels",
    lambda: (lambda r: (False, f"accepted duplicate channel labels; labels {r[1]}, "
                        f"ids used {sorted(set(r[0].fields['channel'][r[0].valid()].tolist()))}"))(
        f2s(reg_frame(), "function", "x", "y", "channel", channels=[0, 0, 1])),
    needles=("channels",), should="refuse duplicate channel labels",
    fix=f"{fx}: frame_to_sequences")


@probe(A, "frame_to_sequences keeps row order, does not score the first point, no mutation",
       kind="works")
def _():
    df = reg_frame()
    before = df.copy()
    data, labels = f2s(df, "function", "x", "y", "channel")
    first = df[df.function == 0]
    ok = (np.allclose(data.fields["x"][0, : len(first), 0].numpy(), first.x.to_numpy(),
                      atol=1e-5) and not bool(data.scored[:, 0].any())
          and bool(data.scored[0, 1]) and df.equals(before) and labels == [0, 1])
    return ok, labels


@probe(A, "frame_to_sequences with string channel labels", kind="works")
def _():
    df = reg_frame().assign(channel=lambda d: np.where(d.channel == 1, "b", "a"))
    data, labels = f2s(df, "function", "x", "y", "channel")
    return labels == ["a", "b"], labels


add(A, "regression_efa(data without an 'x' field)",
    lambda: reg.regression_efa(Sequences.from_lists({"y": [[1.0, 2.0]]})), needles=("'x'",),
    should="ValueError: the data need fields x and y (as frame_to_sequences makes)",
    fix=f"{fx}: _stats / _fields (check the fields)")
add(A, "regression_efa(data, channels=True)",
    lambda: reg.regression_efa(f2s(reg_frame(), "function", "x", "y", "channel")[0],
                               channels=True), needles=("channels",))
add(A, "regression_efa(data, layers=0)",
    lambda: reg.regression_efa(f2s(reg_frame(), "function", "x", "y", "channel")[0], layers=0),
    needles=("layers",))
add(A, "regression_efa(data, channels=-1)",
    lambda: reg.regression_efa(f2s(reg_frame(), "function", "x", "y", "channel")[0],
                               channels=-1), needles=("channel",))
add(A, "regression_efa(data where every x is equal)",
    lambda: reg.regression_efa(f2s(reg_frame().assign(x=3.0), "function", "x", "y")[0],
                               channels=0), needles=("'x'", "constant"))
add(A, "regression_efa(data with a single point)",
    lambda: reg.regression_efa(f2s(reg_frame().iloc[:1], "function", "x", "y")[0], channels=0),
    needles=("'x'",), fix=f"{fx}: _stats (std of one point is NaN)")
add(A, "regression_efa(channels=3) but the data have only channels 0/1, then fit",
    lambda: (lambda d: (True, "fits (channel 2 unused)"))(
        reg.regression_efa(f2s(reg_frame(), "function", "x", "y", "channel")[0], layers=1,
                           channels=3)), kind="either", needles=("channel",))

for kind in ("regression_efa", "note", "gp"):
    def _rk(kind=kind):
        m = reg_model(kind)
        data, _ = f2s(reg_frame(seed=1), "function", "x", "y", "channel")
        r = efa.evaluate(m, data)
        mean, sd = reg.causal_predictive(m, data)
        v = data.valid()
        return (math.isfinite(r["y"]) and bool(torch.isfinite(mean[v]).all())
                and bool((sd[v] > 0).all())), r
    add(A, f"{kind}: evaluate finite, causal_predictive finite and sd > 0", _rk, kind="works")


@probe(A, "predict_frame: finite mean, sd > 0, same rows and order as targets", kind="works")
def _():
    m = reg_model()
    new = pd.DataFrame({"function": [3, 1, 3], "x": [2.5, 7.0, 1.0], "channel": [0, 1, 1],
                        "note": ["a", "b", "c"]}, index=[10, 11, 12])
    out = reg.predict_frame(m, reg_frame(), new, "function", "x", "y", "channel")
    ok = (list(out.index) == [10, 11, 12] and list(out.note) == ["a", "b", "c"]
          and np.isfinite(out["mean"]).all() and (out["sd"] > 0).all())
    return ok, out[["mean", "sd"]].to_dict()


@probe(A, "predict_frame: a row's prediction does not depend on the other target rows",
       kind="works")
def _():
    m = reg_model()
    new = pd.DataFrame({"function": [3, 1, 3, 2], "x": [2.5, 7.0, 1.0, 4.0],
                        "channel": [0, 1, 1, 0]})
    a = reg.predict_frame(m, reg_frame(), new, "function", "x", "y", "channel")
    b = reg.predict_frame(m, reg_frame(), new.iloc[[3, 2, 1, 0]], "function", "x", "y",
                          "channel").sort_index()
    return np.allclose(a["mean"], b["mean"], atol=1e-5), (a["mean"].tolist(), b["mean"].tolist())


add(A, "predict_frame(target function without context rows)",
    lambda: reg.predict_frame(reg_model(), reg_frame(), pd.DataFrame(
        {"function": [99], "x": [1.0], "channel": [0]}), "function", "x", "y", "channel"),
    needles=("99", "context"))
add(A, "predict_frame(channels differing from the model's)",
    lambda: reg.predict_frame(reg_model(), reg_frame(), pd.DataFrame(
        {"function": [1], "x": [1.0], "channel": [0]}), "function", "x", "y", "channel",
        channels=[1, 0]), needles=("channels",))
add(A, "predict_frame(target with unknown channel 7)",
    lambda: reg.predict_frame(reg_model(), reg_frame(), pd.DataFrame(
        {"function": [1], "x": [1.0], "channel": [7]}), "function", "x", "y", "channel"),
    needles=("7",))
add(A, "predict_frame(target with NaN x)",
    lambda: reg.predict_frame(reg_model(), reg_frame(), pd.DataFrame(
        {"function": [1], "x": [np.nan], "channel": [0]}), "function", "x", "y", "channel"),
    needles=("'x'",))
add(A, "predict_frame(empty targets)",
    lambda: reg.predict_frame(reg_model(), reg_frame(), pd.DataFrame(
        {"function": [], "x": [], "channel": []}), "function", "x", "y", "channel"),
    needles=("targets",))
add(A, "predict_frame(targets without the function column)",
    lambda: reg.predict_frame(reg_model(), reg_frame(), pd.DataFrame(
        {"x": [1.0], "channel": [0]}), "function", "x", "y", "channel"),
    needles=("function",), fix=f"{fx}: predict_frame (targets[function] KeyError)")
add(A, "predict(model with positions)",
    lambda: reg.predict(cat_model(), cat_data(), cat_data()), needles=("max_len",))
add(A, "predict(model, context of 2 functions, targets of 1)",
    lambda: (lambda d: reg.predict(reg_model(), d[T([0, 1])], d[T([0])]))(
        f2s(reg_frame(), "function", "x", "y", "channel")[0]), needles=("functions",))
add(A, "predict(model, context, targets without 'x')",
    lambda: (lambda d: reg.predict(reg_model(), d[T([0])], Sequences(
        {"channel": T([[0]])}, T([1]))))(f2s(reg_frame(), "function", "x", "y", "channel")[0]),
    needles=("'x'",), should="an error saying the targets need field x",
    fix=f"{fx}: predict (targets.fields['x'] KeyError)")


@probe(A, "predict == the causal model's prediction of a point appended to the context",
       kind="works")
def _():
    m = reg_model()
    data, _ = f2s(reg_frame(), "function", "x", "y", "channel")
    one = data[T([0])]
    n = int(one.lengths[0])
    ctx = one[T([0])]
    ctx = Sequences({k: v[:, : n - 1] for k, v in one.fields.items()}, T([n - 1]))
    tgt = Sequences({"x": one.fields["x"][:, n - 1: n], "channel": one.fields["channel"][:, n - 1: n]},
                    T([1]))
    mean, sd = reg.predict(m, ctx, tgt)
    full_mean, full_sd = reg.causal_predictive(m, Sequences(one.fields, one.lengths))
    return abs(float(mean[0, 0] - full_mean[0, n - 1])) < 1e-4, (float(mean[0, 0]),
                                                                 float(full_mean[0, n - 1]))


@probe(A, "channel_labels(model) after save/load", kind="works")
def _():
    p = tmpdir("reg_save") / "m"
    efa.save(reg_model(), p)
    return reg.channel_labels(efa.load(p)) == [0, 1], reg.channel_labels(efa.load(p))


# =========================================================================== spatial
A = "spatial"
fx = "src/efa/spatial.py"
from efa import spatial as sp  # noqa: E402


def sp_frame(n_sites=5, days=8, seed=0):
    g = np.random.default_rng(seed)
    sites = pd.DataFrame({"station": range(n_sites), "lat": g.uniform(30, 48, n_sites),
                          "lon": g.uniform(-120, -75, n_sites)})
    df = sites.merge(pd.DataFrame({"date": pd.date_range("2020-01-01", periods=days)}),
                     how="cross")
    df["temp"] = 60 - (df.lat - 40) + g.normal(0, 2, len(df))
    return df


KW = dict(site="station", time="date", lat="lat", lon="lon", value="temp")
f2 = sp.frame_to_sequences
add(A, "spatial.frame_to_sequences(df, ..., value='nope')",
    lambda: f2(sp_frame(), **{**KW, "value": "nope"}), needles=("nope",))
add(A, "spatial.frame_to_sequences(df, lags=-1)", lambda: f2(sp_frame(), **KW, lags=-1),
    needles=("lags",))
add(A, "spatial.frame_to_sequences(df, lags=1.5)", lambda: f2(sp_frame(), **KW, lags=1.5),
    needles=("lags",), should="ValueError: lags must be an integer >= 0",
    fix=f"{fx}: frame_to_sequences (validate lags type)")
add(A, "spatial.frame_to_sequences(df, lags='2')", lambda: f2(sp_frame(), **KW, lags="2"),
    needles=("lags",), fix=f"{fx}: frame_to_sequences")
add(A, "spatial.frame_to_sequences(df, layout='wide')", lambda: f2(sp_frame(), **KW,
                                                                   layout="wide"),
    needles=("layout",))
add(A, "spatial.frame_to_sequences(df with NaN lat)",
    lambda: f2(sp_frame().assign(lat=lambda d: d.lat.where(d.index != 3)), **KW),
    needles=("lat",))
add(A, "spatial.frame_to_sequences(df with inf lat), then spatial_efa + evaluate",
    lambda: (lambda d: efa.evaluate(sp.spatial_efa(d, num_layers=1, dim=4), d))(
        f2(sp_frame().assign(lat=lambda d: d.lat.where(d.station != 2, np.inf)), **KW)),
    needles=("coords", "inf"), should="refuse infinite coordinates naming lat/lon (only NaN is checked)",
    fix=f"{fx}: frame_to_sequences (check isfinite, not isna)")
add(A, "spatial.frame_to_sequences(df with string lat)",
    lambda: f2(sp_frame().assign(lat="north"), **KW), needles=("lat",),
    fix=f"{fx}: frame_to_sequences (check coordinates are numeric)")
add(A, "spatial.frame_to_sequences(a site with two positions)",
    lambda: f2(sp_frame().assign(lat=lambda d: d.lat + (d.index == 0)), **KW),
    needles=("more than one",))
add(A, "spatial.frame_to_sequences(duplicated (site, time))",
    lambda: f2(pd.concat([sp_frame(), sp_frame().iloc[:1]]), **KW), needles=("more than one row",))
add(A, "spatial.frame_to_sequences(string values)",
    lambda: f2(sp_frame().assign(temp="warm"), **KW), needles=("temp",))
add(A, "spatial.frame_to_sequences(inf value)",
    lambda: f2(sp_frame().assign(temp=lambda d: d.temp.where(d.index != 2, np.inf)), **KW),
    needles=("infinite",))
add(A, "spatial.frame_to_sequences(sites=[0, 1, 2]) missing sites 3, 4",
    lambda: f2(sp_frame(), **KW, sites=[0, 1, 2]), needles=("sites",))
add(A, "spatial.frame_to_sequences(sites=[0..5]) extra site 5",
    lambda: f2(sp_frame(), **KW, sites=range(6)), needles=("5",))
add(A, "spatial.frame_to_sequences(sites=[0, 0, 1, 2, 3, 4]) duplicate",
    lambda: f2(sp_frame(), **KW, sites=[0, 0, 1, 2, 3, 4]), needles=("sites",),
    should="ValueError: sites has duplicates (0)", fix=f"{fx}: frame_to_sequences")
add(A, "spatial.frame_to_sequences(target='flag') where flag has NaN",
    lambda: (lambda d: (len(d) == 4, f"{len(d)} sequences for 4 True days (NaN counted as "
                        "True)"))(
        f2(sp_frame().assign(flag=lambda d: np.where(d.date.dt.day <= 4, 1.0, np.nan)), **KW,
           target="flag")),
    needles=("flag",), should="refuse NaN in the bool target column (astype(bool) makes NaN "
    "True)", fix=f"{fx}: frame_to_sequences (check the target column is boolean)")
add(A, "spatial.frame_to_sequences(target='flag') where flag holds 'True'/'False' strings",
    lambda: (lambda d: (len(d) == 4, f"{len(d)} sequences for 4 'True' days"))(
        f2(sp_frame().assign(flag=lambda d: np.where(d.date.dt.day <= 4, "True", "False")), **KW,
           target="flag")),
    needles=("flag",), fix=f"{fx}: frame_to_sequences")
add(A, "spatial.frame_to_sequences(df with NaN site)",
    lambda: f2(sp_frame().assign(station=lambda d: d.station.where(d.index != 0)), **KW),
    needles=("station",))
add(A, "spatial.frame_to_sequences(integer time, step=pd.Timedelta(days=1), lags=1)",
    lambda: f2(sp_frame().assign(date=lambda d: d.date.dt.day), **KW, lags=1,
               step=pd.Timedelta(days=1)), needles=("step",),
    fix=f"{fx}: frame_to_sequences (check step against the time column's type)")


@probe(A, "spatial.frame_to_sequences warns on a -99 sentinel; missing=-99 masks it",
       kind="works")
def _():
    df = sp_frame()
    df.loc[4, "temp"] = -99
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        f2(df, **KW)
    d = f2(df, **KW, missing=-99)
    return any("-99" in str(x.message) for x in w) and int((~d.observed["value"]).sum()) == 1, \
        int((~d.observed["value"]).sum())


@probe(A, "spatial.frame_to_sequences is independent of row order and does not mutate",
       kind="works")
def _():
    df = sp_frame()
    before = df.copy()
    a = f2(df, **KW, lags=1)
    b = f2(df.sample(frac=1, random_state=1), **KW, lags=1)
    return same_snapshot(snapshot(a), snapshot(b)) and df.equals(before), a.fields["value"].shape


@probe(A, "lags=2 tokens layout: only lag-0 tokens scored; first days' lags unobserved",
       kind="works")
def _():
    d = f2(sp_frame(), **KW, lags=2)
    ok = (d.max_len == 15 and bool(d.scored[:, :5].all()) and not bool(d.scored[:, 5:].any())
          and not bool(d.observed["value"][0, 5:].any()))
    return ok, (d.max_len, d.scored[0].tolist())


@probe(A, "lags=1 fields layout names and values", kind="works")
def _():
    d = f2(sp_frame(), **KW, lags=1, layout="fields")
    ok = (set(d.fields) == {"coords", "value", "value_lag1"}
          and torch.equal(d.fields["value_lag1"][1], d.fields["value"][0]))
    return ok, list(d.fields)


add(A, "site_means(train, name='nope')", lambda: sp.site_means(f2(sp_frame(), **KW), "nope"),
    needles=("nope",), should="KeyError/ValueError naming the field", fix=f"{fx}: site_means")
add(A, "site_means(train with a site never observed)",
    lambda: sp.site_means(f2(sp_frame().assign(temp=lambda d: d.temp.where(d.station != 1)),
                             **KW)), needles=("site",))


@probe(A, "anomalies(data, means of the wrong length)", needles=("means",),
       should="ValueError: means has 2 entries, the data have 5 sites (it silently subtracts "
       "a repeated, wrong mean, or crashes on broadcasting)", fix=f"{fx}: anomalies (check "
       "len(means) against the sites)")
def _():
    d = f2(sp_frame(n_sites=4), **KW)
    m = sp.site_means(d)
    a = sp.anomalies(d, m[:2])
    return False, f"accepted 2 means for 4 sites: site 2 shifted by {float(d.fields['value'][0, 2] - a.fields['value'][0, 2]):.3f}, its mean is {float(m[2]):.3f}"


@probe(A, "anomalies(data, means as a list of one per site) == the same as a tensor",
       kind="works", fix=f"{fx}: anomalies")
def _():
    d = f2(sp_frame(), **KW)
    a, b = sp.anomalies(d, [1.0] * 5), sp.anomalies(d, torch.ones(5))
    return torch.equal(a.fields["value"], b.fields["value"]), "list and tensor agree"


@probe(A, "anomalies(lags tokens layout) subtracts each site's mean from each lag block",
       kind="works")
def _():
    d = f2(sp_frame(), **KW, lags=1)
    m = sp.site_means(d)
    a = sp.anomalies(d, m)
    v = d.observed["value"]
    diff = (d.fields["value"].double() - a.fields["value"].double())[v]
    want = m.repeat(2)[None].expand(len(d), -1)[v]
    return torch.allclose(diff, want, atol=1e-3), float((diff - want).abs().max())


add(A, "spatial_efa(train, name='nope')", lambda: sp.spatial_efa(f2(sp_frame(), **KW),
                                                                 name="nope"),
    needles=("nope",), fix=f"{fx}: _moments (data.fields[name] KeyError)")
add(A, "spatial_efa(train, sigma=0)", lambda: sp.spatial_efa(f2(sp_frame(), **KW), sigma=0),
    needles=("sigma",))
add(A, "spatial_efa(train, sigma=float('inf')) then evaluate",
    lambda: efa.evaluate(sp.spatial_efa(f2(sp_frame(), **KW), sigma=float("inf"), dim=4,
                                        num_layers=1), f2(sp_frame(), **KW)),
    needles=("sigma",), should="refuse sigma=inf at construction",
    fix="src/efa/core/families.py: Gaussian.__init__")
add(A, "spatial_efa(train, bogus=1)", lambda: sp.spatial_efa(f2(sp_frame(), **KW), bogus=1),
    needles=("bogus",))


@probe(A, "spatial_efa: fit 1 epoch, evaluate and MSE finite (README flow)", kind="works")
def _():
    df = sp_frame()
    df.loc[3, "temp"] = np.nan
    d = f2(df, **KW)
    m = sp.spatial_efa(d[torch.arange(6)], num_layers=1, dim=8)
    quiet_fit(m, d[torch.arange(6)], d[torch.arange(6, 8)], max_epochs=1)
    mse = efa.mean_squared_error(m, d[torch.arange(6, 8)], "value")
    return math.isfinite(mse) and mse >= 0, mse


add(A, "knn_fm(train, k=0)", lambda: sp.knn_fm(f2(sp_frame(), **KW), k=0), needles=("k",))
add(A, "knn_fm(train, k=1.5)", lambda: efa.evaluate(sp.knn_fm(f2(sp_frame(), **KW), k=1.5),
                                                    f2(sp_frame(), **KW)),
    needles=("k",), should="ValueError: k must be a positive integer",
    fix="src/efa/baselines/fm.py: KNNFM.__init__")


@probe(A, "knn_fm(k=50 > sites): evaluate finite", kind="works")
def _():
    d = f2(sp_frame(), **KW)
    r = efa.evaluate(sp.knn_fm(d, k=50), d)
    return math.isfinite(r["value"]), r


# --------------------------------------------------------------------------- geo
from efa import geo  # noqa: E402

add(A, "geo.haversine_km((0,0),(0,1)) ≈ 111.19 km",
    lambda: (lambda v: (abs(v - 111.195) < 0.01, v))(float(geo.haversine_km(0, 0, 0, 1))),
    kind="works")
add(A, "geo.haversine_km antipodes ≈ πR",
    lambda: (lambda v: (abs(v - math.pi * 6371) < 1e-6, v))(float(geo.haversine_km(0, 0, 0,
                                                                                      180))),
    kind="works")
add(A, "geo.nearest_neighbours(k=5) with 3 sites",
    lambda: geo.nearest_neighbours([0, 1, 2], [0, 1, 2], 5), needles=("k",))
add(A, "geo.nearest_neighbours(k=1.5)",
    lambda: geo.nearest_neighbours([0, 1, 2], [0, 1, 2], 1.5), needles=("k",),
    fix="src/efa/geo.py: nearest_neighbours (check k is an integer)")
add(A, "geo.nearest_neighbours(lat of 3, lon of 2)",
    lambda: geo.nearest_neighbours([0, 1, 2], [0, 1], 1), needles=("same length",))
add(A, "geo.nearest_neighbours with a NaN latitude",
    lambda: (lambda r: (False, f"neighbours {r.tolist()} (site 1 has NaN latitude)"))(
        geo.nearest_neighbours([0, np.nan, 2], [0, 1, 2], 1)),
    needles=("nan",), should="refuse NaN coordinates",
    fix="src/efa/geo.py: nearest_neighbours")


# =========================================================================== analogy
A = "analogy"
fx = "src/efa/analogy.py"
from efa import analogy as an  # noqa: E402

VOCAB = ["man", "woman", "king", "queen", "boy", "girl"]
VEC = np.array([[1.0, 0], [-1, 0], [1, 1], [-1, 1], [1.2, -0.1], [-1, -0.1]])


def qfile(text, name="q.txt", encoding="utf-8"):
    p = tmpdir("analogy_" + name.replace(".", "_")) / name
    p.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return p


def qframe():
    return pd.DataFrame([("family", "semantic", "man", "woman", "king", "queen", 2),
                         ("family", "semantic", "man", "woman", "boy", "girl", 3),
                         ("gram-x", "syntactic", "king", "queen", "man", "woman", 5)],
                        columns=["category", "group", "a", "b", "c", "d", "line"])


add(A, "load_questions('/tmp/probes/work/none.txt')",
    lambda: an.load_questions(WORK / "none.txt"), needles=("none.txt",))
add(A, "load_questions(<a folder>)", lambda: an.load_questions(tmpdir("qdir")),
    needles=("qdir",))
add(A, "load_questions(question before any header)",
    lambda: an.load_questions(qfile("a b c d\n")), needles=("line 1", "header"))
add(A, "load_questions(three words)",
    lambda: an.load_questions(qfile(": cat\na b c\n")), needles=("line 2", "four"))
add(A, "load_questions(empty file)", lambda: an.load_questions(qfile("")),
    needles=("no analogy",))
add(A, "load_questions(Latin-1 file)",
    lambda: an.load_questions(qfile(": cat\ncafé b c d\n", encoding="latin-1")),
    needles=("line 2", "UTF-8"))
add(A, "load_questions(header ': two words')",
    lambda: an.load_questions(qfile(": two words\na b c d\n")), needles=("line 1",))
add(A, "load_questions(header ':' alone)", lambda: an.load_questions(qfile(":\na b c d\n")),
    needles=("line 1",))


@probe(A, "load_questions: CRLF, tabs, blank lines, case folding, line numbers", kind="works")
def _():
    q = an.load_questions(qfile(": capital-x\r\n\r\nAthens\tGreece  Oslo Norway\r\n"
                                ": gram1\r\nA B C D\r\n"))
    ok = (q.a.tolist() == ["athens", "a"] and q.line.tolist() == [3, 5]
          and q.group.tolist() == ["semantic", "syntactic"])
    return ok, q.to_dict("records")


@probe(A, "load_questions(BOM at the start of the file)", kind="works",
       should="a UTF-8 byte-order mark is not part of the header",
       fix=f"{fx}: load_questions (read with encoding='utf-8-sig')")
def _():
    q = an.load_questions(qfile("\ufeff: cat\na b c d\n"))
    return q.category.tolist() == ["cat"], q.category.tolist()


add(A, "vocabulary_index(['a', 5])", lambda: an.vocabulary_index(["a", 5]), needles=("entry 1",))
add(A, "vocabulary_index(['a', ''])", lambda: an.vocabulary_index(["a", ""]), needles=("entry 1",))
add(A, "check_embeddings(1-d vector)", lambda: an.check_embeddings(np.ones(6), VOCAB),
    needles=("matrix",))
add(A, "check_embeddings(5 rows for 6 words)", lambda: an.check_embeddings(VEC[:5], VOCAB),
    needles=("5 rows",))
add(A, "check_embeddings(NaN row)", lambda: an.check_embeddings(
    np.where(np.arange(6)[:, None] == 2, np.nan, VEC), VOCAB), needles=("'king'",))
add(A, "check_embeddings(string matrix)", lambda: an.check_embeddings(VEC.astype(str), VOCAB),
    needles=("numeric",))
add(A, "check_embeddings(bool matrix)", lambda: an.check_embeddings(VEC > 0, VOCAB),
    needles=("numeric",))
add(A, "check_embeddings(torch tensor requires_grad)",
    lambda: (lambda x: (x.dtype == np.float64, x.dtype))(
        an.check_embeddings(torch.tensor(VEC, requires_grad=True), VOCAB)), kind="works")
add(A, "answer(chunk=0)", lambda: an.answer(VEC, VOCAB, qframe(), chunk=0), needles=("chunk",))
add(A, "answer(chunk=True)", lambda: an.answer(VEC, VOCAB, qframe(), chunk=True),
    needles=("chunk",))
add(A, "answer(question word not in vocab)",
    lambda: an.answer(VEC, VOCAB, qframe().assign(d="prince")), needles=("prince",))
add(A, "answer(candidates='nouns')", lambda: an.answer(VEC, VOCAB, qframe(), candidates="nouns"),
    needles=("candidates",))
add(A, "answer(candidates=[])", lambda: an.answer(VEC, VOCAB, qframe(), candidates=[]),
    needles=("no word",))
add(A, "answer(no questions)", lambda: an.answer(VEC, VOCAB, qframe().iloc[:0]),
    needles=("no questions",))
add(A, "answer(questions without column 'd')",
    lambda: an.answer(VEC, VOCAB, qframe().drop(columns="d")), needles=("'d'",),
    should="an error saying the questions need columns a, b, c, d",
    fix=f"{fx}: answer (questions[col] KeyError)")


@probe(A, "evaluate(README toy): man:woman::king:queen and ::boy:girl are hits", kind="works")
def _():
    r = an.evaluate(VEC, VOCAB, qframe())
    return r["semantic"]["accuracy"] == 1.0 and r["semantic"]["n"] == 2, r


@probe(A, "evaluate on vectors scaled by 1e200 (finite) gives the same accuracy", kind="works",
       should="3CosAdd is scale-invariant: same hits (the norms overflow to inf, every "
       "cosine becomes 0 and every answer a miss)", fix=f"{fx}: answer (normalise with a "
       "scaled norm, e.g. divide by max|x| first, or np.linalg.norm on x / x.max())")
def _():
    a = an.evaluate(VEC, VOCAB, qframe())
    b = an.evaluate(VEC * 1e200, VOCAB, qframe())
    same = all(a[g]["n"] == b[g]["n"] and a[g]["accuracy"] == b[g]["accuracy"]
               and abs(a[g]["cosine"] - b[g]["cosine"]) <= 1e-12 for g in a)  # rounding only
    return same, (a["overall"], b["overall"])


@probe(A, "evaluate on vectors scaled by 1e-200 (finite, non-zero) gives the same accuracy",
       kind="works", fix=f"{fx}: answer (norms underflow to 0: the rows are treated as zero "
       "vectors)")
def _():
    a = an.evaluate(VEC, VOCAB, qframe())
    b = an.evaluate(VEC * 1e-200, VOCAB, qframe())
    same = all(a[g]["n"] == b[g]["n"] and a[g]["accuracy"] == b[g]["accuracy"]
               and abs(a[g]["cosine"] - b[g]["cosine"]) <= 1e-12 for g in a)  # rounding only
    return same, (a["overall"], b["overall"])


@probe(A, "ties never count as hits: identical vectors for every word", kind="works")
def _():
    r = an.evaluate(np.ones((6, 2)), VOCAB, qframe())
    return r["overall"]["accuracy"] == 0.0, r["overall"]


@probe(A, "ties: d and another candidate share a vector -> not a hit", kind="works")
def _():
    v = VEC.copy()
    v[5] = v[3]  # girl == queen
    out = an.answer(v, VOCAB, qframe().iloc[:1])
    return not bool(out.correct[0]) and out["rank"][0] >= 2, out[["predicted", "rank"]].to_dict()


@probe(A, "answer does not depend on question order; does not mutate questions", kind="works")
def _():
    q = qframe()
    q0 = q.copy()
    a = an.answer(VEC, VOCAB, q)
    b = an.answer(VEC, VOCAB, q.iloc[::-1]).iloc[::-1].reset_index(drop=True)
    return a.equals(b) and q.equals(q0), "same"


@probe(A, "lowercase: vocab 'King' answers questions about 'king'", kind="works")
def _():
    vocab = ["Man", "WOMAN", "King", "Queen", "boy", "girl"]
    r = an.evaluate(VEC, vocab, qframe())
    return r["semantic"]["accuracy"] == 1.0, r


add(A, "evaluate(lowercase=False, vocab 'King' vs question 'king')",
    lambda: an.evaluate(VEC, ["Man", "WOMAN", "King", "Queen", "Boy", "Girl"], qframe(),
                        lowercase=False), needles=("no question",))


@probe(A, "answer(normalize=True) and chunk=np.int64(1)", kind="works")
def _():
    out = an.answer(VEC, VOCAB, qframe(), normalize=True, chunk=np.int64(1))
    return bool(out.correct[:2].all()), out.predicted.tolist()


@probe(A, "answer(candidates=predicate) excludes filtered words", kind="works")
def _():
    out = an.answer(VEC, VOCAB, qframe(), candidates=lambda w: w != "queen")
    return out.predicted[0] != "queen" and np.isnan(out["rank"][0]), out.predicted.tolist()


add(A, "cosines(targets of the wrong length)",
    lambda: an.cosines(VEC, VOCAB, qframe(), ["queen"]), needles=("target",))
add(A, "cosines(target not in vocab)",
    lambda: an.cosines(VEC, VOCAB, qframe(), ["queen", "girl", "prince"]), needles=("prince",))


@probe(A, "cosines(targets=d) equals answer's cosine", kind="works")
def _():
    q = qframe()
    return np.allclose(an.cosines(VEC, VOCAB, q, q.d.tolist()), an.answer(VEC, VOCAB, q).cosine), \
        "equal"


@probe(A, "summarise(empty answers)", needles=("no",), should="an error (or n = 0 with no "
       "accuracy): it returns accuracy NaN for 0 questions", fix=f"{fx}: summarise")
def _():
    s = an.summarise(an.answer(VEC, VOCAB, qframe()).iloc[:0])
    return False, s.to_dict("records")


@probe(A, "paper_tables with models of different question counts", kind="works")
def _():
    r1 = an.evaluate(VEC, VOCAB, qframe())
    r2 = an.evaluate(VEC, VOCAB, qframe().iloc[:1])
    t = an.paper_tables({"a": r1, "b": r2})
    return "2/1" in t and "—" in t, t.splitlines()[2]


@probe(A, "restrict(questions, vocab1, vocab2) keeps the intersection", kind="works")
def _():
    k = an.restrict(qframe(), VOCAB, ["man", "woman", "king", "queen"])
    return len(k) == 2 and list(k.index) == [0, 1], k.to_dict("records")


@probe(A, "evaluate(vectors, vocab) with the shipped questions-words.txt", kind="either",
       needles=("gensim",))
def _():
    r = an.evaluate(VEC, VOCAB)
    return r["overall"]["n"] >= 0, r


# =========================================================================== embeddings
A = "embeddings"
fx = "src/efa/embeddings.py"
from efa import embeddings as em  # noqa: E402

S = np.array([[0, 1, 2], [2, 1, 0], [3, 3, 1]])
add(A, "cooccurrence(1-d)", lambda: em.cooccurrence(np.array([0, 1]), 4), needles=("[N, S]",))
add(A, "cooccurrence(float ids)", lambda: em.cooccurrence(S.astype(float), 4),
    needles=("integer",))
add(A, "cooccurrence(ids >= num_words)", lambda: em.cooccurrence(S, 3), needles=("0..2",))
add(A, "cooccurrence(S=1)", lambda: em.cooccurrence(S[:, :1], 4), needles=("S >= 2",))
add(A, "cooccurrence(ragged list of sentences)",
    lambda: em.cooccurrence([[0, 1, 2], [1, 2]], 4), needles=("sentences",),
    fix=f"{fx}: _sentences (np.asarray of ragged lists raises a bare numpy ValueError)")


@probe(A, "cooccurrence is symmetric with the right total", kind="works")
def _():
    c = em.cooccurrence(S, 4)
    return np.array_equal(c, c.T) and c.sum() == 3 * 3 * 2, c.tolist()


@probe(A, "cbow_targets: NaN where the pair never occurs, ratio columns sum to 1",
       kind="works")
def _():
    ratio, m = em.cbow_targets(em.cooccurrence(S, 5))
    col = ratio.sum(0)
    return np.allclose(col[:4], 1) and col[4] == 0 and np.isnan(m[4, 4]), col.tolist()


add(A, "prop9_correlations(W, C of other shapes, counts)",
    lambda: em.prop9_correlations(np.ones((4, 2)), np.ones((4, 3)), em.cooccurrence(S, 4)),
    needles=("W",), fix=f"{fx}: prop9_correlations (check shapes)")
add(A, "cbow_embeddings(EFA)", lambda: em.cbow_embeddings(cat_model()), needles=("CategoricalFM",))
add(A, "cbow_embeddings(CategoricalFM with intercept)",
    lambda: em.cbow_embeddings(efa.CategoricalFM(Category("w", 4), direction="unidirectional")),
    needles=("intercept",))
add(A, "attention_embeddings(2-layer EFA)", lambda: em.attention_embeddings(cat_model(
    num_layers=2)), needles=("num_layers",))


@probe(A, "attention_embeddings on the Eq. 1 configuration: shapes, W = δ W^O W^V",
       kind="works")
def _():
    torch.manual_seed(0)
    m = efa.EFA(efa.EFAConfig([Category("w", 5, dim=4)], num_layers=1, num_heads=1,
                              block="bare", bias=False))
    e = em.attention_embeddings(m)
    return e["W"].shape == (5, 4) and e["C"].shape == (5, 4) and e["tau"].shape == (6,), \
        {k: np.shape(v) for k, v in e.items()}


add(A, "attention_statistics(tau of the wrong size)",
    lambda: em.attention_statistics(np.ones(3), S, 4), needles=("tau",))
add(A, "attention_statistics(tau with 0)",
    lambda: em.attention_statistics(np.array([1, 1, 0, 1, 1.0]), S, 4), needles=("tau",))


@probe(A, "attention_statistics: pbar sums to 1; uniform tau gives constant zeta", kind="works")
def _():
    st = em.attention_statistics(np.ones(5), np.array([[0, 1, 2], [2, 3, 1]]), 4)
    z = st["zeta"][np.isfinite(st["zeta"])]
    return abs(st["pbar"].sum() - 1) < 1e-12 and np.allclose(z, z[0]), st["zeta"].tolist()


add(A, "correlation(all-NaN inputs)", lambda: em.correlation([np.nan] * 3, [1, 2, 3]),
    needles=("finite",), should="an error saying no pair is finite",
    fix=f"{fx}: correlation")
add(A, "offset_residuals(quads of shape [2, 3])",
    lambda: em.offset_residuals(np.eye(4), np.zeros((2, 3), int)), needles=("[Q, 4]",))
add(A, "offset_residuals(quads with row 9 of 4)",
    lambda: em.offset_residuals(np.eye(4), np.array([[0, 1, 2, 9]])), needles=("9",),
    fix=f"{fx}: offset_residuals (check row ids)")


@probe(A, "offset_residuals: an exact analogy gives 0", kind="works")
def _():
    r = em.offset_residuals(VEC, np.array([[1, 2, 0, 3]]))  # woman + king - man - queen = 0
    return abs(r[0]) < 1e-12, r


add(A, "quadruples(questions with a word not in vocab)",
    lambda: em.quadruples(qframe().assign(d="prince"), VOCAB), needles=("prince",),
    fix=f"{fx}: quadruples (bare KeyError)")


@probe(A, "prop13 on the toy: keys present and finite", kind="works")
def _():
    q = em.quadruples(qframe(), VOCAB)
    out = em.prop13(VEC, VEC, q, C_tilde=VEC)
    return out["quads"] == 3 and np.isfinite(out["e_C_holding"]), out


# =========================================================================== generators
A = "generators"
fx = "src/efa/generators/"
from efa import generators as gen  # noqa: E402

for kw, needles in ((dict(length=1), ("length",)), (dict(length=2.5), ("length",)),
                    (dict(lengthscale=0), ("lengthscale",)),
                    (dict(lengthscale=float("nan")), ("lengthscale",)),
                    (dict(variance=-1), ("variance",)), (dict(offset_var=-1), ("offset_var",)),
                    (dict(noise=float("nan")), ("noise",)), (dict(x_low=15, x_high=5), ("x_low",)),
                    (dict(p_channel=1.5), ("p_channel",)), (dict(jitter=-1), ("jitter",))):
    add(A, f"NoteGP({kw})", lambda kw=kw: gen.NoteGP(**kw), needles=needles)
for kw, what in ((dict(x_low=-float("inf")), "x_low"), (dict(lengthscale=float("inf")), "lengthscale"),
                 (dict(variance=float("inf")), "variance"), (dict(noise=float("inf")), "noise"),
                 (dict(offset_var=float("inf")), "offset_var")):
    def _ng(kw=kw):
        d = gen.sample_note(gen.NoteGP(length=4, **kw), 2, seed=0)
        finite = all(bool(torch.isfinite(v).all()) for v in d.fields.values())
        return finite, f"sample_note gave finite data: {finite}; y = {d.fields['y'][0].tolist()}"
    add(A, f"sample_note(NoteGP({kw}), 2, 0)", _ng, needles=(what,),
        should=f"NoteGP refuses a non-finite {what}",
        fix=f"{fx}gp.py: NoteGP.__post_init__ (check finiteness)")
add(A, "sample_note(LITERAL, 0, 0)", lambda: gen.sample_note(gen.LITERAL, 0, 0), needles=("num",))
add(A, "sample_note(LITERAL, 1.5, 0)", lambda: gen.sample_note(gen.LITERAL, 1.5, 0),
    needles=("num",))
add(A, "sample_note(LITERAL, 2, seed='a')", lambda: gen.sample_note(gen.LITERAL, 2, "a"),
    needles=("seed",), fix=f"{fx}gp.py: sample_note (validate seed)")
add(A, "sample_note({'length': 5}, 2, 0)  # not a NoteGP",
    lambda: gen.sample_note({"length": 5}, 2, 0), needles=("NoteGP",),
    fix=f"{fx}gp.py: sample_note (check spec type)")


@probe(A, "sample_note(NOISY, 3, 0): shapes, channels 0/1, first not scored, deterministic",
       kind="works")
def _():
    a, b = gen.sample_note(gen.NOISY, 3, 0), gen.sample_note(gen.NOISY, 3, 0)
    ok = (tuple(a.fields["x"].shape) == (3, 50, 1) and set(a.fields["channel"].unique().tolist())
          <= {0, 1} and not bool(a.scored[:, 0].any()) and same_snapshot(snapshot(a),
                                                                       snapshot(b)))
    return ok, {k: tuple(v.shape) for k, v in a.fields.items()}


for kw, needles in ((dict(max_num_points=6), ("max_num_points",)), (dict(batch_size=0), ("batch_size",)),
                    (dict(x_low=2, x_high=2), ("x_low",)), (dict(max_length=0), ("max_length",)),
                    (dict(noise=-1), ("noise",))):
    add(A, f"TNPGP({kw})", lambda kw=kw: gen.TNPGP(**kw), needles=needles)
add(A, "TNPGP(noise=inf) then sample_tnp",
    lambda: (lambda d: (bool(torch.isfinite(d.data.fields["y"]).all()), "y finite?"))(
        gen.sample_tnp(gen.TNPGP(noise=float("inf"), batch_size=2), 1, 0)),
    needles=("noise",), fix=f"{fx}gp.py: TNPGP.__post_init__ (check finite)")
add(A, "TNPGP(x_low=-inf) then sample_tnp",
    lambda: (lambda d: (bool(torch.isfinite(d.data.fields["x"]).all()), "x finite?"))(
        gen.sample_tnp(gen.TNPGP(x_low=-float("inf"), batch_size=2), 1, 0)),
    needles=("x_low",), fix=f"{fx}gp.py: TNPGP.__post_init__")
add(A, "sample_tnp(spec, 0, 0)", lambda: gen.sample_tnp(gen.TNPGP(batch_size=2), 0, 0),
    needles=("num_batches",))
add(A, "sample_tnp(spec, 1, 0, sizes=(0, 3))",
    lambda: gen.sample_tnp(gen.TNPGP(batch_size=2), 1, 0, sizes=(0, 3)), needles=("context",))
add(A, "sample_tnp(spec, 1, 0, sizes=(3,))",
    lambda: gen.sample_tnp(gen.TNPGP(batch_size=2), 1, 0, sizes=(3,)), needles=("sizes",))


@probe(A, "sample_tnp: context() and targets() partition the real positions", kind="works")
def _():
    d = gen.sample_tnp(gen.TNPGP(batch_size=3), 2, 0)
    c, t, v = d.context(), d.targets(), d.data.valid()
    return bool(((c & v) | t).eq(v).all()) and not bool((c & t).any()), d.num_context.tolist()


add(A, "rbf(x, x, lengthscale=0, variance=1)",
    lambda: (lambda k: (bool(torch.isfinite(k).all()), k.tolist()))(
        gen.rbf(T([0.0, 1.0]), T([0.0, 1.0]), 0.0, 1.0)),
    needles=("lengthscale",), should="refuse lengthscale <= 0 (0/0 gives NaN on the diagonal)",
    fix=f"{fx}gp.py: rbf")
add(A, "covariance(spec, x [3], k [2])",
    lambda: gen.covariance(gen.NOISY, torch.zeros(3), torch.zeros(2, dtype=torch.long)),
    needles=("k",), fix=f"{fx}gp.py: covariance (check shapes)")

for cls, kw, needles in ((gen.LinearGaussian, dict(dim=0), ("dim",)),
                         (gen.LinearGaussian, dict(dim=1.5), ("dim",)),
                         (gen.LinearGaussian, dict(prior_var=0), ("prior_var",)),
                         (gen.LinearGaussian, dict(prior_var=float("inf")), ("prior_var",)),
                         (gen.LinearGaussian, dict(noise_var=-1), ("noise_var",)),
                         (gen.LinearGaussian, dict(covariates="gauss"), ("covariates",)),
                         (gen.GPLatent, dict(lengthscale=0), ("lengthscale",)),
                         (gen.GPLatent, dict(signal_var=float("nan")), ("signal_var",)),
                         (gen.ExpFamilyLatent, dict(family="gaussian"), ("family",)),
                         (gen.ExpFamilyLatent, dict(samples=5), ("samples",)),
                         (gen.ExpFamilyLatent, dict(offset=float("nan")), ("offset",)),
                         (gen.ExpFamilyLatent, dict(offset="a"), ("offset",)),
                         (gen.ExpFamilyLatent, dict(samples=True), ("samples",))):
    add(A, f"{cls.__name__}({kw})", lambda cls=cls, kw=kw: cls(**kw), needles=needles,
        fix=f"{fx}latent.py: __post_init__")
add(A, "LinearGaussian(dim=True)", lambda: (lambda g: (False, f"accepted dim={g.dim!r}"))(
    gen.LinearGaussian(dim=True)), needles=("dim",), fix=f"{fx}latent.py: _check_design "
    "(isinstance(True, int))")
add(A, "LinearGaussian(dim=3, covariates='circle').sample(2, 3)",
    lambda: gen.LinearGaussian(dim=3, covariates="circle").sample(2, 3), needles=("circle",))
lg = gen.LinearGaussian()
for kw, needles in ((dict(n=0, length=3), ("n",)), (dict(n=2, length=0), ("length",)),
                    (dict(n=2, length=3, min_length=0), ("min_length",)),
                    (dict(n=2, length=3, min_length=4), ("min_length",)),
                    (dict(n=2, length=3, min_length=2.0), ("min_length",))):
    add(A, f"LinearGaussian().sample(**{kw})", lambda kw=kw: lg.sample(**kw), needles=needles)
add(A, "LinearGaussian().sample(2, 3, covariates=torch.zeros(2, 4, 2))  # wrong length",
    lambda: lg.sample(2, 3, covariates=torch.zeros(2, 4, 2)), needles=("covariates",),
    fix=f"{fx}latent.py: _draw_linear (check the covariates' shape)")
@probe(A, "LinearGaussian().sample(2, 3, covariates=np.zeros((2, 3, 2))) == a torch tensor's",
       kind="works", fix=f"{fx}latent.py: _draw_linear (np arrays have no .double())")
def _():
    torch.manual_seed(0)
    a = lg.sample(2, 3, covariates=np.zeros((2, 3, 2))).sequences.fields["y"]
    torch.manual_seed(0)
    b = lg.sample(2, 3, covariates=torch.zeros(2, 3, 2)).sequences.fields["y"]
    return torch.equal(a, b), "numpy and torch covariates give the same draws"
add(A, "LinearGaussian().sample(2, 3, covariates=<NaN tensor>)",
    lambda: (lambda s: (bool(torch.isfinite(s.sequences.fields["y"]).all()),
                        f"y = {s.sequences.fields['y'].tolist()}"))(
        lg.sample(2, 3, covariates=torch.full((2, 3, 2), float("nan")))),
    needles=("covariates",), should="refuse non-finite covariates",
    fix=f"{fx}latent.py: _draw_linear")


@probe(A, "ExpFamilyLatent('poisson', offset=800).sample: counts sane", kind="either",
       needles=("offset",), should="non-negative finite counts or an error (exp(800) = inf)",
       fix=f"{fx}latent.py: ExpFamilyLatent.sample")
def _():
    s = gen.ExpFamilyLatent("poisson", offset=800.0, prior_var=1e-6).sample(2, 3)
    y = s.sequences.fields["y"]
    return bool((y >= 0).all()), f"y = {y.tolist()}"


add(A, "LinearGaussian().bayes(data, direction='sideways')",
    lambda: lg.bayes(lg.sample(2, 3).sequences, "sideways"), needles=("direction",))
add(A, "LinearGaussian().bayes(data without 'c')",
    lambda: lg.bayes(Sequences.from_lists({"y": [[1.0, 2.0]]})), needles=("'c'",))
add(A, "LinearGaussian(dim=2).bayes(data with c of dim 3)",
    lambda: lg.bayes(gen.LinearGaussian(dim=3).sample(2, 3).sequences), needles=("'c'",))
add(A, "LinearGaussian().bayes(data with NaN y)",
    lambda: lg.bayes((lambda d: Sequences({**d.fields, "y": d.fields["y"].index_fill(
        1, T([1]), float("nan"))}, d.lengths))(lg.sample(2, 3).sequences)),
    needles=("'y'", "position 1"))
add(A, "ExpFamilyLatent().bayes(y = 2 for Bernoulli)",
    lambda: gen.ExpFamilyLatent(samples=10).bayes((lambda d: Sequences(
        {**d.fields, "y": d.fields["y"] + 2}, d.lengths))(
        gen.ExpFamilyLatent().sample(2, 3).sequences)), needles=("'y'",))
add(A, "ExpFamilyLatent().bayes(method='mcmc')",
    lambda: gen.ExpFamilyLatent(samples=10).bayes(gen.ExpFamilyLatent().sample(2, 3).sequences,
                                                  method="mcmc"), needles=("method",))


@probe(A, "LinearGaussian.bayes (bidirectional) == Bayesian linear regression on the others",
       kind="works")
def _():
    g = gen.LinearGaussian(dim=2, noise_var=0.3)
    d = g.sample(1, 5, seed=1).sequences
    b = g.bayes(d)
    c, y = d.fields["c"][0].double(), d.fields["y"][0].double()
    i = 2
    keep = [j for j in range(5) if j != i]
    zbar = g.posterior_mean(c[keep], y[keep])
    return abs(float(zbar @ c[i]) - float(b.mean[0, i])) < 1e-6, (float(zbar @ c[i]),
                                                                   float(b.mean[0, i]))


@probe(A, "GPLatent.bayes (unidirectional) first position = prior (mean 0)", kind="works")
def _():
    g = gen.GPLatent()
    d = g.sample(2, 4, seed=0).sequences
    b = g.bayes(d, "unidirectional")
    var0 = g.signal_var + g.noise_var
    lp0 = -0.5 * (math.log(2 * math.pi * var0) + d.fields["y"][0, 0].double() ** 2 / var0)
    return abs(float(b.mean[0, 0])) < 1e-9 and abs(float(b.log_density[0, 0] - lp0)) < 1e-6, \
        (float(b.mean[0, 0]), float(b.log_density[0, 0]), float(lp0))


@probe(A, "ExpFamilyLatent.bayes: laplace and importance agree roughly; means in (0,1)",
       kind="works")
def _():
    g = gen.ExpFamilyLatent(samples=200)
    d = g.sample(2, 5, seed=0).sequences
    a, b = g.bayes(d, method="laplace"), g.bayes(d)
    m = d.predicted("y")
    ok = (bool(((a.mean[m] > 0) & (a.mean[m] < 1)).all())
          and float((a.mean[m] - b.mean[m]).abs().max()) < 0.1)
    return ok, float((a.mean[m] - b.mean[m]).abs().max())


tf = lambda: [Category("item", 5), Value("count", fam.Poisson())]  # noqa: E731
for kw, needles in ((dict(max_len=0), ("max_len",)), (dict(max_len=4, num_heads=0), ("num_heads",)),
                    (dict(max_len=4, strength=0), ("strength",)),
                    (dict(max_len=4, strength=float("inf")), ("strength",)),
                    (dict(max_len=4, value_scale=-1), ("value_scale",)),
                    (dict(max_len=4, dim=0), ("dim",))):
    add(A, f"attention_teacher(fields, **{kw})",
        lambda kw=kw: gen.attention_teacher(tf(), **kw), needles=needles)
add(A, "attention_teacher([], max_len=4)", lambda: gen.attention_teacher([], max_len=4),
    needles=("field",))
add(A, "attention_teacher(['item'], max_len=4)  # a name, not a field",
    lambda: gen.attention_teacher(["item"], max_len=4), needles=("field",),
    fix=f"{fx}teacher.py: attention_teacher (f.name on a str)")
add(A, "attention_teacher([Attribute('a')], max_len=4)  # no target",
    lambda: gen.attention_teacher([Attribute("a")], max_len=4), needles=("target",))


@probe(A, "attention_teacher: same seed same weights, other seed other weights", kind="works")
def _():
    a, b = gen.attention_teacher(tf(), max_len=4, seed=1), gen.attention_teacher(tf(), max_len=4,
                                                                                seed=1)
    c = gen.attention_teacher(tf(), max_len=4, seed=2)
    same = all(torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                 b.state_dict().values()))
    diff = any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                     c.state_dict().values()))
    return same and diff, (same, diff)


@probe(A, "sample(teacher): deterministic, values in range, bayes_nll finite", kind="works")
def _():
    t = gen.attention_teacher(tf() + [Attribute("a", size=2)], max_len=4, seed=0)
    a, b = gen.sample(t, 6, seed=3), gen.sample(t, 6, seed=3)
    nll = gen.bayes_nll(t, a)
    ok = (same_snapshot(snapshot(a), snapshot(b)) and int(a.fields["item"].max()) < 5
          and int(a.fields["count"].min()) >= 0 and all(math.isfinite(v) and v > 0
                                                       for v in nll.values()))
    return ok, nll


add(A, "sample(teacher, 0)", lambda: gen.sample(gen.attention_teacher(tf(), max_len=4), 0),
    needles=("n",))
add(A, "sample(teacher, 2, length=5) > max_len",
    lambda: gen.sample(gen.attention_teacher(tf(), max_len=4), 2, length=5), needles=("max_len",))
add(A, "sample(bidirectional EFA, 2)", lambda: gen.sample(cat_model(), 2),
    needles=("unidirectional",))
add(A, "sample(unidirectional EFA without max_len, 2)",
    lambda: gen.sample(efa.EFA(efa.EFAConfig([Category("item", 5, dim=4)], num_layers=1,
                                             direction="unidirectional")), 2),
    needles=("length",), should="ValueError: give length= (the model has no max_len)",
    fix=f"{fx}teacher.py: sample")
add(A, "sample(teacher, 2, batch_size=0)",
    lambda: gen.sample(gen.attention_teacher(tf(), max_len=4), 2, batch_size=0),
    needles=("batch_size",))


@probe(A, "student_fields(teacher) names, kinds and families", kind="works")
def _():
    t = gen.attention_teacher(tf(), max_len=4)
    s = gen.student_fields(t)
    return [(f.kind, f.name) for f in s] == [("category", "item"), ("value", "count")] \
        and s[1].family is not t.fields[1].family, [f.config() for f in s]


# =========================================================================== baselines
A = "baselines"
fx = "src/efa/baselines/fm.py"
add(A, "CategoricalFM(Category('item', 6), direction='bidirectonal')  # typo",
    lambda: (lambda m: (False, f"accepted direction={m.direction!r}: computed as causal, "
                        f"intercept={m.intercept is not None}"))(
        efa.CategoricalFM(Category("item", 6), direction="bidirectonal")),
    needles=("direction",), should="ValueError: direction must be 'bidirectional' or "
    "'unidirectional'", fix=f"{fx}: CategoricalFM.__init__ / ValueFM.__init__")
add(A, "ValueFM(item, value, direction='both')",
    lambda: (lambda m: (False, f"accepted direction={m.direction!r}"))(
        efa.ValueFM(Category("movie", 6), Value("rating", fam.Poisson(1)), direction="both")),
    needles=("direction",), fix=f"{fx}: ValueFM.__init__")
add(A, "CategoricalFM(field, pooling='max')",
    lambda: efa.CategoricalFM(Category("item", 6), pooling="max"), needles=("pooling",))
add(A, "CategoricalFM(Value('y', Gaussian()))",
    lambda: efa.CategoricalFM(Value("y", fam.Gaussian())), needles=("Category",),
    should="TypeError: CategoricalFM needs a Category field",
    fix=f"{fx}: CategoricalFM.__init__")
add(A, "CategoricalFM(field, dim=0)",
    lambda: (lambda m: (False, "accepted dim=0: every logit is 0"))(
        efa.CategoricalFM(Category("item", 6), dim=0)), needles=("dim",),
    fix=f"{fx}: CategoricalFM.__init__")
add(A, "ValueFM(item, Value('y', HeteroscedasticGaussian()))",
    lambda: efa.ValueFM(Category("movie", 6), Value("y", fam.HeteroscedasticGaussian())),
    needles=("one-parameter",))
add(A, "KNNFM(coords, Value('y', Poisson()), k=2)",
    lambda: efa.baselines.KNNFM(Attribute("coords", size=2), Value("y", fam.Poisson()), 2),
    needles=("Gaussian",))
add(A, "KNNFM(coords, value, k='3')",
    lambda: efa.baselines.KNNFM(Attribute("coords", size=2), Value("y", fam.Gaussian()), "3"),
    needles=("k",), fix=f"{fx}: KNNFM.__init__")


@probe(A, "CategoricalFM bidirectional: fit + evaluate finite, predictions sum to 1",
       kind="works")
def _():
    m = efa.CategoricalFM(Category("item", 6), dim=4)
    quiet_fit(m, cat_data(), cat_data(seed=1), max_epochs=2)
    p = m.predict_mean(cat_data())["item"][cat_data().valid()]
    r = efa.evaluate(m, cat_data())
    return math.isfinite(r["item"]) and torch.allclose(p.sum(-1), torch.ones(len(p)),
                                                       atol=1e-5), r


@probe(A, "ValueFM: fit + evaluate finite", kind="works")
def _():
    m = efa.ValueFM(Category("movie", 6), Value("rating", fam.Poisson(1)), dim=4)
    quiet_fit(m, mr_data(), max_epochs=1)
    r = efa.evaluate(m, mr_data())
    return math.isfinite(r["rating"]), r


@probe(A, "CategoricalFM with distinct field: zero mass on context items", kind="works")
def _():
    m = efa.CategoricalFM(Category("item", 6, distinct=True), dim=4)
    d = Sequences.from_lists({"item": [[0, 3, 5]]})
    p = m.predict_mean(d)["item"][0]
    return float(p[0, 3] + p[0, 5]) < 1e-6, p[0].tolist()


# =========================================================================== cli
A = "cli"
fx = "src/efa/cli.py"
from typer.testing import CliRunner  # noqa: E402

from efa.cli import app  # noqa: E402

RUNNER = CliRunner()


def cli(*args):
    r = RUNNER.invoke(app, [str(a) for a in args], catch_exceptions=True)
    text = (r.output or "") + (getattr(r, "stderr", "") if hasattr(r, "stderr_bytes") and
                               r.stderr_bytes else "")
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise RuntimeError(f"uncaught {type(r.exception).__name__}: {r.exception}")
    return r.exit_code, text


def cli_err(*args):
    """An error exit (code != 0) with a message: raise it so the needles are checked."""
    code, text = cli(*args)
    if code == 0:
        return False, f"exit 0: {text[-300:]}"
    raise SystemExit(f"exit {code}: {text.strip()[-600:]}")


def cli_ok(check, *args):
    code, text = cli(*args)
    return code == 0 and check(text), f"exit {code}: {text.strip()[-400:]}"


add(A, "efa --version", lambda: cli_ok(lambda t: "efa 0." in t, "--version"), kind="works")
add(A, "efa list", lambda: cli_ok(lambda t: "synthetic" in t and "teacher" in t, "list"),
    kind="works")
add(A, "efa (no args) shows help", lambda: (lambda r: (("Usage" in r[1]), r[1][:80]))(cli()),
    kind="works")
add(A, "efa reproduc synthetic  # misspelt command", lambda: cli_err("reproduc", "synthetic"),
    needles=("No such command",))
add(A, "efa reproduce nope", lambda: cli_err("reproduce", "nope"), needles=("unknown experiment",))
add(A, "efa reproduce synthetic --seeds 0", lambda: cli_err("reproduce", "synthetic", "--seeds",
                                                            "0"), needles=("seeds",))
add(A, "efa reproduce synthetic --seeds abc", lambda: cli_err("reproduce", "synthetic", "--seeds",
                                                              "abc"), needles=("seeds",))
add(A, "efa reproduce synthetic --workers -1", lambda: cli_err("reproduce", "synthetic",
                                                               "--workers", "-1"),
    needles=("workers",))
add(A, "efa reproduce synthetic --threads 0", lambda: cli_err("reproduce", "synthetic",
                                                              "--threads", "0"),
    needles=("threads",))
add(A, "efa reproduce synthetic --seed 2  # misspelt option",
    lambda: cli_err("reproduce", "synthetic", "--seed", "2"), needles=("--seed",))
add(A, "efa reproduce synthetic --quick --only model=x",
    lambda: cli_err("reproduce", "synthetic", "--quick", "--only", "model=x"),
    needles=("--only",))


@probe(A, "efa reproduce fenchel-toy --quick --out <a file>", needles=("not a folder",))
def _():
    f = tmpdir("cli_outfile") / "f"
    f.write_text("x")
    return cli_err("reproduce", "fenchel-toy", "--quick", "--out", f)


add(A, "efa reproduce fenchel-toy --quick --device cuda:3",
    lambda: cli_err("reproduce", "fenchel-toy", "--quick", "--out", tmpdir("cli_dev"),
                    "--device", "cuda:3"), needles=("cuda:3",))
add(A, "efa reproduce fenchel-toy --only badrule --out tmp",
    lambda: cli_err("reproduce", "fenchel-toy", "--only", "badrule", "--out",
                    tmpdir("cli_only")), needles=("KEY=PATTERN",))
add(A, "efa reproduce fenchel-toy --only seed=9 --out tmp",
    lambda: cli_err("reproduce", "fenchel-toy", "--seeds", "1", "--only", "seed=9", "--out",
                    tmpdir("cli_only2")), needles=("matches none",))
add(A, "efa reproduce fenchel-toy --only colour=1 --out tmp",
    lambda: cli_err("reproduce", "fenchel-toy", "--seeds", "1", "--only", "colour=1", "--out",
                    tmpdir("cli_only3")), needles=("colour",))


def _quick_out():
    def make():
        out = tmpdir("cli_quick")
        code, text = cli("reproduce", "fenchel-toy", "--quick", "--seeds", "1", "--out", out,
                         "--no-progress")
        return out, code, text
    return cached("quick", make)


@probe(A, "efa reproduce fenchel-toy --quick --seeds 1 --out tmp writes results", kind="works")
def _():
    out, code, text = _quick_out()
    doc = json.loads((out / "fenchel-toy" / "results.json").read_text())
    ok = code == 0 and doc["command"].endswith("--quick") and (out / "fenchel-toy" /
                                                              "results.md").exists()
    return ok, f"exit {code}; command {doc['command']!r}; files " \
        f"{sorted(p.name for p in (out / 'fenchel-toy').iterdir())}"


@probe(A, "efa reproduce again into the same --out with other seeds", needles=("--force",))
def _():
    out, _, _ = _quick_out()
    return cli_err("reproduce", "fenchel-toy", "--quick", "--seeds", "2", "--out", out,
                   "--no-progress")


@probe(A, "efa replot <quick results>", kind="works")
def _():
    out, _, _ = _quick_out()
    return cli_ok(lambda t: "redrew" in t, "replot", out / "fenchel-toy")


@probe(A, "efa replot --tables <quick results>", kind="either", needles=("no runs",))
def _():
    out, _, _ = _quick_out()
    code, text = cli("replot", out / "fenchel-toy", "--tables")
    if code != 0:
        raise SystemExit(text)
    return "redrew" in text, text


add(A, "efa replot /tmp/probes/work/none", lambda: cli_err("replot", WORK / "none"),
    needles=("does not exist",))


def _results_copy(name, edit):
    out, _, _ = _quick_out()
    d = tmpdir(name)
    shutil.copytree(out / "fenchel-toy", d / "fenchel-toy")
    p = d / "fenchel-toy" / "results.json"
    doc = json.loads(p.read_text())
    new = edit(doc)
    p.write_text(new if isinstance(new, str) else json.dumps(new))
    return d


add(A, "efa replot (results.json not JSON)",
    lambda: cli_err("replot", _results_copy("rp_badjson", lambda d: "{oops") / "fenchel-toy"),
    needles=("not valid JSON",))
add(A, "efa replot (results.json is a list)",
    lambda: cli_err("replot", _results_copy("rp_list", lambda d: []) / "fenchel-toy"),
    needles=("JSON object",))
add(A, "efa replot (results.json without rows)",
    lambda: cli_err("replot", _results_copy("rp_norows", lambda d: {k: v for k, v in d.items()
                                                                    if k != "rows"})
                    / "fenchel-toy"), needles=("rows",))
add(A, "efa replot (a row's values are strings)",
    lambda: cli_err("replot", _results_copy("rp_strvals", lambda d: {**d, "rows": [
        {**d["rows"][0], "values": ["abc"]}]}) / "fenchel-toy"), needles=("row 0",),
    should="ValueError naming the row and the bad value",
    fix="experiments/report.py: Report.from_json (check values are numbers)")


@probe(A, "efa replot (a row with an empty values list)", needles=("row 0",),
       should="an error naming the row (it writes 'nan ± 0.000' into results.md)",
       fix="experiments/report.py: Report.from_json / Row")
def _():
    d = _results_copy("rp_empty", lambda d: {**d, "rows": [{**d["rows"][0], "values": []}]})
    code, text = cli("replot", d / "fenchel-toy")
    md = (d / "fenchel-toy" / "results.md").read_text()
    if code != 0:
        raise SystemExit(text)
    return False, f"exit 0; results.md row: {[ln for ln in md.splitlines() if 'nan' in ln][:1]}"


@probe(A, "efa replot (unknown experiment name in results.json)", needles=("unknown experiment",))
def _():
    d = _results_copy("rp_unknown", lambda d: {**d, "experiment": "nope"})
    return cli_err("replot", d / "fenchel-toy")


@probe(A, "efa replot (unknown experiment) leaves results.md untouched", kind="works",
       should="fail before rewriting results.md", fix=f"{fx}: replot (resolve the experiment "
       "before writing results.md)")
def _():
    d = _results_copy("rp_unknown2", lambda d: {**d, "experiment": "nope"})
    md = d / "fenchel-toy" / "results.md"
    before = md.read_text()
    cli("replot", d / "fenchel-toy")
    return md.read_text() == before, "results.md rewritten" if md.read_text() != before else "kept"


def _summary_dir(name, edit, readme=True):
    d = _results_copy(name, edit)
    doc = json.loads((d / "fenchel-toy" / "results.json").read_text()) \
        if (d / "fenchel-toy" / "results.json").read_text().startswith("{") else None
    if isinstance(doc, dict) and "command" in doc:
        doc["command"] = doc["command"].replace(" --quick", "")
        (d / "fenchel-toy" / "results.json").write_text(json.dumps(doc))
    r = d / "README.md"
    if readme:
        r.write_text("# x\n<!-- results:start -->\nold\n<!-- results:end -->\n")
    return d, r


@probe(A, "efa summary (valid results, full command)", kind="works")
def _():
    d, r = _summary_dir("sum_ok", lambda d: d)
    return cli_ok(lambda t: "updated" in t, "summary", "--readme", r, "--results", d)


add(A, "efa summary --results /tmp/probes/work/none",
    lambda: cli_err("summary", "--readme", WORK / "README.md", "--results", WORK / "none"),
    needles=("does not exist",))


@probe(A, "efa summary (a results.json with rows = [])", needles=("rows",),
       should="an error naming the file (it raises IndexError: list index out of range)",
       fix="experiments/summary.py: table (doc['rows'][0])")
def _():
    d, r = _summary_dir("sum_norows", lambda d: {**d, "rows": []})
    return cli_err("summary", "--readme", r, "--results", d)


@probe(A, "efa summary (rows without 'mean'/'std', which replot accepts)", kind="works",
       should="recompute mean/std as Report.from_json does, or name the file and row",
       fix="experiments/summary.py: tables (reads raw JSON; use Report.read)")
def _():
    d, r = _summary_dir("sum_nomean", lambda d: {**d, "rows": [
        {k: v for k, v in row.items() if k not in ("mean", "std")} for row in d["rows"]]})
    return cli_ok(lambda text: "updated" in text, "summary", "--readme", r, "--results", d)


@probe(A, "efa summary (seeds is a number, not a list)", needles=("seeds",),
       fix="experiments/summary.py: tables (len(doc['seeds']))")
def _():
    d, r = _summary_dir("sum_seeds", lambda d: {**d, "seeds": 1})
    return cli_err("summary", "--readme", r, "--results", d)


@probe(A, "efa summary (README without markers)", needles=("results:start",))
def _():
    d, r = _summary_dir("sum_nomark", lambda d: d)
    r.write_text("# nothing\n")
    return cli_err("summary", "--readme", r, "--results", d)


@probe(A, "efa summary (README missing) does not rewrite results.md first", kind="works",
       should="check the README before touching anything", fix="experiments/summary.py: "
       "update_readme (read the README before rewriting results.md)")
def _():
    d, r = _summary_dir("sum_noreadme", lambda d: d, readme=False)
    md = d / "fenchel-toy" / "results.md"
    md.write_text("hand-edited\n")
    code, text = cli("summary", "--readme", r, "--results", d)
    return code != 0 and md.read_text() == "hand-edited\n", \
        f"exit {code}; results.md now starts {md.read_text()[:30]!r}"


@probe(A, "efa summary (--quick results)", needles=("--quick",))
def _():
    out, _, _ = _quick_out()
    r = tmpdir("sum_quick") / "README.md"
    r.write_text("<!-- results:start -->\n<!-- results:end -->\n")
    return cli_err("summary", "--readme", r, "--results", out)


# ---------------------------------------------------------------- efa train
def _train_inputs(name):
    d = tmpdir(name)
    efa.save(mr_model(), d / "init")
    mr_data().save(d / "train.safetensors")
    mr_data(seed=1).save(d / "val.safetensors")
    (d / "cfg.json").write_text(json.dumps({"max_epochs": 1, "threads": 1}))
    return d


@probe(A, "efa train DATA --model M --out O --val V --config C", kind="works")
def _():
    d = _train_inputs("tr_ok")
    code, text = cli("train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
                     "--val", d / "val.safetensors", "--config", d / "cfg.json")
    ok = code == 0 and (d / "out" / "config.json").exists()
    if ok:
        a, b = efa.load(d / "init"), efa.load(d / "out")
        ok = any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(),
                                                       b.state_dict().values()))
    return ok, f"exit {code}: {text.strip()[-200:]}"


add(A, "efa train <missing data>", lambda: (lambda d: cli_err(
    "train", d / "nope.safetensors", "--model", d / "init", "--out", d / "out"))(
    _train_inputs("tr_nodata")), needles=("nope.safetensors",))
add(A, "efa train --model <missing>", lambda: (lambda d: cli_err(
    "train", d / "train.safetensors", "--model", d / "nomodel", "--out", d / "out"))(
    _train_inputs("tr_nomodel")), needles=("nomodel",))
add(A, "efa train (no --out)", lambda: (lambda d: cli_err(
    "train", d / "train.safetensors", "--model", d / "init"))(_train_inputs("tr_noout")),
    needles=("--out",))
add(A, "efa train --out <non-empty folder>", lambda: (lambda d: cli_err(
    "train", d / "train.safetensors", "--model", d / "init", "--out", d))(
    _train_inputs("tr_nonempty")), needles=("--force",))
add(A, "efa train --out <a file>", lambda: (lambda d: cli_err(
    "train", d / "train.safetensors", "--model", d / "init", "--out", d / "cfg.json"))(
    _train_inputs("tr_outfile")), needles=("cfg.json",))
add(A, "efa train --config <not JSON>", lambda: (lambda d: ((d / "cfg.json").write_text("{x"),
                                                             cli_err("train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
                                                                     "--config", d / "cfg.json"))[1])(
    _train_inputs("tr_badcfg")), needles=("not valid JSON",))
add(A, "efa train --config <JSON list>", lambda: (lambda d: ((d / "cfg.json").write_text("[1]"),
                                                              cli_err("train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
                                                                      "--config", d / "cfg.json"))[1])(
    _train_inputs("tr_listcfg")), needles=("JSON object",))
add(A, "efa train --config {'max_epoch': 1}", lambda: (lambda d: (
    (d / "cfg.json").write_text('{"max_epoch": 1}'),
    cli_err("train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
            "--config", d / "cfg.json"))[1])(_train_inputs("tr_unkcfg")), needles=("max_epoch",))
add(A, "efa train --config {'lr': -1}", lambda: (lambda d: (
    (d / "cfg.json").write_text('{"lr": -1}'),
    cli_err("train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
            "--config", d / "cfg.json"))[1])(_train_inputs("tr_lrcfg")), needles=("lr",))
add(A, "efa train --config <missing file>", lambda: (lambda d: cli_err(
    "train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
    "--config", d / "nocfg.json"))(_train_inputs("tr_nocfg")), needles=("nocfg.json",))
add(A, "efa train --device cuda", lambda: (lambda d: cli_err(
    "train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
    "--device", "cuda"))(_train_inputs("tr_cuda")), needles=("cuda",))
add(A, "efa train (data with a field the model lacks)", lambda: (lambda d: (
    cat_data().save(d / "other.safetensors"),
    cli_err("train", d / "other.safetensors", "--model", d / "init", "--out", d / "out"))[1])(
    _train_inputs("tr_fields")), needles=("movie",))
add(A, "efa train (data file tampered: no 'order')", lambda: (lambda d: (
    tamper_safetensors(d / "train.safetensors", edit_meta=lambda m: {"efa": "sequences"}),
    cli_err("train", d / "train.safetensors", "--model", d / "init", "--out", d / "out"))[1])(
    _train_inputs("tr_tamper")), needles=("order",),
    fix="src/efa/core/data.py: Sequences.load")


@probe(A, "efa train --checkpoint-dir then the same command with --force resumes", kind="works")
def _():
    d = _train_inputs("tr_ckpt")
    args = ["train", d / "train.safetensors", "--model", d / "init", "--out", d / "out",
            "--config", d / "cfg.json", "--checkpoint-dir", d / "ck"]
    c1, t1 = cli(*args)
    c2, t2 = cli(*args, "--force")
    return c1 == 0 and c2 == 0 and (d / "ck" / "checkpoint.safetensors").exists(), (t1[-100:],
                                                                                    t2[-100:])


@probe(A, "subprocess: efa --version / python -m efa.cli list", kind="works")
def _():
    a = subprocess.run([EFA_BIN, "--version"], capture_output=True, text=True, timeout=60)
    b = subprocess.run([PY, "-m", "efa.cli", "list"], capture_output=True, text=True, timeout=60)
    return a.returncode == 0 and "efa" in a.stdout and b.returncode == 0 and "synthetic" in \
        b.stdout, (a.stdout.strip(), b.returncode)


@probe(A, "subprocess: efa replot <missing> prints one line, exit 2, no traceback",
       kind="works")
def _():
    r = subprocess.run([EFA_BIN, "replot", str(WORK / "none")], capture_output=True, text=True,
                       timeout=60)
    return r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1, \
        r.stderr


@probe(A, "subprocess: EFA_DEBUG=1 efa replot <missing> shows the traceback", kind="works")
def _():
    r = subprocess.run([EFA_BIN, "replot", str(WORK / "none")], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "EFA_DEBUG": "1"})
    return r.returncode != 0 and "Traceback" in r.stderr, r.stderr[-200:]


# =========================================================================== journal / runner / report
A = "runner"
fx = "experiments/"
from experiments.harness import journal as jr  # noqa: E402
from experiments.harness import runner as rn  # noqa: E402
from experiments.harness.report import Report, Row  # noqa: E402


def _jdir(name):
    return tmpdir("journal_" + name)


@probe(A, "journal round trip: tuples, NaN/inf, int keys, arrays, tensors, numpy scalars",
       kind="works")
def _():
    d = _jdir("rt")
    obj = {"t": (1, (2.5, "a")), "nan": float("nan"), "inf": -math.inf, 3: "int key",
           (1, 2): "tuple key", "arr": np.arange(3.0), "ten": torch.arange(2),
           "i": np.int64(7), "f": np.float32(1.5), "b": np.bool_(True), "big": 2**70,
           "__tuple__": "a tag as a key", "list": [None, True, "x"]}
    jr.save(d, "k", obj)
    back = jr.load(d, "k")
    ok = (back["t"] == (1, (2.5, "a")) and math.isnan(back["nan"]) and back["inf"] == -math.inf
          and back[3] == "int key" and back[(1, 2)] == "tuple key"
          and np.array_equal(back["arr"], np.arange(3.0)) and torch.equal(back["ten"],
                                                                         torch.arange(2))
          and back["i"] == 7 and back["f"] == 1.5 and bool(back["b"]) and back["big"] == 2**70
          and back["__tuple__"] == "a tag as a key" and back["list"] == [None, True, "x"])
    return ok, {k: type(v).__name__ for k, v in back.items()}


@probe(A, "journal.save(result holding an object) returns False, writes nothing", kind="works")
def _():
    d = _jdir("obj")
    ok = jr.save(d, "k", {"x": object()}) is False and jr.load(d, "k") is None
    return ok, sorted(p.name for p in d.iterdir())


@probe(A, "journal.load(planted KEY.pkl)", kind="sec", needles=("pickle",))
def _():
    d = _jdir("pkl")
    planted_pickle(d / "k.pkl", d / "PWNED")
    try:
        jr.load(d, "k")
    finally:
        if (d / "PWNED").exists():
            return False, "pickle executed"
    return True, "no error and not executed"


@probe(A, "journal.load(KEY.safetensors is a planted pickle)", kind="sec")
def _():
    d = _jdir("pkl2")
    jr.save(d, "k", {"a": np.arange(2)})
    planted_pickle(d / "k.safetensors", d / "PWNED")
    r = jr.load(d, "k")
    return not (d / "PWNED").exists() and r is None, f"load -> {r!r}"


for name, text in (("items with a dict key", '{"__items__": [[{"a": 1}, 2]]}'),
                   ("__tuple__ not a list", '{"__tuple__": 5}'),
                   ("__float__ null", '{"__float__": null}'),
                   ("__items__ not pairs", '{"__items__": [1, 2]}'),
                   ("__array__ not a string", '{"__array__": [1]}')):
    def _jt(text=text):
        d = _jdir("t" + str(abs(hash(text)) % 10**6))
        (d / "k.json").write_text(text)
        r = jr.load(d, "k")
        return r is None, f"load -> {r!r}"
    add(A, f"journal.load(tampered entry: {name})", _jt, kind="works",
        should="a torn/invalid entry is treated as absent (None: the job runs again), as "
        "documented", fix=f"{fx}journal.py: load (catch TypeError too, or validate tags)")


@probe(A, "journal.load(entry JSON not valid) -> None", kind="works")
def _():
    d = _jdir("bad")
    (d / "k.json").write_text("{oops")
    return jr.load(d, "k") is None, "None"


@probe(A, "journal.load(__float__ '1e400') -> inf, (no eval)", kind="works")
def _():
    d = _jdir("flt")
    (d / "k.json").write_text('{"x": {"__float__": "__import__(\'os\')"}}')
    r = jr.load(d, "k")
    return r is None, f"{r!r}"


@probe(A, "runner.job_key: stable, key-order independent", kind="works")
def _():
    a = rn.job_key({"a": 1, "b": [1, 2]})
    b = rn.job_key({"b": [1, 2], "a": 1})
    c = rn.job_key({"a": 2, "b": [1, 2]})
    return a == b and a != c and len(a) == 20, a


add(A, "runner.select(jobs, ['model'])", lambda: rn.select([{"model": "x"}], ["model"]),
    needles=("KEY=PATTERN",))
add(A, "runner.select(jobs, ['=x'])", lambda: rn.select([{"model": "x"}], ["=x"]),
    needles=("KEY=PATTERN",))
add(A, "runner.select(jobs, ['colour=x'])", lambda: rn.select([{"model": "x"}], ["colour=x"]),
    needles=("colour",))
add(A, "runner.select(jobs, ['model=y*'])", lambda: rn.select([{"model": "x"}], ["model=y*"]),
    needles=("matches none",))


@probe(A, "runner.select: globs on str(value), several rules AND-ed", kind="works")
def _():
    jobs = [{"model": "Logit", "seed": 0}, {"model": "Logit", "seed": 1},
            {"model": "FM", "seed": 0}]
    got = rn.select(jobs, ["model=L*", "seed=1"])
    return got == [jobs[1]], got


for v in ("0", "abc", "-1"):
    def _w(v=v):
        old = os.environ.get("EFA_WORKERS")
        os.environ["EFA_WORKERS"] = v
        try:
            return rn.default_workers(False)
        finally:
            os.environ["EFA_WORKERS"] = old or "1"
    add(A, f"runner.default_workers with EFA_WORKERS={v!r}", _w, needles=("EFA_WORKERS",))


@probe(A, "runner.check_destination(<a file>/x)", needles=("not a folder",))
def _():
    f = tmpdir("cd_file") / "f"
    f.write_text("x")
    rn.check_destination(f / "x", "cmd", False)


@probe(A, "runner.check_destination(results made by another command)", needles=("--force",))
def _():
    d = tmpdir("cd_other")
    (d / "results.json").write_text(json.dumps({"command": "efa reproduce x --seeds 5"}))
    rn.check_destination(d, "efa reproduce x --seeds 1", False)


@probe(A, "runner.check_destination(results.json not JSON) without force", needles=("--force",))
def _():
    d = tmpdir("cd_bad")
    (d / "results.json").write_text("{oops")
    rn.check_destination(d, "efa reproduce x --seeds 1", False)


@probe(A, "runner.check_destination(results.json = [] ) without force", needles=("--force",),
       fix=f"{fx}runner.py: check_destination (json.loads(...).get on a list)")
def _():
    d = tmpdir("cd_list")
    (d / "results.json").write_text("[]")
    rn.check_destination(d, "efa reproduce x --seeds 1", False)


@probe(A, "runner.write_atomically keeps files the run does not make, replaces the others",
       kind="works")
def _():
    d = tmpdir("wa") / "exp"
    d.mkdir()
    (d / "benchmark.json").write_text("keep")
    (d / "results.md").write_text("old")
    rep = Report("fenchel-toy", "cmd", [0])
    rep.add("s", "m", "metric", [1.0, 2.0])
    rn.write_atomically(rep, d, lambda r, f: None)
    return ((d / "benchmark.json").read_text() == "keep" and "old" not in
            (d / "results.md").read_text() and not list(d.parent.glob(".exp.*"))), \
        sorted(p.name for p in d.iterdir())


add(A, "Report.from_json([])", lambda: Report.from_json([]), needles=("JSON object",))
add(A, "Report.from_json({'experiment': 'x'})", lambda: Report.from_json({"experiment": "x"}),
    needles=("incomplete",))
add(A, "Report.from_json(rows = 'abc')",
    lambda: Report.from_json({"experiment": "x", "command": "c", "seeds": [0], "rows": "abc"}),
    needles=("row",))
add(A, "Report.from_json(rows = {'a': 1})  # dict, not list",
    lambda: Report.from_json({"experiment": "x", "command": "c", "seeds": [0],
                              "rows": {"a": 1}}), needles=("row",))
add(A, "Row('s', 'm', 'metric', [])  # no values",
    lambda: (lambda r: (False, f"mean={r.mean}"))(Row("s", "m", "metric", [])),
    needles=("values",), should="ValueError: a row needs at least one value",
    fix=f"{fx}report.py: Row.__post_init__")
add(A, "Row('s', 'm', 'metric', [1.0, float('nan')])",
    lambda: (lambda r: (True, f"mean={r.mean}, kept as NaN (a failed seed)"))(
        Row("s", "m", "metric", [1.0, float("nan")])), kind="either", needles=("values",))
add(A, "experiments.get('nope')", lambda: __import__("experiments", fromlist=["get"]).get(
    "nope"), needles=("unknown experiment",))


@probe(A, "runner.retable(folder without runs)", needles=("no runs",))
def _():
    out, _, _ = _quick_out()
    d = tmpdir("retable") / "fenchel-toy"
    shutil.copytree(out / "fenchel-toy", d)
    doc = json.loads((d / "results.json").read_text())
    doc.pop("runs", None)
    (d / "results.json").write_text(json.dumps(doc))
    rn.retable(d)


@probe(A, "Report.write/read round trip", kind="works")
def _():
    d = tmpdir("rep_rt")
    rep = Report("fenchel-toy", "cmd", [0, 1], notes=["n"], extra={"runs": [1, 2]},
                 figures={"f": [1]}, sections=["## s"])
    rep.add("s", "m", "metric", [1.0, 2.0], paper=1.4)
    rep.write(d)
    back = Report.read(d)
    ok = (back.rows[0].mean == 1.5 and back.rows[0].paper == 1.4 and back.extra["runs"] == [1, 2]
          and back.notes == ["n"] and back.sections == ["## s"])
    return ok, back.rows[0]


# =========================================================================== misc (moe, datasets)
A = "misc"
from efa import moe  # noqa: E402
from efa.datasets import tabular as dtab  # noqa: E402

add(A, "moe.mixture(softmax residual EFA)", lambda: moe.mixture(cat_model(), cat_data()),
    needles=("residual_linear",))
add(A, "moe.mixture(2-layer residual_linear)", lambda: moe.mixture(
    cat_model(num_layers=2, block="residual_linear", bias=False), cat_data()),
    needles=("layer",))


@probe(A, "moe.mixture: Σ π f reproduces the model's logits (Theorem 2)", kind="works")
def _():
    torch.manual_seed(0)
    m = efa.EFA(efa.EFAConfig([Category("item", 6, dim=4)], max_len=4, num_layers=1,
                              num_heads=2, block="residual_linear", bias=False))
    d = cat_data()
    pi, f = moe.mixture(m, d, "item")
    logits = moe.moe_logits(pi, f)
    eta = m.natural_params(d)["item"]
    v = d.valid()
    return torch.allclose(logits[v].double(), eta[v].double(), atol=1e-4), \
        float((logits[v] - eta[v]).abs().max())


add(A, "datasets.tabular.simulate(n_c=0, ...)", lambda: dtab.simulate(0, 0.5, 0.1, 1, n=20),
    needles=("n_c",))
add(A, "datasets.tabular.simulate(corr=1.5)", lambda: dtab.simulate(1, 0.5, 1.5, 1, n=20),
    needles=("corr",))
add(A, "datasets.tabular.simulate(variant='text')", lambda: dtab.simulate(1, 0.5, 0.1, 1, n=20,
                                                                         variant="text"),
    needles=("variant",))
add(A, "datasets.tabular.simulate(noise=-1)", lambda: dtab.simulate(1, -1, 0.1, 1, n=20),
    needles=("noise",), fix="src/efa/datasets/tabular.py: simulate (validate noise)")
add(A, "datasets.tabular.simulate(n=0)", lambda: dtab.simulate(1, 0.5, 0.1, 1, n=0),
    needles=("n",), fix="src/efa/datasets/tabular.py: simulate (validate n)")
add(A, "datasets.tabular.simulate(n_cat=1)", lambda: dtab.simulate(1, 0.5, 0.1, 1, n=20, n_cat=1),
    needles=("n_cat",), fix="src/efa/datasets/tabular.py: simulate (validate n_cat)")


@probe(A, "datasets.tabular.simulate: same seed same table, bins in 0..n_cat-1", kind="works")
def _():
    a, b = dtab.simulate(1, 0.5, 0.1, 7, n=50), dtab.simulate(1, 0.5, 0.1, 7, n=50)
    ok = a[0].equals(b[0]) and int(a[0].to_numpy().max()) <= 9 and int(a[0].to_numpy().min()) >= 0
    return ok, a[0].head(2).to_dict("records")


add(A, "datasets.tabular.equicorrelated(rng, rho=-0.1, ...)",
    lambda: dtab.equicorrelated(np.random.default_rng(0), -0.1, 3, 2), needles=("correlation",))
add(A, "efa.datasets.root.data_root('/tmp/probes/work/none')",
    lambda: __import__("efa.datasets.root", fromlist=["x"]).data_root(WORK / "none"),
    needles=("none",))
add(A, "efa.nonexistent attribute", lambda: efa.nonexistent, needles=("nonexistent",))


@probe(A, "dir(efa) lists the lazy exports and they all import", kind="works")
def _():
    names = dir(efa)
    missing = [n for n in names if getattr(efa, n, None) is None]
    return "fit" in names and not missing, missing


# =========================================================================== extra probes
A = "sequences"
fx = "src/efa/core/data.py"
add(A, "Sequences.from_frame(df with a pandas 'string' dtype column)",
    lambda: Sequences.from_frame(ff().assign(s=pd.array(list("abcde"), dtype="string")), "u",
                                 {"s": "s"}), needles=("'s'", "category"))
A = "tabular"
fx = "src/efa/tabular.py"


@probe(A, "ordinal response, y = pd.Series(Categorical) keeps the categories' order",
       kind="works")
def _():
    X, _y = tab()
    y = pd.Series(pd.Categorical(np.array(["lo", "mid", "hi"])[np.arange(30) % 3],
                                 categories=["lo", "mid", "hi"], ordered=True))
    c = tfit(X, y, response="ordinal")
    return list(c.classes_) == ["lo", "mid", "hi"], list(c.classes_)


@probe(A, "additive='ordinal', y = pd.Categorical keeps the categories' order", kind="works",
       should="classes in the Categorical's order (README: 'classes in a pandas Categorical "
       "y's order'); a bare pd.Categorical has .categories but no .cat",
       fix=f"{fx}: fit (order = getattr(y, 'categories', None) for a pd.Categorical)")
def _():
    X, _y = tab()
    y = pd.Categorical(np.array(["lo", "mid", "hi"])[np.arange(30) % 3],
                       categories=["lo", "mid", "hi"], ordered=True)
    c = tfit(X, y, additive="ordinal")
    return list(c.classes_) == ["lo", "mid", "hi"], list(c.classes_)


add(A, "AttentionTableClassifier(categorical=[]).fit(X with a string column)",
    lambda: tfit(categorical=[]), needles=("colour",))
add(A, "predict_column_proba(X, 'colour', y of 29 labels)",
    lambda: fitted().predict_column_proba(tab()[0], "colour", y=tab()[1][:29]),
    needles=("29",))
add(A, "impute(X, y) with missing='error' and a NaN cell",
    lambda: fitted().impute(tab()[0].assign(weight=[np.nan] + [70.0] * 29)),
    needles=("weight", "missing"))
A = "spatial"
fx = "src/efa/spatial.py"


@probe(A, "spatial.frame_to_sequences(df with one NaT time) sequence count", kind="err",
       needles=("date",), should="an error naming the time column (a NaT row becomes a 9th "
       "'day' holding one site)", fix=f"{fx}: frame_to_sequences (refuse missing times)")
def _():
    df = sp_frame().assign(date=lambda d: d.date.where(d.index != 0))
    s, sites, times = f2(df, **KW, return_index=True)
    return len(s) == 8, f"{len(s)} sequences for 8 days; times[0] = {times[0]!r}, observed " \
        f"sites per sequence {s.observed['value'].sum(1).tolist()}"


A = "kernels"
for att in ("softmax", {"kernel": "generalized", "relative": "auto"}, {"kernel": "ot"}):
    for attend_self in (True, False):
        def _ts(att=att, attend_self=attend_self):
            torch.manual_seed(0)
            kw = dict(num_layers=2, num_heads=2, direction="unidirectional",
                      attend_self=attend_self)
            a = efa.EFA(kcfg(att, mode="two_stream", **kw))
            b = efa.EFA(kcfg(att, mode="copies", **kw))
            b.load_state_dict(a.state_dict())
            x, y = efa.log_likelihoods(a, mr_like()), efa.log_likelihoods(b, mr_like())
            return torch.allclose(x["item"], y["item"], atol=1e-5, equal_nan=True), \
                float((x["item"] - y["item"]).nan_to_num().abs().max())
        add(A, f"two_stream == copies, unidirectional 2 layers, {att!r}, attend_self="
               f"{attend_self}", _ts, kind="works")


def mr_like():
    return cat_data(n=6, seed=4)


# =========================================================================== main
def main():
    only = sys.argv[1:]
    results = []
    t0 = time.perf_counter()
    for p in PROBES:
        if only and not any(p["id"].startswith(o) for o in only):
            continue
        r = run_probe(p)
        results.append(r)
        mark = {OK_ERR: ".", OK_WORKS: ".", UNHELPFUL: "U", SILENT: "S", SECURITY: "!"}[r["outcome"]]
        print(f"{mark} {r['id']:16s} {r['seconds']:6.2f}s {r['call'][:80]}", flush=True)
    (OUT / "results.json").write_text(json.dumps(
        {"probes": results, "total_seconds": round(time.perf_counter() - t0, 1),
         "torch_threads": torch.get_num_threads(), "efa": efa.__version__}, indent=1,
        default=str))
    from collections import Counter
    c = Counter(r["outcome"] for r in results)
    print(len(results), "probes", dict(c), f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
