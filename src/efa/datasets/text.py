"""Text corpora as token lists, and fixed windows of word ids for the masked-word models.

The Lee news corpus (``lee_background.cor``, 300 documents, ≈ 60k tokens) ships in the gensim
wheel (the ``experiments`` extra) next to the analogy questions, so nothing is downloaded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from efa.training.scoring import check_int


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
    # Lines end at "\n" only, as in gensim's LineSentence: str.splitlines would also split at
    # U+0085 (latin-1's byte 0x85, cp1252's "…"), form feeds and other separators.
    docs = [tokenize(line) for line in path.read_text(encoding="latin-1").split("\n")]
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
        When ``min_count`` is not an integer >= 1, a document is a string (not tokens) or no
        word occurs ``min_count`` times.
    """
    check_int("min_count", min_count, 1)
    counts = Counter(w for d in _documents(docs) for w in d)
    first = {w: k for k, w in enumerate(counts)}  # insertion order = first appearance
    words = [w for w, c in counts.items() if c >= min_count]
    if not words:
        raise ValueError(f"no word occurs min_count={min_count} times (the most frequent "
                         f"occurs {max(counts.values(), default=0)} times)")
    return sorted(words, key=lambda w: (-counts[w], -first[w]))


def _documents(docs: Iterable[Sequence[str]]) -> Iterable[Sequence[str]]:
    """The documents, each checked to be a sequence of tokens: a string would be read as its
    characters."""
    for k, d in enumerate(docs):
        if isinstance(d, str):
            raise ValueError(f"document {k} is a string, not a list of tokens: split it first "
                             "(efa.datasets.text.tokenize)")
        yield d


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
        When ``length`` is not an integer >= 2, the vocabulary repeats a word, a document is a
        string (not tokens) or no document has ``length`` in-vocabulary words.
    """
    check_int("length", length, 2)
    index = {w: k for k, w in enumerate(vocab)}
    if len(index) != len(vocab):
        twice = sorted({w for w in vocab if list(vocab).count(w) > 1})
        raise ValueError(f"the vocabulary holds {twice[:5]} more than once: a word needs one id")
    rows, total, known = [], 0, 0
    for d in _documents(docs):
        ids = [index[w] for w in d if w in index]
        total, known = total + len(d), known + len(ids)
        for start in range(0, len(ids) - length + 1, length):
            rows.append(ids[start : start + length])
    if not rows:
        raise ValueError(f"no document has {length} in-vocabulary words")
    out = np.array(rows, dtype=np.int64)
    return out, {"tokens": total, "in_vocabulary": known, "in_windows": int(out.size)}
