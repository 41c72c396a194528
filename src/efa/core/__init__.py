"""The model, layer by layer of its equation: encode each token's fields (``fields``,
``encoders``, ``mlp``) → attend (``attention`` around a kernel of ``kernels/``; masking decides
uni- or bidirectional) → read out at the target (``strategies``, ``softmax``) → the family
(``families/``) turns the natural parameter into a likelihood. ``model`` holds ``EFA``,
``conditional`` what it shares with its special cases, ``data`` the sequences it reads,
``registry`` the plug-in mechanism. Nothing here imports anything built on the model.
"""
