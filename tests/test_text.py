"""Token lists and fixed windows of word ids (efa.datasets.text), and the Lee corpus shipped
with gensim."""

from __future__ import annotations

import numpy as np
import pytest

from efa.datasets.text import lee_background, vocabulary, windows

DOCS = [["b", "a", "c", "a", "d"], ["c", "a", "e", "b", "b", "a", "c"]]


def test_vocabulary_counts_and_order():
    # a:4, b:3, c:3, others 1. Ties (b, c) go to the later first appearance first (gensim).
    assert vocabulary(DOCS, 2) == ["a", "c", "b"]
    assert vocabulary(DOCS, 4) == ["a"]
    with pytest.raises(ValueError, match="min_count"):
        vocabulary(DOCS, 0)


def test_windows_drop_unknown_words_and_partial_tails():
    vocab = ["a", "c", "b"]
    x, counts = windows(DOCS, vocab, 2)
    # doc 1 -> b a c a (d dropped) -> [b a][c a]; doc 2 -> c a b b a c -> [c a][b b][a c]
    np.testing.assert_array_equal(x, [[2, 0], [1, 0], [1, 0], [2, 2], [0, 1]])
    assert counts == {"tokens": 12, "in_vocabulary": 10, "in_windows": 10}
    x3, counts3 = windows(DOCS, vocab, 3)
    assert x3.shape == (3, 3) and counts3["in_windows"] == 9  # one tail word dropped
    with pytest.raises(ValueError, match="length must be an integer >= 2"):
        windows(DOCS, vocab, 1)
    with pytest.raises(ValueError, match="no document has 9"):
        windows(DOCS, vocab, 9)


def test_lee_corpus_from_the_gensim_wheel():
    docs = lee_background()
    assert len(docs) == 300 and sum(map(len, docs)) > 50_000
    assert docs[0][:4] == ["hundreds", "of", "people", "have"]
    assert all(w.isalpha() and w == w.lower() for w in docs[0])
