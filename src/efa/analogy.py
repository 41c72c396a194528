"""Word analogies, "a is to b as c is to ?", answered on any embedding matrix by 3CosAdd.

The protocol of the mixture-of-experts paper (Wibisono & Wang, Sec 4.1 and App. F) and of its
reference notebooks, made explicit as options:

- :func:`load_questions` reads the Google analogy set (``questions-words.txt``: ``: category``
  header lines, then one ``a b c d`` question a line), lower-cased; categories whose name starts
  with ``gram`` are *syntactic*, the others *semantic*.
- :func:`restrict` keeps the questions whose four words are in the vocabulary of every model
  (the paper's intersection filter: each model is scored on the same questions).
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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from efa.deprecation import renamed

if TYPE_CHECKING:  # for annotations only
    from torch import Tensor

GROUPS = ("semantic", "syntactic")
WORD = re.compile(r"[^\W\d_]+")  # letters only: no digits, '_', '#', brackets or punctuation


def questions_path() -> Path:
    """``questions-words.txt`` as shipped in the gensim wheel (the ``experiments`` extra)."""
    try:
        from gensim.test.utils import datapath
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the analogy questions ship with gensim: pip install 'efa[experiments]' (or gensim), "
            "or pass the path of a questions-words.txt file"
        ) from err
    return Path(datapath("questions-words.txt"))


def load_questions(path: str | Path | None = None, lowercase: bool = True) -> pd.DataFrame:
    """The questions of a ``questions-words.txt``-format file as a frame with columns
    ``category, group, a, b, c, d, line`` (``line``: 1-based line number in the file).

    Blank lines are skipped; anything else that is not a ``: name`` header or four
    whitespace-separated words is an error naming the file, the line and what was expected.
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
    """word → row; with ``lowercase`` the first of several case variants wins."""
    index: dict[str, int] = {}
    for row, word in enumerate(vocab):
        if not isinstance(word, str) or not word:
            raise ValueError(f"vocabulary entry {row} must be a non-empty string, got {word!r}")
        index.setdefault(word.lower() if lowercase else word, row)
    return index


def _in_range(x: np.ndarray) -> np.ndarray:
    """``x`` divided by its largest absolute entry when that is so large or small that squared norms
    would overflow or underflow: cosines and 3CosAdd's argmax do not change with a common
    scale. Matrices of ordinary scale are returned as they are (the same bits as before)."""
    m = float(np.abs(x).max()) if x.size else 0.0
    return x / m if m > 0 and not 1e-100 < m < 1e100 else x


def check_embeddings(vectors: npt.ArrayLike | Tensor, vocab: Sequence[str],
                     name: str = "embeddings") -> np.ndarray:
    """The matrix as float64 [V, p], after checking it matches ``vocab`` and is finite."""
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


def restrict(questions: pd.DataFrame, *vocabularies: Iterable[str],
             lowercase: bool = True) -> pd.DataFrame:
    """The questions whose four words are in every vocabulary (the paper's filter: 9,522 of
    19,544 for BERT ∩ GloVe ∩ word2vec ∩ BART). Duplicate questions are kept."""
    keep = np.ones(len(questions), dtype=bool)
    for vocab in vocabularies:
        words = set(vocabulary_index(list(vocab), lowercase))
        for col in "abcd":
            keep &= questions[col].isin(words).to_numpy()
    return questions[keep].reset_index(drop=True)


