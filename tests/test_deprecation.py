"""Old names kept for one release after a rename: the same answer, with a FutureWarning."""

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
