"""The analogy questions ("a is to b as c is to d"): the Google analogy set read from its file,
and the filter to the questions every model's vocabulary can answer.

The file format (``questions-words.txt``): ``: category`` header lines, then one ``a b c d``
question a line; categories whose name starts with ``gram`` are *syntactic*, the others
*semantic*. :mod:`efa.analogy` answers the questions on embedding matrices and re-exports these
functions under its own name (``efa.analogy.load_questions`` ...).

A vocabulary is a list of words, one per row of an embedding matrix. With ``lowercase=True``
two rows that differ only in case map to the first one (gensim's and the reference code's rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from efa.training.scoring import check_bool

GROUPS = ("semantic", "syntactic")


def questions_path() -> Path:
    """The path of ``questions-words.txt`` as shipped in the gensim wheel.

    gensim comes with the ``experiments`` extra.

    Returns
    -------
    pathlib.Path
        The Google analogy set inside the installed gensim package.

    Raises
    ------
    ImportError
        If gensim is not installed.
    """
    try:
        from gensim.test.utils import datapath
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the analogy questions ship with gensim: pip install 'efa[experiments]' (or gensim), "
            "or pass the path of a questions-words.txt file"
        ) from err
    return Path(datapath("questions-words.txt"))


def load_questions(path: str | Path | None = None, lowercase: bool = True) -> pd.DataFrame:
    """The questions of a ``questions-words.txt``-format file, one row each.

    Blank lines are skipped; anything else that is not a ``: name`` header or four
    whitespace-separated words is an error naming the file, the line and what was expected.

    Parameters
    ----------
    path : str or pathlib.Path, optional
        The file (UTF-8; a byte-order mark is ignored). Default: :func:`questions_path`.
    lowercase : bool, default True
        Lower-case the four words of every question.

    Returns
    -------
    pandas.DataFrame
        Columns ``category, group, a, b, c, d, line``: ``group`` is ``"syntactic"`` for a
        category whose name starts with ``gram``, else ``"semantic"``; ``line`` is the 1-based
        line number in the file.

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a file.
    ValueError
        If the file is not UTF-8, a line is malformed or it holds no question.
    """
    path = questions_path() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"analogy question file {path} does not exist")
    rows, category = [], None
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is not a word
    except UnicodeDecodeError as err:
        line_no = path.read_bytes()[:err.start].count(b"\n") + 1
        raise ValueError(f"{path}, line {line_no}: not UTF-8 (byte {err.object[err.start]:#04x}); "
                         "re-encode the file as UTF-8, e.g. iconv -f latin1 -t utf-8") from None
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(":"):
            category = line[1:].strip()
            if not category or len(category.split()) != 1:
                raise ValueError(
                    f"{path}, line {number}: a category header must be ': name' with one "
                    f"word as the name, got {line!r}"
                )
            continue
        if category is None:
            raise ValueError(
                f"{path}, line {number}: question {line!r} comes before any ': category' "
                "header line"
            )
        words = line.split()
        if len(words) != 4:
            raise ValueError(
                f"{path}, line {number}: expected four words 'a b c d' (a is to b as c is "
                f"to d), got {len(words)}: {line!r}"
            )
        if lowercase:
            words = [w.lower() for w in words]
        group = "syntactic" if category.startswith("gram") else "semantic"
        rows.append((category, group, *words, number))
    if not rows:
        raise ValueError(f"{path} holds no analogy questions")
    return pd.DataFrame(rows, columns=["category", "group", "a", "b", "c", "d", "line"])


def vocabulary_index(vocab: Sequence[str], lowercase: bool = True) -> dict[str, int]:
    """Word → row of the embedding matrix.

    Parameters
    ----------
    vocab : sequence of str
        One non-empty word per row.
    lowercase : bool, default True
        Key the words lower-cased; the first (lowest row) of several case variants wins.

    Returns
    -------
    dict of str to int
        The row of each word.

    Raises
    ------
    ValueError
        If an entry is not a non-empty string.
    """
    check_bool("lowercase", lowercase)
    index: dict[str, int] = {}
    for row, word in enumerate(vocab):
        if not isinstance(word, str) or not word:
            raise ValueError(f"vocabulary entry {row} must be a non-empty string, got {word!r}")
        index.setdefault(word.lower() if lowercase else word, row)
    return index


def restrict(questions: pd.DataFrame, *vocabularies: Iterable[str],
             lowercase: bool = True) -> pd.DataFrame:
    """The questions whose four words are in every vocabulary.

    The paper's filter: 9,522 of 19,544 questions for BERT ∩ GloVe ∩ word2vec ∩ BART.
    Duplicate questions are kept.

    Parameters
    ----------
    questions : pandas.DataFrame
        Questions with columns ``a, b, c, d`` (:func:`load_questions`).
    *vocabularies : iterable of str
        The vocabularies every word must be in.
    lowercase : bool, default True
        Compare the question words with the vocabularies, both lower-cased
        (:func:`vocabulary_index`).

    Returns
    -------
    pandas.DataFrame
        The kept rows, index reset.
    """
    check_bool("lowercase", lowercase)
    keep = np.ones(len(questions), dtype=bool)
    for vocab in vocabularies:
        words = set(vocabulary_index(list(vocab), lowercase))
        for col in "abcd":
            keep &= folded(questions[col], lowercase).isin(words).to_numpy()
    return questions[keep].reset_index(drop=True)


def folded(words: pd.Series | Sequence[str], lowercase: bool) -> pd.Series:
    """Question words as :func:`vocabulary_index` keys them: lower-cased when ``lowercase``.

    Parameters
    ----------
    words : pandas.Series or sequence of str
        Words (anything that is not a string is kept as it is, to be reported as missing).
    lowercase : bool
        Whether the vocabulary's index folds case.

    Returns
    -------
    pandas.Series
        The words, folded or as given.
    """
    words = pd.Series(words, dtype=object)
    return words.map(lambda w: w.lower() if isinstance(w, str) else w) if lowercase else words


def coverage(questions: pd.DataFrame, kept: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Questions kept / all, per group and overall.

    Parameters
    ----------
    questions : pandas.DataFrame
        All questions (:func:`load_questions`).
    kept : pandas.DataFrame
        Those kept, e.g. by :func:`restrict`.

    Returns
    -------
    dict of str to dict
        For ``"semantic"``, ``"syntactic"`` and ``"overall"``: ``{"kept": int, "total": int}``.
    """
    out = {}
    for group in (*GROUPS, "overall"):
        sel: Callable[..., pd.DataFrame] = (
            (lambda f: f) if group == "overall" else (lambda f, g=group: f[f.group == g]))
        out[group] = {"kept": int(len(sel(kept))), "total": int(len(sel(questions)))}
    return out