def coverage(questions: pd.DataFrame, kept: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Questions kept / all, per group and overall."""
    out = {}
    for group in (*GROUPS, "overall"):
        sel: Callable[..., pd.DataFrame] = (
            (lambda f: f) if group == "overall" else (lambda f, g=group: f[f.group == g]))
        out[group] = {"kept": int(len(sel(kept))), "total": int(len(sel(questions)))}
    return out


def candidate_rows(vocab: Sequence[str], index: dict[str, int],
                   candidates: str | Callable[[str], bool] | Collection[str]) -> np.ndarray:
    """Rows that may be answers: one per word of ``index`` (case variants folded), filtered."""
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
    """3CosAdd on every question: the questions frame with ``predicted``, ``correct``, ``rank``
    (1 = the correct d scores strictly above every other candidate, ties count against it;
    NaN if d is not a candidate) and ``cosine``
    (cos(x_b + x_c − x_a, x_d)). Every question word must be in the vocabulary
    (:func:`restrict` first)."""
    x = check_embeddings(vectors, vocab)
    index = vocabulary_index(vocab, lowercase)
    absent = [c for c in "abcd" if c not in questions]
    if absent:
        raise ValueError(f"the questions need columns a, b, c and d (a:b :: c:d); they lack "
                         f"{absent} (load_questions gives this frame)")
    missing = sorted({w for col in "abcd" for w in questions[col] if w not in index})
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
    ids = {col: questions[col].map(index).to_numpy() for col in "abcd"}
    predicted, rank, cosine = [], [], []
    for start in range(0, len(questions), chunk):
        sl = slice(start, start + chunk)
        a, b, c, d = (ids[col][sl] for col in "abcd")
        f = base[b] + base[c] - base[a]
        fn = np.linalg.norm(f, axis=1, keepdims=True)
        f = f / np.where(fn > 0, fn, 1.0)
        scores = f @ cand.T  # [q, candidates]
        q = np.arange(len(a))
        for col in (a, b, c):  # d ∉ {a, b, c}
            p = position[col]
            scores[q[p >= 0], p[p >= 0]] = -np.inf
        best = scores.argmax(1)
        predicted.append(rows[best])
        pd_ = position[d]
        target = np.where(pd_ >= 0, scores[q, np.maximum(pd_, 0)], np.nan)
        # Pessimistic rank: every other candidate scoring at least d's counts against it, so a
        # tie (identical or collapsed vectors) is never a hit.
        r = (scores >= target[:, None]).sum(1)
        rank.append(np.where(pd_ >= 0, r, np.nan))
        cosine.append((f * unit[d]).sum(1))
    out = questions.reset_index(drop=True).copy()
    words = np.asarray(vocab, dtype=object)
    pred_words = words[np.concatenate(predicted)]
    out["predicted"] = [w.lower() if lowercase else w for w in pred_words]
    out["rank"] = np.concatenate(rank)
    out["correct"] = out["rank"].to_numpy() == 1
    out["cosine"] = np.concatenate(cosine)
    return out


def cosines(vectors: npt.ArrayLike | Tensor, vocab: Sequence[str], questions: pd.DataFrame,
            targets: Sequence[str], normalize: bool = False, lowercase: bool = True) -> np.ndarray:
    """cos(x_b + x_c − x_a, x_t) for one target word t per question: with t = d it is the
    ``cosine`` of :func:`answer`; with a random word it is the chance level of that mean cosine
    for these embeddings (trained embeddings share a common direction, which makes every
    cosine positive)."""
    x = check_embeddings(vectors, vocab)
    index = vocabulary_index(vocab, lowercase)
    if len(targets) != len(questions):
        raise ValueError(f"one target per question: {len(targets)} targets, "
                         f"{len(questions)} questions")
    words = [*questions.a, *questions.b, *questions.c, *targets]
    missing = sorted({w for w in words if w not in index})
    if missing:
        raise KeyError(f"words not in the vocabulary: {missing[:5]}")
    rows = {col: np.array([index[w] for w in questions[col]]) for col in "abc"}
    t = np.array([index[w] for w in targets])
    x = _in_range(x)
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    base = unit if normalize else x
    f = base[rows["b"]] + base[rows["c"]] - base[rows["a"]]
    f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-300)
    return (f * unit[t]).sum(1)


def summarise(answers: pd.DataFrame) -> pd.DataFrame:
    """Accuracy and mean cosine per category, per group and overall (columns ``level``,
    ``name``, ``n``, ``accuracy``, ``cosine``)."""
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
    """{semantic|syntactic|overall: {n, accuracy, cosine}} on the questions every word of which
    is in ``vocab`` (all of ``questions-words.txt`` by default); options go to :func:`answer`."""
    questions = load_questions() if questions is None else questions
    kept = restrict(questions, vocab, lowercase=options.get("lowercase", True))
    if len(kept) == 0:
        raise ValueError("no question has all four words in the vocabulary")
    return groups(summarise(answer(vectors, vocab, kept, **options)))


def groups(summary: pd.DataFrame) -> dict[str, dict[str, float]]:
    """The group and overall lines of a :func:`summarise` frame as a dict."""
    out = {}
    for _, r in summary[summary.level != "category"].iterrows():
        out[r["name"]] = {"n": int(r.n), "accuracy": float(r.accuracy), "cosine": float(r.cosine)}
    return out


def paper_tables(results: dict[str, dict[str, dict[str, float]]], digits: int = 3) -> str:
    """Markdown in the layout of the paper's Table 3: an accuracy table and a cosine-similarity
    table, rows Semantic / Syntactic / Overall, one column per model (``results[model]`` as
    returned by :func:`accuracy`), and the number of questions per row."""
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
