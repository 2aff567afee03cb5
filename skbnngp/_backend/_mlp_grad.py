"""The squared error of a plain multilayer perceptron, with its gradient written by hand.

A network of :func:`~._train.build_mlp` with ``architecture="mlp"`` and a ReLU or tanh
activation is ``Linear, act, Linear, act, ..., Linear``. For it, :class:`MLPSquaredError`
computes a batch's (optionally row-weighted) mean squared error and writes the gradient into
the parameters' ``.grad`` tensors with the kernels that autograd's backward pass calls for
these layers (``mm``, ``sum``, ``threshold_backward``, ``tanh_backward``), on the same
operands in the same order, so the gradients are the same numbers. What it saves is the
autograd graph and engine: for networks of a few thousand weights, most of a step's time on
the CPU.

:class:`~._train.NetworkTrainer` uses :meth:`MLPSquaredError.value_and_grad` when the loss
has it and its :meth:`~MLPSquaredError.parameters` are the ones trained; calling the object
gives the differentiable loss, as any other objective.
"""

from __future__ import annotations

import torch

from ._train import ACTIVATIONS

_aten = torch.ops.aten

#: Activation name -> (forward, backward from the activation's output).
_ACTIVATION_GRADS = {
    "relu": (torch.relu, lambda grad, out: _aten.threshold_backward(grad, out, 0)),
    "tanh": (torch.tanh, _aten.tanh_backward),
}


def _layer_plan(net):
    """``[(weight, bias), (forward, backward), ..., (weight, bias)]`` for a supported
    network, or None (then the trainer differentiates the loss with autograd)."""
    plan = getattr(net, "mlp_plan", None)
    if (plan is None or plan.get("architecture") != "mlp"
            or plan.get("activation") not in _ACTIVATION_GRADS):
        return None
    act = ACTIVATIONS[plan["activation"]]
    layers = []
    for i, m in enumerate(net):
        if i % 2 == 0 and type(m) is torch.nn.Linear:
            layers.append((m.weight, m.bias))
        elif i % 2 == 1 and type(m) is act:
            layers.append(_ACTIVATION_GRADS[plan["activation"]])
        else:
            return None
    if len(layers) % 2 == 0 or not all(p.requires_grad for p in net.parameters()):
        return None
    return layers


def _hidden_outputs(layers, X):
    """``[X, h_1, ..., h_L]``: the input of each linear layer of a :func:`_layer_plan`
    network (its hidden layers' activation outputs), the forward pass that both hand-written
    gradients differentiate."""
    h, outputs = X, [X]
    for i in range(0, len(layers) - 1, 2):
        h = layers[i + 1][0](torch.nn.functional.linear(h, *layers[i]))
        outputs.append(h)
    return outputs


def _store(param, op, *args):
    """``param.grad = op(*args)``, written into an existing ``.grad`` in place (a view of
    the trainer's flat gradient buffer) rather than replacing it."""
    if param.grad is None:
        param.grad = op(*args)
    else:
        op(*args, out=param.grad)


def squared_error_loss(net, X, Y, weights=None):
    """``loss(rows, epoch)`` through autograd: the mean squared error of ``net`` on rows
    ``rows`` of ``(X, Y)``, each row's squared error times its weight in ``weights`` (a
    column of weights with mean 1) when given."""
    if weights is None:
        def loss(rows, epoch):
            return (net(X[rows]).reshape(-1, 1) - Y[rows]).square().mean()
        return loss

    def weighted_loss(rows, epoch):
        return (weights[rows] * (net(X[rows]).reshape(-1, 1) - Y[rows]).square()).mean()
    return weighted_loss


class MLPSquaredError:
    """:func:`squared_error_loss` (what calling it gives) with a hand-written gradient
    (:meth:`value_and_grad`).

    Build it with :meth:`for_network`, which returns None for a network it does not cover.
    """

    def __init__(self, net, layers, X, Y, weights=None):
        self.net, self._layers = net, layers
        self.X, self.Y, self.weights = X, Y, weights
        self._loss = squared_error_loss(net, X, Y, weights)

    @classmethod
    def for_network(cls, net, X, Y, weights=None):
        layers = _layer_plan(net)
        return None if layers is None else cls(net, layers, X, Y, weights)

    def parameters(self):
        """The tensors whose ``.grad`` :meth:`value_and_grad` writes."""
        return list(self.net.parameters())

    def __call__(self, rows, epoch):
        return self._loss(rows, epoch)

    def value_and_grad(self, rows, epoch):
        """The loss (a 0-d tensor) with its gradient written into every parameter's
        ``.grad``; no autograd graph is built."""
        layers = self._layers
        with torch.no_grad():
            outputs = _hidden_outputs(layers, self.X[rows])
            h = torch.nn.functional.linear(outputs[-1], *layers[-1])
            r = h.reshape(-1, 1) - self.Y[rows]
            # d mean(w r^2) / d r = (w / N) * (2 r), rounded as autograd rounds it
            scale = 1.0 / r.numel()
            if self.weights is None:
                loss, grad = r.square().mean(), scale * (2 * r)
            else:
                w = self.weights[rows]
                loss, grad = (w * r.square()).mean(), (scale * w) * (2 * r)
            grad = grad.reshape(h.shape)
            for i in range(len(layers) - 1, -1, -2):
                weight, bias = layers[i]
                inputs = outputs[i // 2]
                _store(weight, torch.mm, grad.t(), inputs)
                if bias is not None:
                    _store(bias, torch.sum, grad, 0)
                if i > 0:  # through the weight, then the activation whose output is inputs
                    grad = layers[i - 1][1](grad.mm(weight), inputs)
        return loss


def per_sample_body_gradients(net, names):
    """A function ``X -> J`` (rows, m) of the per-sample gradients of a plain MLP's scalar
    output with respect to its parameters ``names`` (flattened in that order), written by
    hand: what :func:`torch.func.vmap` over :func:`torch.func.grad` gives, row by row the
    same products (the output layer's weights, then each activation's derivative times the
    layer above, each weight's gradient the outer product of its layer's output gradient and
    input). None when ``net`` is not a network :class:`MLPSquaredError` covers with one
    output, or ``names`` are not every parameter of its layers but the last.

    :func:`torch.func.grad` imports torch's compiler on its first call in a process, which
    costs more than a small network's whole Bayesian last layer."""
    layers = _layer_plan(net)
    if layers is None or layers[-1][0].shape[0] != 1:
        return None
    named = dict(net.named_parameters())
    hidden = [p for i in range(0, len(layers) - 1, 2) for p in layers[i] if p is not None]
    if {id(named.get(k)) for k in names} != {id(p) for p in hidden} or len(names) != len(hidden):
        return None
    order = [id(named[k]) for k in names]

    def jacobian(X):
        with torch.no_grad():
            outputs = _hidden_outputs(layers, X)
            # d f / d (last hidden output): the output layer's weights, for every row
            grad = layers[-1][0].expand(X.shape[0], -1)
            blocks = {}
            for i in range(len(layers) - 3, -1, -2):
                weight, bias = layers[i]
                grad = layers[i + 1][1](grad, outputs[i // 2 + 1])  # through the activation
                inputs = outputs[i // 2]
                blocks[id(weight)] = (grad.unsqueeze(2) * inputs.unsqueeze(1)).reshape(
                    X.shape[0], -1)
                if bias is not None:
                    blocks[id(bias)] = grad
                if i > 0:
                    grad = grad.mm(weight)
            return torch.cat([blocks[k] for k in order], dim=1)
    return jacobian
