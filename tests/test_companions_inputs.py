"""The companion modules (analogy, MoE identity, text, geo, embeddings) on inputs they could
misread: ties, case folding, switches given as text, unobserved tokens, float rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import efa
from efa import EFA, Category, EFAConfig, Sequences, Value, analogy
from efa.core.families import Gaussian
from efa.datasets.text import lee_background, vocabulary, windows
from efa.embeddings import attention_embeddings, offset_residuals, prop13
from efa.geo import nearest_neighbours
from efa.moe import CBOWMoE, appendix_b, mixture, two_layer_terms


def test_case_folding_applies_to_the_questions_words_too():
    # lowercase=True folded the vocabulary only: "Athens" was missing from {"athens", ...}
    vocab = ["Athens", "Greece", "Paris", "France"]
    x = np.array([[1.0, 0], [1, 1], [-1, 0], [-1, 1]])
    q = pd.DataFrame({"category": ["capital"], "group": ["semantic"], "a": ["Athens"],
                      "b": ["Greece"], "c": ["Paris"], "d": ["France"]})
    assert len(analogy.restrict(q, vocab)) == 1
    assert analogy.accuracy(x, vocab, q)["overall"]["n"] == 1
    assert analogy.answer(x, vocab, q).predicted[0] == "france"
    np.testing.assert_allclose(analogy.cosines(x, vocab, q, ["FRANCE"]),
                               analogy.answer(x, vocab, q).cosine)


def test_a_word_in_the_same_direction_as_d_is_a_tie_not_a_hit():
    rng, vocab = np.random.default_rng(1), ["man", "woman", "king", "queen", "prince"]
    q = pd.DataFrame({"a": ["man"], "b": ["woman"], "c": ["king"], "d": ["queen"]})
    hits = 0
    for _ in range(100):
        y = rng.normal(size=(5, 16))
        y[4] = rng.uniform(0.1, 10) * y[3]  # unit vectors a rounding step apart
        hits += bool(analogy.answer(y, vocab, q).correct[0])
    assert hits == 0


def test_no_candidate_left_and_d_among_the_question_words():
    vocab = ["man", "woman", "king", "queen"]
    x = np.array([[1.0, 0], [-1, 0], [1, 1], [-1, 1]])
    q = pd.DataFrame({"a": ["man"], "b": ["woman"], "c": ["king"], "d": ["man"]})
    out = analogy.answer(x, vocab, q, candidates=["man"])
    assert out.predicted[0] is None and np.isnan(out["rank"][0]) and not out.correct[0]


def test_switches_given_as_text_are_refused():
    q = pd.DataFrame({"a": ["man"], "b": ["woman"], "c": ["king"], "d": ["queen"]})
    x = np.eye(4)
    with pytest.raises(ValueError, match="normalize must be True or False"):
        analogy.answer(x, ["man", "woman", "king", "queen"], q, normalize="False")
    with pytest.raises(ValueError, match="lowercase must be True or False"):
        analogy.restrict(q, ["man"], lowercase="no")


def test_the_tied_mixture_reads_an_unobserved_token_as_mask():
    torch.manual_seed(0)
    model = appendix_b(5, 4, 6, num_heads=2, head_dim=3).double().eval()
    seen = {"token": torch.tensor([[True, False, True, True]])}
    out = []
    for placeholder in (0, 4):
        data = Sequences({"token": torch.tensor([[1, placeholder, 2, 3]])}, torch.tensor([4]),
                         observed=seen)
        want = model.natural_params(data)["token"]
        got = CBOWMoE.tied(model).natural_params(data)["token"]
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        out.append(got)
    torch.testing.assert_close(out[0], out[1], rtol=0, atol=0)


def _model(field, **options):
    torch.manual_seed(0)
    return EFA(EFAConfig([field], num_layers=1, num_heads=2, max_len=6,
                         block="residual_linear", bias=False, out_proj=True, **options)).double()


def test_the_identities_refuse_models_they_do_not_hold_for():
    data = Sequences({"token": torch.randint(0, 7, (3, 6))}, torch.tensor([6, 4, 2]))
    with pytest.raises(ValueError, match="mix='none'"):
        CBOWMoE.tied(_model(Category("token", 7, dim=8), mix="linear"))
    for option in ("bag", "distinct"):
        model = _model(Category("token", 7, dim=8, **{option: True}))
        with pytest.raises(ValueError, match=f"without bag or distinct; got 'token' \\({option}"):
            mixture(model, data)
    bare = EFA(EFAConfig([Category("token", 7, dim=8, bag=True)], num_layers=1, num_heads=1,
                         block="bare", bias=False, max_len=None))
    with pytest.raises(ValueError, match="plain"):
        attention_embeddings(bare)
    torch.manual_seed(0)
    valued = EFA(EFAConfig([Category("token", 5, dim=4),
                            Value("y", Gaussian(), dim=4, loc=3.0, scale=1.5, readout="linear")],
                           num_layers=1, num_heads=2, max_len=6, block="residual_linear",
                           bias=False, out_proj=True)).double()
    both = Sequences({"token": torch.randint(0, 5, (2, 6)),
                      "y": 3 + torch.randn(2, 6, dtype=torch.float64)}, torch.tensor([6, 4]))
    with pytest.raises(ValueError, match="'y' is a Value"):
        mixture(valued, both, "y")
    two = EFA(EFAConfig([Category("token", 5, dim=4),
                         Value("y", Gaussian(), dim=4, loc=3.0, scale=1.5, readout="linear")],
                        num_layers=2, num_heads=2, max_len=6, block="residual_linear",
                        bias=False, out_proj=True)).double()
    with pytest.raises(ValueError, match="'y' is a Value"):
        two_layer_terms(two, both, "y")


def test_lines_end_at_newlines_only(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes("one doc with an ellipsis… inside it\nsecond document\n".encode("cp1252"))
    assert len(lee_background(path)) == 2


def test_text_refuses_strings_as_documents_and_repeated_words():
    with pytest.raises(ValueError, match="document 0 is a string"):
        vocabulary(["hello world", "hello"], 1)
    with pytest.raises(ValueError, match="document 0 is a string"):
        windows(["hello"], ["l", "o"], 2)
    with pytest.raises(ValueError, match="more than once"):
        windows([["a", "b", "a"]], ["a", "b", "a"], 3)
    with pytest.raises(ValueError, match="min_count"):
        vocabulary([["a"]], "3")
    with pytest.raises(ValueError, match="no word occurs"):
        vocabulary([["a", "b"]], 10)


def test_embeddings_refuse_float_rows_and_index_masks():
    rng = np.random.default_rng(0)
    w, quads = rng.normal(size=(7, 4)), np.array([[0, 1, 2, 3], [1, 2, 3, 4]])
    with pytest.raises(ValueError, match="integer rows"):
        offset_residuals(w, quads + 0.9)
    with pytest.raises(ValueError, match="integer rows"):
        offset_residuals(w, quads.astype(bool))
    with pytest.raises(ValueError, match="bool mask"):
        prop13(w, w, quads, holds=[0, 1])
    with pytest.raises(ValueError, match="at least one quadruple"):
        prop13(w, w, np.zeros((0, 4), dtype=np.int64))


def test_neighbours_refuse_coordinates_off_the_globe():
    with pytest.raises(ValueError, match="site 0 has a coordinate off the globe \\(latitude 130"):
        nearest_neighbours([130.0, 0.0, 10.0], [0.0, 0.0, 0.0], 1)


def test_clear_messages_for_a_free_mixture_and_a_summary_without_categories():
    with pytest.raises(ValueError, match="needs a Category field"):
        CBOWMoE("token", 4)
    with pytest.raises(KeyError, match="lack the columns \\['category', 'group'\\]"):
        analogy.summarise(pd.DataFrame({"correct": [True], "cosine": [0.5]}))


def _linear(**kw):
    torch.manual_seed(0)
    return efa.EFA(efa.EFAConfig([efa.Category("token", 5, dim=6)], num_layers=1, num_heads=2,
                                 max_len=4, block="residual_linear", bias=False, out_proj=True,
                                 **kw)).double().eval()


@pytest.mark.parametrize("kw", [dict(direction="unidirectional"), dict(attend_self=False)])
def test_the_mixture_identity_refuses_models_it_does_not_hold_for(kw):
    from efa import moe

    with pytest.raises(ValueError, match="direction='bidirectional' and attend_self=True"):
        moe.mixture(_linear(**kw), efa.Sequences({"token": torch.zeros(1, 4, dtype=torch.long)},
                                                  torch.tensor([4])))
    with pytest.raises(ValueError, match="direction='bidirectional' and attend_self=True"):
        moe.CBOWMoE.tied(_linear(**kw))
    from efa import embeddings

    bare = efa.EFA(efa.EFAConfig([efa.Category("t", 6, dim=5)], num_layers=1, num_heads=1,
                                 block="bare", bias=False, max_len=None, attend_self=False))
    with pytest.raises(ValueError, match="attend_self=False"):
        embeddings.attention_embeddings(bare)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1"):
        moe.CBOWMoE(efa.Category("t", 5, dim=4), 4, num_heads=0)


def test_analogy_questions_need_their_columns():
    from efa import analogy

    questions = pd.DataFrame({"a": ["man"], "b": ["woman"], "c": ["king"], "d": ["queen"]})
    with pytest.raises(KeyError, match=r"lack the columns \['category', 'group'\]"):
        analogy.accuracy(np.eye(4), ["man", "woman", "king", "queen"], questions)


def test_the_mixture_identity_refuses_a_field_that_feeds_only_the_skip_path():
    from efa import moe

    torch.manual_seed(0)
    fields = [efa.Category("a", 5, dim=4), efa.Category("b", 4, dim=4, feeds=("skip",))]
    model = efa.EFA(efa.EFAConfig(fields, num_layers=1, num_heads=2, block="residual_linear",
                                  bias=False, out_proj=True, max_len=6))
    data = efa.Sequences({"a": torch.zeros(2, 6, dtype=torch.long),
                          "b": torch.ones(2, 6, dtype=torch.long)}, torch.tensor([6, 4]))
    with pytest.raises(ValueError, match=r"every field to feed .*'b': \('skip',\)"):
        moe.mixture(model, data)
    with pytest.raises(ValueError, match="every field to feed"):
        moe.CBOWMoE.tied(model)


def test_prop9_correlations_refuses_shapes_that_disagree():
    from efa.embeddings import cooccurrence, prop9_correlations

    counts = cooccurrence([[0, 1, 2], [2, 1, 0], [1, 1, 3]], 4)
    g = torch.Generator().manual_seed(0)
    W, C = torch.randn(4, 3, generator=g).numpy(), torch.randn(4, 3, generator=g).numpy()
    ok = prop9_correlations(W, C, counts)
    assert ok["pairs"] == 16 and ok["defined"] == int((counts > 0).sum())
    with pytest.raises(ValueError, match="W and C"):
        prop9_correlations(W, C[:, :2], counts)  # numpy broadcast or a matmul error before
    with pytest.raises(ValueError, match="W and C"):
        prop9_correlations(W[:3], C[:3], counts)


def test_attention_statistics_refuses_an_empty_corpus():
    from efa.embeddings import attention_statistics

    with pytest.raises(ValueError, match="empty"):  # NaN and ZeroDivisionError before
        attention_statistics([1.0, 2.0, 1.0, 0.5], torch.zeros(0, 3, dtype=torch.long).numpy(),
                             3)
