"""Text corpora as token lists, and fixed windows of word ids for the masked-word models.

The Lee news corpus (``lee_background.cor``, 300 documents, ≈ 60k tokens) ships in the gensim
wheel (the ``experiments`` extra) next to the analogy questions, so nothing is downloaded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np


def gensim_data(name: str) -> Path:
    """Return the path of a file of gensim's test data (``gensim/test/test_data/NAME``).

    Parameters
    ----------
    name : str
        The file's name, e.g. ``"lee_background.cor"``.

    Returns
    -------
    pathlib.Path
        The file's path inside the installed gensim.

    Raises
    ------
    ImportError
        When gensim is not installed.
    FileNotFoundError
        When gensim's test data has no such file.
    """
    try:
        from gensim.test.utils import datapath
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"{name} ships with gensim: pip install 'efa[experiments]' (or gensim)"
        ) from err
    path = Path(datapath(name))
    if not path.is_file():
        raise FileNotFoundError(f"gensim's test data has no {name} ({path})")
    return path


def tokenize(text: str) -> list[str]:
    """Split text into tokens with gensim's ``simple_preprocess``.

    Parameters
    ----------
    text : str
        The text.

    Returns
    -------
    list of str
        Lower-cased alphabetic tokens of 2–15 letters, in text order.
    """
    from gensim.utils import simple_preprocess

    return simple_preprocess(text)


def lee_background(path: str | Path | None = None) -> list[list[str]]:
    """Read the documents of the Lee background corpus (one a line), tokenised.

    Parameters
    ----------
    path : str or pathlib.Path or None, default None
        A file with one document a line (latin-1); ``None`` reads ``lee_background.cor`` from
        gensim's test data.

    Returns
    -------
    list of list of str
        The tokens of each non-empty document (see :func:`tokenize`), in file order.

    Raises
    ------
    ValueError
        When no line holds a token.
    """
    path = gensim_data("lee_background.cor") if path is None else Path(path)
    docs = [tokenize(line) for line in path.read_text(encoding="latin-1").splitlines()]
    docs = [d for d in docs if d]
    if not docs:
        raise ValueError(f"{path} holds no text")
    return docs


def vocabulary(docs: Iterable[Sequence[str]], min_count: int) -> list[str]:
    """List the words occurring at least ``min_count`` times, most frequent first.

    Ties go to the word that appeared *later* first, which is the order of gensim's
    ``Word2Vec`` vocabulary (``KeyedVectors.sort_by_descending_frequency``), so row k is the
    same word in both.

    Parameters
    ----------
    docs : iterable of sequence of str
        Tokenised documents.
    min_count : int
        The smallest count kept, >= 1.

    Returns
    -------
    list of str
        The vocabulary; a word's position is its id.

    Raises
    ------
    ValueError
        When ``min_count < 1``.
    """
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    counts = Counter(w for d in docs for w in d)
    first = {w: k for k, w in enumerate(counts)}  # insertion order = first appearance
    words = [w for w, c in counts.items() if c >= min_count]
    return sorted(words, key=lambda w: (-counts[w], -first[w]))


def windows(docs: Iterable[Sequence[str]], vocab: Sequence[str], length: int
            ) -> tuple[np.ndarray, dict[str, int]]:
    """Cut documents into consecutive, non-overlapping windows of ``length`` word ids.

    Out-of-vocabulary tokens are dropped first (as word2vec does); a document's last window
    shorter than ``length`` is dropped so that every window has the same length.

    Parameters
    ----------
    docs : iterable of sequence of str
        Tokenised documents.
    vocab : sequence of str
        The vocabulary; word ``vocab[k]`` has id ``k``.
    length : int
        Words per window, >= 2.

    Returns
    -------
    ids : numpy.ndarray of int64, shape (N, length)
        The windows, document by document.
    counts : dict of str to int
        Token counts: ``tokens`` (all), ``in_vocabulary`` and ``in_windows``.

    Raises
    ------
    ValueError
        When ``length < 2`` or no document has ``length`` in-vocabulary words.
    """
    if length < 2:
        raise ValueError(f"a window needs at least 2 words, got length={length}")
    index = {w: k for k, w in enumerate(vocab)}
    rows, total, known = [], 0, 0
    for d in docs:
        ids = [index[w] for w in d if w in index]
        total, known = total + len(d), known + len(ids)
        for start in range(0, len(ids) - length + 1, length):
            rows.append(ids[start : start + length])
    if not rows:
        raise ValueError(f"no document has {length} in-vocabulary words")
    out = np.array(rows, dtype=np.int64)
    return out, {"tokens": total, "in_vocabulary": known, "in_windows": int(out.size)}
