"""Word analogies, "a is to b as c is to ?", answered on any embedding matrix by 3CosAdd.

The protocol of the mixture-of-experts paper (Wibisono & Wang, Sec 4.1 and App. F) and of its
reference notebooks, made explicit as options:

- :func:`~efa.questions.load_questions` reads the Google analogy set (``questions-words.txt``:
  ``: category`` header lines, then one ``a b c d`` question a line), lower-cased; categories
  whose name starts with ``gram`` are *syntactic*, the others *semantic*.
- :func:`~efa.questions.restrict` keeps the questions whose four words are in the vocabulary of
  every model (the paper's intersection filter: each model is scored on the same questions).
- :func:`answer` ranks the candidate words d ∉ {a, b, c} by cos(x_d, x_b + x_c − x_a) and
  records, per question, the prediction, the rank of the correct d and cos(x_b + x_c − x_a,
  x_d). ``candidates`` is the candidate filter: ``"all"`` (every row, as the reference code
  ranks BERT's whole vocabulary), ``"words"`` (alphabetic words only, the paper's "we exclude
  non-words"), a predicate on the word, or an explicit collection of words. ``normalize=True``
  unit-normalises the vectors before the offset (gensim's ``most_similar``; the paper's
  notebooks use the raw vectors).
- :func:`summarise` gives accuracy and mean cosine per category, per group (semantic /
  syntactic) and overall; :func:`paper_tables` lays several models out as the paper's Table 3.

A vocabulary is a list of words, one per row of the matrix. With ``lowercase=True`` two rows
that differ only in case map to the first one (gensim's and the reference code's rule).

The questions' file and vocabulary functions live in :mod:`efa.questions` and are importable
from here too (``efa.analogy.load_questions``, ``restrict``, ``coverage``, ``questions_path``,
``vocabulary_index``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from efa.deprecation import renamed
from efa.questions import GROUPS as GROUPS
from efa.questions import coverage as coverage
from efa.questions import folded
from efa.questions import load_questions as load_questions
from efa.questions import questions_path as questions_path
from efa.questions import restrict as restrict
from efa.questions import vocabulary_index as vocabulary_index
from efa.training.scoring import check_bool

if TYPE_CHECKING:  # for annotations only
    from torch import Tensor

WORD = re.compile(r"[^\W\d_]+")  # letters only: no digits, '_', '#', brackets or punctuation


def _in_range(x: np.ndarray) -> np.ndarray:
    """``x`` divided by its largest absolute entry when that is so large or small that squared norms
    would overflow or underflow: cosines and 3CosAdd's argmax do not change with a common
    scale. Matrices of ordinary scale are returned as they are (the same bits as before)."""
    m = float(np.abs(x).max()) if x.size else 0.0
    return x / m if m > 0 and not 1e-100 < m < 1e100 else x


def check_embeddings(vectors: npt.ArrayLike | Tensor, vocab: Sequence[str],
                     name: str = "embeddings") -> np.ndarray:
    """The embedding matrix as float64, after checking it matches ``vocab`` and is finite.

    Parameters
    ----------
    vectors : array_like or torch.Tensor, shape (V, p)
        Numeric; row k is the embedding of ``vocab[k]``.
    vocab : sequence of str
        The V words.
    name : str, default "embeddings"
        What to call the matrix in error messages.

    Returns
    -------
    numpy.ndarray, shape (V, p)
        The matrix as float64.

    Raises
    ------
    ValueError
        If ``vectors`` is not a numeric matrix, its rows do not match ``vocab`` or a row is not
        finite.
    """
    if hasattr(vectors, "detach"):  # a torch tensor
        vectors = vectors.detach().cpu().numpy()
    x = np.asarray(vectors)
    if x.ndim != 2 or x.dtype.kind not in "fiu":
        raise ValueError(f"{name}: expected a numeric matrix [words, dim], got shape {x.shape} "
                         f"of dtype {x.dtype}")
    if x.shape[0] != len(vocab):
        raise ValueError(
            f"{name}: the matrix has {x.shape[0]} rows but the vocabulary has {len(vocab)} "
            "words; row k must be the embedding of vocabulary word k"
        )
    rows = np.flatnonzero(~np.isfinite(x).all(1))
    if len(rows):
        raise ValueError(f"{name}: the embedding of {vocab[rows[0]]!r} (row {rows[0]}) is not "
                         f"finite (NaN or inf); {len(rows)} row(s) affected")
    return x.astype(np.float64)


def candidate_rows(vocab: Sequence[str], index: dict[str, int],
                   candidates: str | Callable[[str], bool] | Collection[str]) -> np.ndarray:
    """Rows that may be answers: one per word of ``index`` (case variants folded), filtered.

    Parameters
    ----------
    vocab : sequence of str
        The vocabulary, one word per row (the rows themselves are read from ``index``).
    index : dict of str to int
        Word → row, as :func:`~efa.questions.vocabulary_index` gives it.
    candidates : {"all", "words"}, callable or collection of str
        ``"all"``: every word; ``"words"``: alphabetic words only (letters, no digits, ``_``
        or punctuation); a predicate on the word; or the allowed words.

    Returns
    -------
    numpy.ndarray of int64
        The candidate rows, sorted.

    Raises
    ------
    ValueError
        If ``candidates`` is an unknown string or leaves no word.
    """
    words = list(index)
    if isinstance(candidates, str):
        if candidates == "all":
            keep = words
        elif candidates == "words":
            keep = [w for w in words if WORD.fullmatch(w)]
        else:
            raise ValueError(f"candidates must be 'all', 'words', a predicate or a collection "
                             f"of words, got {candidates!r}")
    elif callable(candidates):
        keep = [w for w in words if candidates(w)]
    else:
        allowed = set(candidates)
        keep = [w for w in words if w in allowed]
    if not keep:
        raise ValueError("the candidate filter leaves no word to answer with")
    return np.array(sorted(index[w] for w in keep), dtype=np.int64)


def answer(vectors: npt.ArrayLike | Tensor, vocab: Sequence[str], questions: pd.DataFrame,
           candidates: str | Callable[[str], bool] | Collection[str] = "all",
           normalize: bool = False, lowercase: bool = True, chunk: int = 512) -> pd.DataFrame:
    """3CosAdd on every question: the best d ∉ {a, b, c} by cos(x_d, x_b + x_c − x_a).

    Every question word must be in the vocabulary (:func:`~efa.questions.restrict` first).

    Parameters
    ----------
    vectors : array_like or torch.Tensor, shape (V, p)
        The embeddings, row k that of ``vocab[k]``.
    vocab : sequence of str
        The V words.
    questions : pandas.DataFrame
        Columns ``a, b, c, d`` (a is to b as c is to d), e.g. from
        :func:`~efa.questions.load_questions`.
    candidates : {"all", "words"}, callable or collection of str, default "all"
        Which words may be answers (:func:`candidate_rows`).
    normalize : bool, default False
        Unit-normalise the vectors before the offset (gensim's ``most_similar``); the paper's
        notebooks use the raw vectors.
    lowercase : bool, default True
        Fold case, in the vocabulary (its variants: :func:`~efa.questions.vocabulary_index`)
        and in the questions' words.
    chunk : int, default 512
        Questions scored at once (memory: ``chunk`` × candidates scores).

    Returns
    -------
    pandas.DataFrame
        The questions (index reset) with ``predicted`` (the best candidate other than a, b
        and c; None when the filter leaves no other), ``rank`` (of the correct d: 1 when it
        scores above every other candidate by more than 1e-12, ties count against it; NaN if
        d is not a candidate or is one of a, b, c), ``correct`` (``rank == 1``) and
        ``cosine`` (cos(x_b + x_c − x_a, x_d)).

    Raises
    ------
    ValueError
        If the embeddings or the questions are malformed, there is no question or ``chunk``
        is not a positive integer.
    KeyError
        If a question word is not in the vocabulary.
    """
    x = check_embeddings(vectors, vocab)
    index = vocabulary_index(vocab, lowercase)
    absent = [c for c in "abcd" if c not in questions]
    if absent:
        raise ValueError(f"the questions need columns a, b, c and d (a:b :: c:d); they lack "
                         f"{absent} (load_questions gives this frame)")
    check_bool("normalize", normalize)
    words_of = {col: folded(questions[col], lowercase) for col in "abcd"}
    missing = sorted({str(w) for col in "abcd" for w in words_of[col] if w not in index})
    if missing:
        raise KeyError(
            f"{len(missing)} question word(s) are not in the vocabulary, e.g. {missing[:5]}; "
            "filter the questions with efa.analogy.restrict(questions, vocab) first"
        )
    if len(questions) == 0:
        raise ValueError("no questions to answer")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of questions, got {chunk!r}")
    x = _in_range(x)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = x / np.where(norms > 0, norms, 1.0)  # a zero vector has cosine 0 with everything
    base = unit if normalize else x
    rows = candidate_rows(vocab, index, candidates)
    position = np.full(len(x), -1)
    position[rows] = np.arange(len(rows))
    cand = unit[rows]
    ids = {col: words_of[col].map(index).to_numpy().astype(np.int64) for col in "abcd"}
    predicted, rank, cosine = [], [], []
    for start in range(0, len(questions), chunk):
        sl = slice(start, start + chunk)
        a, b, c, d = (ids[col][sl] for col in "abcd")
        f = base[b] + base[c] - base[a]
        fn = np.linalg.norm(f, axis=1, keepdims=True)
        f = f / np.where(fn > 0, fn, 1.0)
        scores = f @ cand.T  # [q, candidates]
        q = np.arange(len(a))
        for col in (a, b, c):  # the question's own words are never answers
            p = position[col]
            scores[q[p >= 0], p[p >= 0]] = -np.inf
        best = scores.argmax(1)
        # None where the filter left no candidate but the question's own words
        predicted.append(np.where(np.isfinite(scores[q, best]), rows[best], -1))
        pd_ = np.where((d == a) | (d == b) | (d == c), -1, position[d])  # d excluded: no rank
        target = np.where(pd_ >= 0, scores[q, np.maximum(pd_, 0)], np.nan)
        # Pessimistic rank: every other candidate scoring at least d's counts against it, so a
        # tie is never a hit; "at least" within 1e-12, as x and 2x have unit vectors whose
        # cosines with f differ by a rounding step (either word could win).
        r = (scores >= target[:, None] - 1e-12).sum(1)
        rank.append(np.where(pd_ >= 0, r, np.nan))
        cosine.append((f * unit[d]).sum(1))
    out = questions.reset_index(drop=True).copy()
    words = np.asarray(vocab, dtype=object)
    out["predicted"] = [None if k < 0 else words[k].lower() if lowercase else words[k]
                        for k in np.concatenate(predicted)]
    out["rank"] = np.concatenate(rank)
    out["correct"] = out["rank"].to_numpy() == 1
    out["cosine"] = np.concatenate(cosine)
    return out


def cosines(vectors: npt.ArrayLike | Tensor, vocab: Sequence[str], questions: pd.DataFrame,
            targets: Sequence[str], normalize: bool = False, lowercase: bool = True) -> np.ndarray:
    """cos(x_b + x_c − x_a, x_t) for one target word t per question.

    With t = d it is the ``cosine`` of :func:`answer`; with a random word it is the chance
    level of that mean cosine for these embeddings (trained embeddings share a common
    direction, which makes every cosine positive).

    Parameters
    ----------
    vectors : array_like or torch.Tensor, shape (V, p)
        The embeddings, row k that of ``vocab[k]``.
    vocab : sequence of str
        The V words.
    questions : pandas.DataFrame
        Columns ``a, b, c``.
    targets : sequence of str
        One target word per question.
    normalize, lowercase : bool
        As in :func:`answer` (defaults False and True).

    Returns
    -------
    numpy.ndarray, shape (len(questions),)
        The cosines.

    Raises
    ------
    ValueError
        If there is not one target per question or the embeddings are malformed.
    KeyError
        If a word is not in the vocabulary.
    """
    x = check_embeddings(vectors, vocab)
    index = vocabulary_index(vocab, lowercase)
    if len(targets) != len(questions):
        raise ValueError(f"one target per question: {len(targets)} targets, "
                         f"{len(questions)} questions")
    check_bool("normalize", normalize)
    keyed = {col: list(folded(questions[col], lowercase)) for col in "abc"}
    keyed["t"] = list(folded(list(targets), lowercase))
    missing = sorted({str(w) for col in keyed.values() for w in col if w not in index})
    if missing:
        raise KeyError(f"words not in the vocabulary: {missing[:5]}")
    rows = {col: np.array([index[w] for w in keyed[col]], dtype=np.int64) for col in "abc"}
    t = np.array([index[w] for w in keyed["t"]], dtype=np.int64)
    x = _in_range(x)
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    base = unit if normalize else x
    f = base[rows["b"]] + base[rows["c"]] - base[rows["a"]]
    f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-300)
    return (f * unit[t]).sum(1)


def summarise(answers: pd.DataFrame) -> pd.DataFrame:
    """Accuracy and mean cosine per category, per group and overall.

    Parameters
    ----------
    answers : pandas.DataFrame
        The output of :func:`answer` (columns ``category``, ``group``, ``correct``,
        ``cosine``).

    Returns
    -------
    pandas.DataFrame
        Columns ``level`` (``"category"``, ``"group"`` or ``"overall"``), ``name``, ``n``,
        ``accuracy`` and ``cosine``.

    Raises
    ------
    KeyError
        If ``answers`` lacks one of those columns.
    ValueError
        If ``answers`` is empty.
    """
    absent = [c for c in ("category", "group", "correct", "cosine") if c not in answers]
    if absent:
        raise KeyError(f"answers lack the columns {absent}: summarise the output of answer() "
                       "on questions with category and group (load_questions gives them)")
    if len(answers) == 0:
        raise ValueError("no answers to summarise: an empty set of questions has no accuracy")
    rows = []
    for level, key in (("category", "category"), ("group", "group")):
        for name, part in answers.groupby(key, sort=False):
            rows.append((level, name, len(part), part.correct.mean(), part.cosine.mean()))
    rows.append(("overall", "overall", len(answers), answers.correct.mean(),
                 answers.cosine.mean()))
    return pd.DataFrame(rows, columns=["level", "name", "n", "accuracy", "cosine"])


def accuracy(vectors: npt.ArrayLike | Tensor, vocab: Sequence[str],
             questions: pd.DataFrame | None = None, **options: Any) -> dict[str, dict[str, float]]:
    """Analogy accuracy and mean cosine of an embedding matrix, per group and overall.

    Scored on the questions every word of which is in ``vocab``.

    Parameters
    ----------
    vectors : array_like or torch.Tensor, shape (V, p)
        The embeddings, row k that of ``vocab[k]``.
    vocab : sequence of str
        The V words.
    questions : pandas.DataFrame, optional
        The questions (default: all of ``questions-words.txt``, read by
        :func:`~efa.questions.load_questions`).
    **options
        Passed to :func:`answer` (``candidates``, ``normalize``, ``lowercase``, ``chunk``).

    Returns
    -------
    dict of str to dict
        ``{"semantic" | "syntactic" | "overall": {"n", "accuracy", "cosine"}}`` (a group with
        no question is absent).

    Raises
    ------
    KeyError
        If ``questions`` lacks a column.
    ValueError
        If no question has all four words in the vocabulary.
    """
    questions = load_questions() if questions is None else questions
    absent = [c for c in ("a", "b", "c", "d", "category", "group") if c not in questions]
    if absent:  # summarise() reports per category and group
        raise KeyError(f"questions lack the columns {absent} (load_questions() gives a, b, c, "
                       "d, category and group)")
    kept = restrict(questions, vocab, lowercase=options.get("lowercase", True))
    if len(kept) == 0:
        raise ValueError("no question has all four words in the vocabulary")
    return groups(summarise(answer(vectors, vocab, kept, **options)))


def groups(summary: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The group and overall lines of a :func:`summarise` frame as a dict.

    Parameters
    ----------
    summary : pandas.DataFrame
        The output of :func:`summarise`.

    Returns
    -------
    dict of str to dict
        Per group name and ``"overall"``: ``{"n": int, "accuracy": float, "cosine": float}``.
    """
    out = {}
    for _, r in summary[summary.level != "category"].iterrows():
        out[r["name"]] = {"n": int(r.n), "accuracy": float(r.accuracy), "cosine": float(r.cosine)}
    return out


def paper_tables(results: dict[str, dict[str, dict[str, float]]], digits: int = 3) -> str:
    """Markdown in the layout of the paper's Table 3.

    An accuracy table and a cosine-similarity table, rows Semantic / Syntactic / Overall, one
    column per model, and the number of questions per row (one number when the models agree,
    else one per model, separated by ``/``). A missing group is shown as ``—``.

    Parameters
    ----------
    results : dict of str to dict
        Per model name, its :func:`accuracy`.
    digits : int, default 3
        Decimals of each cell.

    Returns
    -------
    str
        The two markdown tables, separated by a blank line.
    """
    models = list(results)
    out = []
    for metric, title in (("accuracy", "Accuracy"), ("cosine", "Cosine similarity")):
        out += [f"| {title} | " + " | ".join(models) + " | questions |",
                "|---" * (len(models) + 2) + "|"]
        for group in (*GROUPS, "overall"):
            cells = []
            for m in models:
                r = results[m].get(group)
                cells.append("—" if r is None or not r["n"] else f"{r[metric]:.{digits}f}")
            n = {results[m].get(group, {}).get("n", 0) for m in models}
            count = str(n.pop()) if len(n) == 1 else "/".join(
                str(results[m].get(group, {}).get("n", 0)) for m in models)
            out.append(f"| {group.capitalize()} | " + " | ".join(cells) + f" | {count} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# Renamed in efa 0.3: efa.evaluate scores a model's likelihood, this scores word vectors.
evaluate = renamed(accuracy, "efa.analogy.evaluate", "efa.analogy.accuracy")
