"""The model, layer by layer of its equation: encode each token's fields (``fields``,
``fieldbase``, ``value``, ``encoders``, ``mlp``) → attend (``attention`` around a kernel of
``kernels/``; masking decides uni- or bidirectional) → read out at the target (``strategies``,
``softmax``) → the family (``families/``) turns the natural parameter into a likelihood.
``model`` holds ``EFA`` (``config`` its settings, ``warmstart`` the copy of a fitted model's
weights), ``conditional`` what it shares with its special cases, ``context`` the context
counts of the flat peers, ``data`` the sequences it reads (``parts`` their checks and
files), ``checks`` and ``events`` the user's input, ``registry`` the plug-in mechanism.
Nothing here imports anything built on the model.
"""
