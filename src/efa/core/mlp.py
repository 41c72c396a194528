"""Small multilayer perceptrons, shared by the fields' encoders and read-outs and the
attention blocks' feed-forward layers."""

from __future__ import annotations

from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU}  # LeakyReLU: slope 0.01


def mlp(sizes: list[int], activation: str = "relu", bias: bool = True) -> nn.Module:
    """Linear layers with an activation between them (none after the last).

    Parameters
    ----------
    sizes : list of int
        The widths, input first: ``[a, b, c]`` gives ``Linear(a, b)``, the activation,
        ``Linear(b, c)`` (a single width gives no layer at all).
    activation : {"relu", "leaky_relu"}
        The activation between the layers (``leaky_relu``: slope 0.01).
    bias : bool
        Whether every linear layer has a bias.

    Returns
    -------
    torch.nn.Sequential
        The layers, mapping ``[..., sizes[0]]`` to ``[..., sizes[-1]]``.
    """
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b, bias=bias), ACTIVATIONS[activation]()]
    return nn.Sequential(*layers[:-1])
