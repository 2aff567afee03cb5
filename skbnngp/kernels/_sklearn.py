"""scikit-learn :class:`~sklearn.gaussian_process.kernels.Kernel` adapters of the NNGP/NTK.

The adapters evaluate the torch functions of :mod:`skbnngp.kernels._nngp` in float64 on the
CPU and return NumPy arrays, so they work wherever a scikit-learn kernel does:
:class:`~sklearn.gaussian_process.GaussianProcessRegressor` and its optimiser, sums and products
with other kernels, ``clone`` and pickling. Gradients with respect to the log-hyperparameters
come from torch autograd: one Jacobian-vector product per free hyperparameter, by double
back-propagation through the plain-autograd recursion.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.gaussian_process.kernels import Hyperparameter, Kernel

from .._backend._device import as_tensor, to_numpy
from ._nngp import layer_variances, nngp_kernel_block

__all__ = ["NNGPKernel", "NTKKernel"]

_CPU = torch.device("cpu")


def _to_tensor(X):
    return as_tensor(np.asarray(X, dtype=np.float64), _CPU, torch.float64)


class NNGPKernel(Kernel):
    """NNGP kernel of a deep fully connected network, as a scikit-learn kernel.

    ``k(x, x') = Kbar(x, x')``: the infinite-width covariance of a network with ``depth``
    hidden layers of activation ``activation``, weight variance ``weight_variance``, bias
    variance ``bias_variance`` and a unit-variance readout without bias. Multiply by a
    :class:`~sklearn.gaussian_process.kernels.ConstantKernel` for an output scale and add a
    :class:`~sklearn.gaussian_process.kernels.WhiteKernel` for noise.

    Parameters
    ----------
    depth : int, default=1
        Number of hidden layers (>= 1). Not a hyperparameter of the optimiser.
    weight_variance : float, default=2.0
        ``sigma_w^2`` of the hidden layers.
    bias_variance : float, default=0.1
        ``sigma_b^2`` of the hidden layers.
    activation : str, Activation or callable, default="relu"
        See :func:`~skbnngp.kernels.get_activation`.
    weight_variance_bounds : pair of floats >= 0 or "fixed", default=(1e-3, 1e3)
        Bounds on ``weight_variance``; "fixed" excludes it from the optimisation.
    bias_variance_bounds : pair of floats >= 0 or "fixed", default=(1e-6, 1e3)
        Bounds on ``bias_variance``.

    See Also
    --------
    NTKKernel : the neural tangent kernel of the same network.
    skbnngp.kernels.nngp_kernel : the torch function behind this kernel.

    Notes
    -----
    The computation runs in torch float64 on the CPU. ``eval_gradient=True`` returns
    ``dK/dlog(theta)`` (scikit-learn's convention) for the free hyperparameters in the order
    of :attr:`hyperparameters` (``bias_variance`` before ``weight_variance``).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process import GaussianProcessRegressor
    >>> from sklearn.gaussian_process.kernels import WhiteKernel
    >>> from skbnngp.kernels import NNGPKernel
    >>> X = np.linspace(-1, 1, 10).reshape(-1, 1)
    >>> kernel = NNGPKernel(depth=2) + WhiteKernel(1e-2)
    >>> gpr = GaussianProcessRegressor(kernel, optimizer=None).fit(X, X[:, 0])
    >>> gpr.predict(X[:2]).shape
    (2,)
    """

    _output = "nngp"

    def __init__(
        self,
        depth=1,
        weight_variance=2.0,
        bias_variance=0.1,
        activation="relu",
        weight_variance_bounds=(1e-3, 1e3),
        bias_variance_bounds=(1e-6, 1e3),
    ):
        self.depth = depth
        self.weight_variance = weight_variance
        self.bias_variance = bias_variance
        self.activation = activation
        self.weight_variance_bounds = weight_variance_bounds
        self.bias_variance_bounds = bias_variance_bounds

    @property
    def hyperparameter_weight_variance(self):
        return Hyperparameter("weight_variance", "numeric", self.weight_variance_bounds)

    @property
    def hyperparameter_bias_variance(self):
        return Hyperparameter("bias_variance", "numeric", self.bias_variance_bounds)

    def is_stationary(self):
        """Returns False: the kernel depends on the norms of the inputs, not their difference."""
        return False

    def _settings(self):
        return dict(depth=self.depth, activation=self.activation)

    def _evaluate(self, X, Y, w, b, diag=False, fused=None):
        var_x = layer_variances(X, weight_variance=w, bias_variance=b, **self._settings())
        which = 0 if self._output == "nngp" else 1
        if diag:
            return var_x[which, -1]
        if Y is None:
            Y, var_y, offset = X, var_x, 0
        else:
            var_y = layer_variances(Y, weight_variance=w, bias_variance=b, **self._settings())
            offset = None
        out = nngp_kernel_block(
            X,
            Y,
            var_x,
            var_y,
            weight_variance=w,
            bias_variance=b,
            activation=self.activation,
            return_ntk=self._output == "ntk",
            diag_offset=offset,
            _fused=fused,
        )
        return out[1] if self._output == "ntk" else out

    def __call__(self, X, Y=None, eval_gradient=False):
        """Return the kernel ``k(X, Y)`` and optionally its gradient.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        Y : array-like of shape (n_samples_Y, n_features), default=None
            ``None`` evaluates ``k(X, X)``.
        eval_gradient : bool, default=False
            Also return the gradient with respect to the log of the free hyperparameters;
            only allowed when ``Y`` is None.

        Returns
        -------
        K : ndarray of shape (n_samples_X, n_samples_Y)
        K_gradient : ndarray of shape (n_samples_X, n_samples_X, n_dims), optional
        """
        if eval_gradient and Y is not None:
            raise ValueError("Gradient can only be evaluated when Y is None.")
        Xt = _to_tensor(X)
        Yt = None if Y is None else _to_tensor(Y)
        w = torch.tensor(float(self.weight_variance), dtype=torch.float64)
        b = torch.tensor(float(self.bias_variance), dtype=torch.float64)
        if not eval_gradient:
            with torch.no_grad():
                return to_numpy(self._evaluate(Xt, Yt, w, b))
        values = {"weight_variance": w, "bias_variance": b}
        free = [values[hp.name] for hp in self.hyperparameters if not hp.fixed]
        n = Xt.shape[0]
        if not free:
            with torch.no_grad():
                return to_numpy(self._evaluate(Xt, None, w, b)), np.empty((n, n, 0))
        # Jacobian-vector products by double back-propagation: g(U) = <U, dK/dp> is linear in
        # the dummy cotangent U, so dg/dU = dK/dp. This needs the plain-autograd recursion.
        with torch.enable_grad():
            for p in free:
                p.requires_grad_(True)
            K = self._evaluate(Xt, None, w, b, fused=False)
            U = torch.zeros_like(K, requires_grad=True)
            # <U, K> summed, not grad_outputs=U: the same products, and an explicit output
            # gradient makes torch import SymPy on its first use (a large share of a fit)
            g = torch.autograd.grad((K * U).sum(), free, create_graph=True)
            grads = []
            for g_p, p in zip(g, free):
                (dK,) = torch.autograd.grad(g_p, U, retain_graph=True, allow_unused=True)
                dK = torch.zeros_like(K) if dK is None else dK
                grads.append(to_numpy(dK * p.detach()))  # d/dlog(p) = p d/dp
        return to_numpy(K), np.stack(grads, axis=2)

    def diag(self, X):
        """Return the diagonal ``k(X, X)`` without forming the matrix.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        K_diag : ndarray of shape (n_samples,)
        """
        Xt = _to_tensor(X)
        w = torch.tensor(float(self.weight_variance), dtype=torch.float64)
        b = torch.tensor(float(self.bias_variance), dtype=torch.float64)
        with torch.no_grad():
            return to_numpy(self._evaluate(Xt, None, w, b, diag=True))

    def __repr__(self):
        return (
            f"{type(self).__name__}(depth={self.depth}, "
            f"weight_variance={self.weight_variance:.3g}, "
            f"bias_variance={self.bias_variance:.3g}, activation={self.activation!r})"
        )


class NTKKernel(NNGPKernel):
    """Neural tangent kernel of a deep fully connected network, as a scikit-learn kernel.

    ``k(x, x') = Thetabar(x, x')`` in NTK parameterisation with a unit readout. Parameters, bounds
    and gradients are those of :class:`NNGPKernel`.

    Parameters
    ----------
    depth : int, default=1
    weight_variance : float, default=2.0
    bias_variance : float, default=0.1
    activation : str, Activation or callable, default="relu"
    weight_variance_bounds : pair of floats >= 0 or "fixed", default=(1e-3, 1e3)
    bias_variance_bounds : pair of floats >= 0 or "fixed", default=(1e-6, 1e3)

    See Also
    --------
    NNGPKernel : the NNGP of the same network.
    skbnngp.kernels.ntk_kernel : the torch function behind this kernel.
    """

    _output = "ntk"
