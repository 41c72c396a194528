"""Old names kept for one release after a rename or a move: the same answer, with a
FutureWarning."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from efa import analogy, regression, spatial


def test_renamed_functions_warn_and_answer_as_the_new_ones():
    df = pd.DataFrame({"site": [0, 1] * 3, "time": np.repeat(range(3), 2),
                       "lat": [1.0, 2.0] * 3, "lon": [3.0, 4.0] * 3,
                       "t": [50.0, 49.0, 51.0, 52.0, 49.0, 50.0]})
    kw = dict(site="site", time="time", lat="lat", lon="lon", value="t")
    with pytest.warns(FutureWarning, match="efa.spatial.frame_to_sequences is renamed "
                                           "efa.spatial.sites_to_sequences"):
        old = spatial.frame_to_sequences(df, **kw)
    new = spatial.sites_to_sequences(df, **kw)
    assert all(old.fields[k].equal(new.fields[k]) for k in new.fields)

    fn = pd.DataFrame({"function": [0, 0, 0, 1, 1], "x": [0.1, 0.2, 0.3, 0.1, 0.5],
                       "y": [1.0, 2.0, 3.0, 0.5, 0.0]})
    with pytest.warns(FutureWarning, match="functions_to_sequences"):
        old, _ = regression.frame_to_sequences(fn, "function", "x", "y")
    new, _ = regression.functions_to_sequences(fn, "function", "x", "y")
    assert old.fields["y"].equal(new.fields["y"])
    with pytest.warns(FutureWarning, match="note_efa"):
        assert type(regression.note_model(new)) is type(regression.note_efa(new))

    vocab = ["man", "woman", "king", "queen"]
    vectors = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.warns(FutureWarning, match="efa.analogy.accuracy"):
        old = analogy.evaluate(vectors, vocab)
    assert old == analogy.accuracy(vectors, vocab)
    assert analogy.evaluate.__doc__.startswith("Deprecated alias of")


def test_moved_modules_import_from_their_old_paths_with_a_warning():
    """efa 0.3 put the model in efa/core/ and training in efa/training/: the old flat paths give
    the same module objects (one registry, one class), each warning with the new path."""
    code = """
import warnings
warnings.simplefilter("error")
import efa, efa.core.kernels.cme as new_cme, efa.training.train as new_train
from efa.core.families import Poisson
for old, new in [("efa.families", "efa.core.families"), ("efa.kernels.cme", new_cme),
                 ("efa.train", new_train)]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert [str(w.message).split(";")[0] for w in seen][-1] == (
        f"the module {old} moved to {getattr(new, '__name__', new)}"), seen
    assert module is importlib.import_module(getattr(new, "__name__", new))
    assert module.__spec__.name == module.__name__  # the real module's own spec, kept
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from efa.fields import Category  # the form README used
assert Category is efa.Category and efa.families.Poisson is Poisson
assert "cme" in efa.KERNELS  # registered once, not again under the old path
try:
    import efa.nothing  # noqa
except ModuleNotFoundError:
    pass
else:
    raise AssertionError
"""
    run = subprocess.run([sys.executable, "-c", "import importlib\n" + code],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("module", sorted(__import__("efa.deprecation").deprecation.MOVED_NAMES))
def test_names_moved_out_of_a_module_still_import_from_it_with_a_warning(module):
    """Names that left a module that still exists answer from it for one release: the same
    object, a FutureWarning naming the new path; any other missing name is still an
    AttributeError (so hasattr and `from m import x` keep their meaning)."""
    import importlib

    from efa.deprecation import MOVED_NAMES

    old = importlib.import_module(module)
    for name, new in MOVED_NAMES[module].items():
        with pytest.warns(FutureWarning, match=f"{module}.{name} moved to {new}.{name}"):
            got = getattr(old, name)
        assert got is getattr(importlib.import_module(new), name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        old.no_such_name  # noqa: B018
    assert not hasattr(old, "no_such_name")
