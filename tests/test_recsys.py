"""SASRec and BERT4Rec as ConditionalModels: their likelihoods are the definitions (causal
next-item prediction; one masked copy per position), and the ranking metrics are the
textbook ones."""

import math

import pytest
import torch

from efa import Category, Sequences, evaluate, fit
from efa.baselines.recsys import BERT4Rec, SASRec, ranking_metrics


def _data(n=12, k=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    lists = [torch.randperm(k, generator=g)[: int(m)].tolist()
             for m in torch.randint(2, 8, (n,), generator=g)]
    return Sequences.from_lists({"item": lists})


@pytest.mark.parametrize("distinct", [False, True])
def test_sasrec_is_causal_and_bert4rec_scores_masked_copies(distinct):
    torch.manual_seed(0)
    data, k = _data(), 9
    f = Category("item", k, distinct=distinct)
    sas = SASRec(f, 8).double().eval()
    eta = sas.natural_params(data)["item"]
    future = Sequences({"item": data.fields["item"].clone()}, data.lengths)
    future.fields["item"][:, 3:] = (future.fields["item"][:, 3:] + 1) % k
    torch.testing.assert_close(sas.natural_params(future)["item"][:, :4], eta[:, :4])

    bi = BERT4Rec(f, 8, chunk=7).double().eval()
    uni = BERT4Rec(f, 8, direction="unidirectional").double().eval()
    uni.load_state_dict(bi.state_dict())
    eta_bi, eta_uni = bi.natural_params(data)["item"], uni.natural_params(data)["item"]
    for s in range(len(data)):
        n = int(data.lengths[s])
        x = data.fields["item"][s, :n]
        for i in range(n):
            for direction, got in (("bidirectional", eta_bi), ("unidirectional", eta_uni)):
                end = n if direction == "bidirectional" else i + 1
                tokens = x[:end].clone()
                tokens[i] = k  # [MASK]
                want = bi.net(tokens[None], None, causal=False)[0, i]
                if distinct:
                    want[[int(v) for j, v in enumerate(x[:end]) if j != i]] = -1e4
                torch.testing.assert_close(got[s, i], want)


def test_bert4rec_trains_by_cloze_and_validates_exactly():
    torch.manual_seed(1)
    data = _data(n=40)
    model = BERT4Rec(Category("item", 9, distinct=True), 8, dim=16, inner=32)
    before = -evaluate(model, data)["item"]
    model.train()
    cloze = model.loss(data)
    model.eval()
    assert math.isfinite(float(cloze.detach())) and float(model.loss(data)) == pytest.approx(before)
    fit(model, data, data, max_epochs=5, lr=1e-2, progress=False, patience=5)
    assert -evaluate(model, data)["item"] < before


def test_ranking_metrics_rank_the_last_item_against_all_items():
    data = Sequences({"item": torch.tensor([[0, 1, 2], [3, 4, 0]])}, torch.tensor([3, 2]))
    k = 12

    class Fixed(SASRec):  # scores: item j gets -j, so item 2 is third, item 4 fifth
        def natural_params(self, d):
            return {"item": -torch.arange(k, dtype=torch.float64).expand(*d.valid().shape, k)}

    model = Fixed(Category("item", k), 4)
    got = ranking_metrics(model, data, k=3)
    assert got == pytest.approx({"HR@3": 0.5, "NDCG@3": 0.5 / math.log2(4)})
    # distinct: the context items leave the ranking (item 2 first, item 4 fourth)
    distinct = Fixed(Category("item", k, distinct=True), 4)
    got = ranking_metrics(distinct, data, k=4)
    assert got == pytest.approx({"HR@4": 1.0, "NDCG@4": 0.5 + 0.5 / math.log2(5)})

    class Constant(Fixed):
        def natural_params(self, d):
            return {"item": torch.zeros(*d.valid().shape, k, dtype=torch.float64)}

    assert ranking_metrics(Constant(Category("item", k), 4), data, k=3)["HR@3"] == 0.0
