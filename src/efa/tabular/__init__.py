"""A scikit-learn classifier for tables: bidirectional attention over the columns, trained on the
joint masked pseudo-likelihood of *all* columns (Wibisono & Wang, UAI 2023, Section 3.1).

Each row is a sequence whose positions are the columns (the response last); a categorical cell
is a token of a column-specific vocabulary, a numeric cell is either a quantile bin (bins learned
in ``fit``) or a Gaussian value field (``numeric="gaussian"``). The model is an :class:`efa.EFA`
whose likelihood is, for every row and every column k, log p(x_k | the other cells): every
column, the response included, is masked in turn, computed exactly by the core's two-stream
algorithm (one pass per row; no masked copies of the data). A categorical column's softmax
runs over its own levels only (:class:`TableEFA`). Prediction masks the response;
``predict_column_proba`` and ``impute`` do the same for any column.

Rows whose label is missing (NaN / None in ``y``) still enter the likelihood of the features
(the paper's Y = [MASK], semi-supervised). Two backbones: ``"paper"`` (the authors' single post-LN
transformer block: 5 heads, width 20, feed-forward 5, dropout 0.1) and ``"linear"`` (the
theory-exact ``residual_linear`` block, whose response logits are the CBOW mixture of experts of
:mod:`efa.moe`; ``gates`` returns its π).

The code is in seven rooms: :mod:`efa.tabular.encoding` (columns → cells → Sequences),
:mod:`efa.tabular.model` (:class:`TableEFA`), :mod:`efa.tabular.checks` (what fit's labels
and validation split must hold), :mod:`efa.tabular.fitting` (classes, the table's layout and
vocabulary, the model built from them, one fit of it),
:mod:`efa.tabular.glm_stage` (the first stage of ``init="glm"``),
:mod:`efa.tabular.prediction` (a column's probabilities, imputation) and
:mod:`efa.tabular.estimator` (the scikit-learn facade).
"""

from efa.tabular.estimator import BACKBONES, RESPONSES, AttentionTableClassifier
from efa.tabular.model import TableEFA

__all__ = ["AttentionTableClassifier", "TableEFA", "BACKBONES", "RESPONSES"]
