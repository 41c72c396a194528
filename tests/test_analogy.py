"""The analogy evaluator on hand-made embeddings with known answers, its input checks, and its
agreement with gensim's own evaluator on gensim Word2Vec vectors."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from efa import analogy

# Hand-made 3-d embeddings. gender axis (1st), royalty (2nd), plural (3rd).
VOCAB = ["man", "woman", "king", "queen", "King", "cat", "cats", "dog", "dogs", "##s", "[unused1]",
         "boy", "girl", "big"]
VECTORS = np.array([
    [1.0, 0.0, 0.0],    # man
    [-1.0, 0.0, 0.0],   # woman
    [1.0, 1.0, 0.0],    # king
    [-1.0, 1.0, 0.0],   # queen
    [0.0, 0.0, 5.0],    # King: a case variant, ignored with lowercase=True (first one wins)
    [0.0, 0.0, -1.0],   # cat
    [0.0, 0.5, 1.0],    # cats
    [0.2, 0.0, -1.0],   # dog
    [0.2, 0.0, 1.0],    # dogs
    [0.2, 0.45, 1.1],   # ##s: a non-word that beats "cats" for dog:dogs::cat:?
    [0.0, -5.0, 0.0],   # [unused1]
    [5.0, 0.0, 0.0],    # boy: a long vector
    [-0.1, 0.0, 0.0],   # girl: short vector
    [0.0, 0.0, 0.0],    # big: a zero vector (cosine 0 with everything)
])

FILE = """\
: family
man woman king queen
man king woman queen
boy girl king queen

: gram8-plural
dog dogs cat cats
"""


def _questions(tmp_path, text=FILE):
    path = tmp_path / "questions.txt"
    path.write_text(text)
    return analogy.load_questions(path)


def test_loader_categories_groups_and_lowercasing(tmp_path):
    q = _questions(tmp_path, FILE.replace("man woman king queen", "Man Woman KING Queen"))
    assert list(q.category) == ["family"] * 3 + ["gram8-plural"]
    assert list(q.group) == ["semantic"] * 3 + ["syntactic"]
    assert tuple(q.loc[0, ["a", "b", "c", "d"]]) == ("man", "woman", "king", "queen")
    assert list(q.line) == [2, 3, 4, 7]


def test_known_answers_raw_vectors(tmp_path):
    q = _questions(tmp_path)
    out = analogy.answer(VECTORS, VOCAB, q, candidates="all")
    # man:woman::king:? -> king + woman − man = (−1, 1, 0) = queen exactly.
    assert out.predicted[0] == "queen" and out.correct[0] and out.cosine[0] == pytest.approx(1)
    # man:king::woman:? -> same offset.
    assert out.correct[1]
    # boy:girl::king:? -> (−4.1, 1, 0): dominated by the long "boy", closest to woman.
    f = VECTORS[2] + VECTORS[12] - VECTORS[11]
    cos = {w: f @ v / np.linalg.norm(f) / np.linalg.norm(v)
           for w, v in zip(VOCAB, VECTORS, strict=True)
           if w not in ("boy", "girl", "king", "King", "big")}
    best = max(cos, key=cos.get)
    assert out.predicted[2] == best == "woman" and not out.correct[2]
    assert out["rank"][2] == 1 + sum(v > cos["queen"] for v in cos.values())
    assert out.cosine[2] == pytest.approx(cos["queen"])
    # dog:dogs::cat:? -> (0, 0, 1): cats has cosine 0.894, the non-word ##s 0.913.
    assert out.predicted[3] == "##s" and out["rank"][3] == 2


def test_candidate_filter_words_only_and_explicit(tmp_path):
    q = _questions(tmp_path)
    out = analogy.answer(VECTORS, VOCAB, q, candidates="words")
    assert out.predicted[3] == "cats" and out.correct[3]
    same = analogy.answer(VECTORS, VOCAB, q, candidates=lambda w: w.isalpha())
    assert list(same.predicted) == list(out.predicted)
    # An explicit candidate list without the answer: rank is NaN and the question is wrong
    # (woman is b, excluded; cats (0, .5, 1) beats dog for the offset (−1, 1, 0)).
    few = analogy.answer(VECTORS, VOCAB, q, candidates={"woman", "cats", "dog"})
    assert np.isnan(few["rank"][0]) and not few.correct[0] and few.predicted[0] == "cats"


def test_normalize_changes_the_offset(tmp_path):
    # boy is long and girl short: raw offsets are dominated by boy, unit offsets are not.
    q = _questions(tmp_path)
    raw = analogy.answer(VECTORS, VOCAB, q)
    unit = analogy.answer(VECTORS, VOCAB, q, normalize=True)
    u = VECTORS / np.maximum(np.linalg.norm(VECTORS, axis=1, keepdims=True), 1e-300)
    f = u[2] + u[12] - u[11]  # unit king + girl − boy = (1/√2 − 2, 1/√2, 0): closest to queen
    assert unit.cosine[2] == pytest.approx(f @ u[3] / np.linalg.norm(f))
    assert unit.predicted[2] == "queen" and raw.predicted[2] == "woman"


def test_cosines_with_any_target(tmp_path):
    q = _questions(tmp_path)
    for normalize in (False, True):
        out = analogy.answer(VECTORS, VOCAB, q, normalize=normalize)
        np.testing.assert_allclose(
            analogy.cosines(VECTORS, VOCAB, q, list(q.d), normalize=normalize), out.cosine)
    # man:woman::king:? has offset (−1, 1, 0); its cosine with "man" (1, 0, 0) is −1/√2.
    c = analogy.cosines(VECTORS, VOCAB, q, ["man", "man", "man", "man"])
    assert c[0] == pytest.approx(-1 / np.sqrt(2))
    with pytest.raises(KeyError, match="not in the vocabulary"):
        analogy.cosines(VECTORS, VOCAB, q, ["man", "man", "man", "unicorn"])


def test_summary_and_paper_table(tmp_path):
    q = _questions(tmp_path)
    out = analogy.answer(VECTORS, VOCAB, q, candidates="words")
    s = analogy.summarise(out)
    g = analogy.groups(s)
    assert g["semantic"] == {"n": 3, "accuracy": pytest.approx(2 / 3),
                             "cosine": pytest.approx(out.cosine[:3].mean())}
    assert g["syntactic"]["accuracy"] == 1.0 and g["overall"]["accuracy"] == 0.75
    fam = s[(s.level == "category") & (s.name == "family")].iloc[0]
    assert fam.n == 3 and fam.accuracy == pytest.approx(2 / 3)
    md = analogy.paper_tables({"A": g, "B": g})
    assert "| Accuracy | A | B | questions |" in md
    assert "| Semantic | 0.667 | 0.667 | 3 |" in md and "| Overall | 0.750 | 0.750 | 4 |" in md
    assert "| Cosine similarity | A | B | questions |" in md


def test_restrict_and_coverage(tmp_path):
    q = _questions(tmp_path)
    kept = analogy.restrict(q, VOCAB, [w for w in VOCAB if w != "boy"])
    assert len(kept) == 3 and "boy" not in set(kept.a)
    assert analogy.coverage(q, kept) == {"semantic": {"kept": 2, "total": 3},
                                         "syntactic": {"kept": 1, "total": 1},
                                         "overall": {"kept": 3, "total": 4}}
    with pytest.raises(KeyError, match="not in the vocabulary.*restrict"):
        analogy.answer(VECTORS[:-3], VOCAB[:-3], q)


def test_case_variants_fold_to_the_first(tmp_path):
    # "King" (row 4) points along dog:dogs::cat:?'s offset; with lowercase=True the first
    # variant ("king", row 2) stands for both and "King" is no candidate.
    q = _questions(tmp_path)
    out = analogy.answer(VECTORS, VOCAB, q)
    assert "King" not in set(out.predicted) and out.correct[0]
    exact = analogy.answer(VECTORS, VOCAB, q, lowercase=False)
    assert exact.predicted[3] == "King"


@pytest.mark.parametrize("text, message", [
    ("man woman king queen\n", "before any ': category' header"),
    (": family\nman woman king\n", "expected four words"),
    (": family\nman woman king queen prince\n", "expected four words"),
    (":\nman woman king queen\n", "category header"),
    ("\n\n", "holds no analogy questions"),
])
def test_malformed_question_files(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as err:
        analogy.load_questions(path)
    assert str(path) in str(err.value)
    with pytest.raises(FileNotFoundError):
        analogy.load_questions(tmp_path / "nope.txt")


def test_bad_embeddings(tmp_path):
    q = _questions(tmp_path)
    bad = VECTORS.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"'queen' \(row 3\) is not finite"):
        analogy.answer(bad, VOCAB, q)
    with pytest.raises(ValueError, match="14 rows but the vocabulary has 13 words"):
        analogy.answer(VECTORS, VOCAB[:-1], q)
    with pytest.raises(ValueError, match="numeric matrix"):
        analogy.answer(VECTORS[0], VOCAB, q)
    with pytest.raises(ValueError, match="candidates must be"):
        analogy.answer(VECTORS, VOCAB, q, candidates="nonwords")


def test_agrees_with_gensim_on_word2vec(tmp_path):
    """Same questions (gensim's restrict_vocab = our vocabulary), same predictions."""
    from gensim.models import Word2Vec

    from efa.datasets.text import lee_background

    docs = lee_background()
    # workers=1 and a hash that is not salted per process: the same vectors every run.
    w2v = Word2Vec(docs, vector_size=32, window=5, min_count=3, sg=0, epochs=15, workers=1,
                   seed=1, hashfxn=lambda s: zlib.crc32(s.encode()))
    kv = w2v.wv
    top = 1500  # gensim's restrict_vocab: questions and candidates among the top 1500 words
    path = analogy.questions_path()
    score, sections = kv.evaluate_word_analogies(str(path), restrict_vocab=top)
    vocab, vectors = kv.index_to_key[:top], kv.vectors[:top]
    q = analogy.restrict(analogy.load_questions(path), vocab)
    ours = analogy.answer(vectors, vocab, q, normalize=True)
    total = sections[-1]
    assert len(ours) == len(total["correct"]) + len(total["incorrect"]) > 100
    for ok in (True, False):
        theirs = {tuple(w.lower() for w in t) for t in total["correct" if ok else "incorrect"]}
        mine = {tuple(r) for r in ours.loc[ours.correct == ok, ["a", "b", "c", "d"]].to_numpy()}
        assert mine == theirs and len(mine) > 0
    assert ours.correct.mean() == pytest.approx(score)


def test_questions_from_gensim_wheel():
    q = analogy.load_questions()
    assert len(q) == 19_544 and q.category.nunique() == 14
    assert (q.group == "semantic").sum() == 8_869 and (q.group == "syntactic").sum() == 10_675
    assert tuple(q.iloc[0][["a", "b", "c", "d"]]) == ("athens", "greece", "baghdad", "iraq")
    assert isinstance(q, pd.DataFrame)


TIE_VOCAB = ["man", "woman", "king", "queen", "boy", "girl"]


QUESTIONS = pd.DataFrame({"category": ["c"] * 2, "group": ["semantic"] * 2,
                          "a": ["man", "boy"], "b": ["woman", "girl"], "c": ["king", "king"],
                          "d": ["queen", "queen"], "line": [1, 2]})


@pytest.mark.parametrize("vectors", [np.zeros((6, 3)), np.ones((6, 3))],
                         ids=["collapsed", "identical"])
def test_analogy_ties_are_not_hits(vectors):
    out = analogy.answer(vectors, TIE_VOCAB, QUESTIONS)
    assert not out["correct"].any() and (out["rank"] > 1).all()
    assert analogy.accuracy(vectors, TIE_VOCAB, QUESTIONS)["overall"]["accuracy"] == 0.0
    # a real answer is still a hit, and `predicted` agrees with `correct`
    x = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [1, 0, 0.1], [1, 1, 0.1]])
    good = analogy.answer(x, TIE_VOCAB, QUESTIONS.iloc[:1])
    assert good["correct"].all() and (good["predicted"] == good["d"]).all()


def test_analogy_bad_input_is_named(tmp_path):
    with pytest.raises(ValueError, match="vocabulary entry 1 must be a non-empty string"):
        analogy.accuracy(np.eye(6), ["man", 3, "king", "queen", "boy", "girl"], QUESTIONS)
    with pytest.raises(ValueError, match="chunk must be a positive number"):
        analogy.answer(np.eye(6), TIE_VOCAB, QUESTIONS, chunk=0)
    path = tmp_path / "q.txt"
    path.write_bytes(": capital\nman woman king k\xf6nigin\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"line 2: not UTF-8 \(byte 0xf6\)"):
        analogy.load_questions(path)
