"""Single-hidden-layer activation kernels in the mixed-activation paper's parameterisation and
their mixture.

For one hidden layer ``z_j(x) = a_j + u_j . x`` with ``a_j ~ N(0, sigma_a2)`` and
``u_ji ~ N(0, sigma_u2)`` (no 1/d fan-in scaling), the pre-activations of two
inputs are a centred bivariate normal with::

    k11 = s^2(x)  = sigma_a2 + sigma_u2 |x|^2
    k22 = s^2(x') = sigma_a2 + sigma_u2 |x'|^2
    k12 = C(x,x') = sigma_a2 + sigma_u2 x . x'

so ``E[h(Z) h(Z')]`` is the Gaussian moment ``F(k11, k22, k12)`` of the activation objects of
:mod:`skbnngp.kernels._activations`, whose closed forms (atan2 form, safe derivatives at
``x = x'``) are reused here rather than re-derived. The four activations of the paper are:

``"tanh"``
    eq (8), through the slope-matched surrogate ``tanh(z) ~ erf(sqrt(pi) z / 2)``: the erf
    moments at ``(pi/4) k``, i.e.
    ``A = (2/pi) arcsin((pi/2) C / sqrt((1 + (pi/2) s^2)(1 + (pi/2) s'^2)))``.
``"sigmoid"``
    eq (9), through ``sigmoid(z) ~ (1 + erf(sqrt(pi) z / 4)) / 2``: ``1/4 + (1/4)`` times the
    erf moments at ``(pi/16) k``.
``"relu"``
    eq (10), exact: the order-1 arc-cosine kernel ``s s' S(rho)``.
``"leaky_relu"``
    eq (11), exact: ``B_alpha = alpha C + (1-alpha)^2 F_relu`` with the shared slope
    ``leaky_slope = alpha`` in (0, 1).

An :class:`~skbnngp.kernels.Activation` instance may stand in for a name (for example
:class:`~skbnngp.kernels.Tanh`, the exact tanh by quadrature).

The mixture (eqs (13)-(15)) is ``K = sigma_b2 + sigma_v2 sum_m w_m k_m`` with weights on the
simplex; :class:`MixedActivationKernel` is its scikit-learn adapter.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
import torch.autograd.forward_ad as fwAD
from sklearn.gaussian_process.kernels import Hyperparameter, Kernel

from .._backend._device import as_tensor, to_numpy
from ._activations import Activation, Erf, LeakyReLU, ReLU
from ._nngp import _as_hyper, _check_X

__all__ = [
    "PAPER_ACTIVATIONS",
    "preactivation_covariances",
    "activation_kernel",
    "mixed_activation_kernel",
    "MixedActivationKernel",
]

#: The activation names of the mixed-activation paper (in the paper's order).
PAPER_ACTIVATIONS = ("tanh", "sigmoid", "relu", "leaky_relu")

_ERF = Erf()
_RELU = ReLU()
_TANH_SCALE = math.pi / 4.0  # erf(c z) has the erf moments at c^2 k; c = sqrt(pi) / 2
_SIGMOID_SCALE = math.pi / 16.0  # c = sqrt(pi) / 4


def _check_activation(activation):
    if isinstance(activation, Activation):
        return activation
    if isinstance(activation, str) and activation in PAPER_ACTIVATIONS:
        return activation
    raise ValueError(
        f"activation must be one of {PAPER_ACTIVATIONS} or an Activation instance, "
        f"got {activation!r}.")


def _check_slope(leaky_slope, like):
    if isinstance(leaky_slope, numbers.Real) and not isinstance(leaky_slope, bool):
        if not 0.0 <= leaky_slope <= 1.0:
            raise ValueError(f"leaky_slope must lie in [0, 1], got {leaky_slope!r}.")
    return _as_hyper(leaky_slope, "leaky_slope", like)


def preactivation_covariances(X1, X2=None, *, sigma_a2=1.0, sigma_u2=1.0):
    """Variances and covariance of the pre-activations ``Z = a + u . x``.

    Parameters
    ----------
    X1 : torch.Tensor of shape (n1, d)
    X2 : torch.Tensor of shape (n2, d) or None, default=None
        ``None`` means ``X1``; the variances are then read off the diagonal of ``X1 X1^T`` so
        that ``k12 == k11`` holds exactly on the diagonal.
    sigma_a2, sigma_u2 : float or 0-d torch.Tensor, default=1.0
        Hidden-bias and input-weight variances.

    Returns
    -------
    k11 : torch.Tensor of shape (n1, 1)
    k22 : torch.Tensor of shape (1, n2)
    k12 : torch.Tensor of shape (n1, n2)
    """
    X1 = _check_X(X1, "X1")
    a = _as_hyper(sigma_a2, "sigma_a2", X1)
    u = _as_hyper(sigma_u2, "sigma_u2", X1)
    if X2 is None:
        dots = X1 @ X1.T
        sq1 = sq2 = dots.diagonal()
    else:
        X2 = _check_X(X2, "X2")
        if X2.shape[1] != X1.shape[1]:
            raise ValueError(f"X1 and X2 must have the same number of features, got "
                             f"{X1.shape[1]} and {X2.shape[1]}.")
        X2 = X2.to(dtype=X1.dtype, device=X1.device)
        dots = X1 @ X2.T
        sq1, sq2 = (X1 * X1).sum(1), (X2 * X2).sum(1)
    k12 = a + u * dots
    return (a + u * sq1).unsqueeze(1), (a + u * sq2).unsqueeze(0), k12


def _component(activation, k11, k22, k12, slope):
    """``E[h(Z) h(Z')]`` of one activation from the pre-activation covariances."""
    if activation == "tanh":
        c = _TANH_SCALE
        return _ERF.F(c * k11, c * k22, c * k12)
    if activation == "sigmoid":
        c = _SIGMOID_SCALE
        return 0.25 + 0.25 * _ERF.F(c * k11, c * k22, c * k12)
    if activation == "relu":
        return _RELU.F(k11, k22, k12)
    if activation == "leaky_relu":
        return LeakyReLU(slope).F(k11, k22, k12)
    return activation.F(k11, k22, k12)


def _component_diag(activation, k, slope):
    """``E[h(Z)^2]``."""
    if activation == "tanh":
        return _ERF.F_diag(_TANH_SCALE * k)
    if activation == "sigmoid":
        return 0.25 + 0.25 * _ERF.F_diag(_SIGMOID_SCALE * k)
    if activation == "relu":
        return 0.5 * k
    if activation == "leaky_relu":
        return LeakyReLU(slope).F_diag(k)
    return activation.F_diag(k)


def activation_kernel(X1, X2=None, *, activation="tanh", sigma_a2=1.0, sigma_u2=1.0,
                      leaky_slope=0.5, diag=False):
    """``k_h(x, x') = E[h(a + u.x) h(a + u.x')]`` for one activation.

    Parameters
    ----------
    X1 : torch.Tensor of shape (n1, d)
    X2 : torch.Tensor of shape (n2, d) or None, default=None
        ``None`` means ``X1``.
    activation : {"tanh", "sigmoid", "relu", "leaky_relu"} or Activation, default="tanh"
        ``"tanh"`` and ``"sigmoid"`` are the paper's erf surrogates (eqs (8)-(9)); pass
        :class:`~skbnngp.kernels.Tanh` for the exact tanh by quadrature.
    sigma_a2, sigma_u2 : float or 0-d torch.Tensor, default=1.0
        Hidden-bias and input-weight variances (a tensor with ``requires_grad`` is
        differentiated).
    leaky_slope : float or 0-d torch.Tensor, default=0.5
        Negative slope ``alpha`` of ``"leaky_relu"`` (ignored otherwise).
    diag : bool, default=False
        Return only ``k_h(x, x)`` for the rows of ``X1``, from its closed form.

    Returns
    -------
    K : torch.Tensor of shape (n1, n2), or (n1,) if ``diag``

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import activation_kernel
    >>> x = torch.tensor([[0.3, -0.2, 0.5], [-0.1, 0.4, 0.2]], dtype=torch.float64)
    >>> activation_kernel(x, activation="relu")[0, 1]
    tensor(0.5172, dtype=torch.float64)
    """
    act = _check_activation(activation)
    X1 = _check_X(X1, "X1")
    slope = _check_slope(leaky_slope, X1) if act == "leaky_relu" else None
    if diag:
        a = _as_hyper(sigma_a2, "sigma_a2", X1)
        u = _as_hyper(sigma_u2, "sigma_u2", X1)
        return _component_diag(act, a + u * (X1 * X1).sum(1), slope)
    k11, k22, k12 = preactivation_covariances(X1, X2, sigma_a2=sigma_a2, sigma_u2=sigma_u2)
    return _component(act, k11, k22, k12, slope)


def _check_weights(weights, n_components, like):
    if weights is None:
        return torch.full((n_components,), 1.0 / n_components, dtype=like.dtype,
                          device=like.device)
    if isinstance(weights, torch.Tensor):  # used as given (no host sync in block loops)
        w = weights.to(dtype=like.dtype, device=like.device)
    else:
        arr = np.asarray(weights, dtype=np.float64)
        if arr.shape == (n_components,) and (not np.all(np.isfinite(arr)) or np.any(arr < 0)
                                             or abs(arr.sum() - 1.0) > 1e-8):
            raise ValueError(f"weights must be non-negative and sum to one, got {weights!r}.")
        w = torch.as_tensor(arr, dtype=like.dtype, device=like.device)
    if w.shape != (n_components,):
        raise ValueError(f"weights must have one entry per activation ({n_components}), got "
                         f"shape {tuple(w.shape)}.")
    return w


def mixed_activation_kernel(X1, X2=None, *, sigma_b2=1.0, sigma_v2=1.0, sigma_u2=1.0,
                            sigma_a2=1.0, leaky_slope=0.5, weights=None,
                            activations=("tanh", "leaky_relu"), diag=False):
    """Mixed-activation NNGP kernel ``sigma_b2 + sigma_v2 sum_m w_m k_m(x, x')``.

    Eqs (13)-(15) of the paper: the covariance of an infinitely wide single-hidden-layer
    network whose additive blocks share the pre-activations and use the activations
    ``activations``. The default is the paper's reduced kernel (15),
    ``sigma_b2 + sigma_v2 [w A + (1 - w) B_alpha]``.

    Parameters
    ----------
    X1 : torch.Tensor of shape (n1, d)
    X2 : torch.Tensor of shape (n2, d) or None, default=None
        ``None`` means ``X1``.
    sigma_b2, sigma_v2, sigma_u2, sigma_a2 : float or 0-d torch.Tensor, default=1.0
        Output-bias, output-weight, input-weight and hidden-bias variances.
    leaky_slope : float or 0-d torch.Tensor, default=0.5
        ``alpha`` of the ``"leaky_relu"`` component.
    weights : array-like or torch.Tensor of shape (n_activations,) or None, default=None
        Mixture weights on the simplex; ``None`` gives equal weights. A tensor is used as
        given (not checked; differentiated when it requires grad).
    activations : sequence of {"tanh", "sigmoid", "relu", "leaky_relu"} or Activation, \
default=("tanh", "leaky_relu")
    diag : bool, default=False
        Return only ``K(x, x)`` for the rows of ``X1``, from closed forms.

    Returns
    -------
    K : torch.Tensor of shape (n1, n2), or (n1,) if ``diag``

    Notes
    -----
    Every component is a covariance, so ``K`` is positive semi-definite for every parameter
    value; the tanh and sigmoid components are exact covariances of erf
    networks, so this holds exactly, not approximately.

    Examples
    --------
    >>> import torch
    >>> from skbnngp.kernels import mixed_activation_kernel
    >>> x = torch.tensor([[0.3, -0.2, 0.5], [-0.1, 0.4, 0.2]], dtype=torch.float64)
    >>> mixed_activation_kernel(x)[0, 1]  # 1.48362296
    tensor(1.4836, dtype=torch.float64)
    """
    if isinstance(activations, (str, Activation)) or len(activations) == 0:
        raise ValueError("activations must be a non-empty sequence of activation names, got "
                         f"{activations!r}.")
    acts = [_check_activation(a) for a in activations]
    X1 = _check_X(X1, "X1")
    b = _as_hyper(sigma_b2, "sigma_b2", X1)
    v = _as_hyper(sigma_v2, "sigma_v2", X1)
    w = _check_weights(weights, len(acts), X1)
    slope = _check_slope(leaky_slope, X1) if "leaky_relu" in acts else None
    if diag:
        a = _as_hyper(sigma_a2, "sigma_a2", X1)
        u = _as_hyper(sigma_u2, "sigma_u2", X1)
        k = a + u * (X1 * X1).sum(1)
        mix = sum(w[i] * _component_diag(act, k, slope) for i, act in enumerate(acts))
    else:
        k11, k22, k12 = preactivation_covariances(X1, X2, sigma_a2=sigma_a2,
                                                  sigma_u2=sigma_u2)
        mix = None
        for i, act in enumerate(acts):
            term = w[i] * _component(act, k11, k22, k12, slope)
            mix = term if mix is None else mix + term
    return b + v * mix


# ---------------------------------------------------------------------------------------------
# scikit-learn adapter
# ---------------------------------------------------------------------------------------------

_CPU = torch.device("cpu")
_SCALARS = ("sigma_b2", "sigma_v2", "sigma_u2", "sigma_a2", "leaky_slope")


class MixedActivationKernel(Kernel):
    """Mixed-activation NNGP kernel) as a scikit-learn kernel.

    ``k(x, x') = sigma_b2 + sigma_v2 sum_m w_m k_m(x, x')`` with the single-hidden-layer
    activation kernels ``k_m`` of :func:`activation_kernel`. A single activation
    (``activations=("relu",)``) gives the NNGP of that activation in the paper's
    parameterisation. Add a :class:`~sklearn.gaussian_process.kernels.WhiteKernel` for the
    noise variance, and use it in
    :class:`~sklearn.gaussian_process.GaussianProcessRegressor`.

    Parameters
    ----------
    sigma_b2, sigma_v2, sigma_u2, sigma_a2 : float, default=1.0
        Output-bias, output-weight, input-weight and hidden-bias variances.
    leaky_slope : float, default=0.5
        LeakyReLU slope ``alpha`` in (0, 1); a hyperparameter only when ``"leaky_relu"`` is
        one of the activations.
    mix_odds : float or array-like of shape (n_activations - 1,), default=1.0
        Mixture weights as odds against the last component, ``w_m = o_m / (1 + sum o)``
        (``m < M``) and ``w_M = 1 / (1 + sum o)``: scikit-learn optimises ``log(o)``, which is
        the softmax (``M = 2``: logit) parameterisation (see the User Guide). A scalar with more
        than two activations ties the odds of the first ``M - 1`` components (one
        hyperparameter); pass an array for independent ones. Ignored for one activation.
    activations : tuple, default=("tanh", "leaky_relu")
        See :func:`mixed_activation_kernel`. Not a hyperparameter.
    sigma_b2_bounds, sigma_v2_bounds, sigma_u2_bounds, sigma_a2_bounds : pair of floats or \
"fixed", default=(1e-5, 1e5)
    leaky_slope_bounds : pair of floats in (0, 1) or "fixed", default=(1e-4, 0.9999)
        Keep ``alpha < 1``: ``alpha`` and ``1/alpha`` give the same kernel up to scale (A15).
    mix_odds_bounds : pair of floats or "fixed", default=(1e-6, 1e6)

    Attributes
    ----------
    weights : ndarray of shape (n_activations,)
        The mixture weights implied by ``mix_odds`` (sum to one).

    See Also
    --------
    mixed_activation_kernel : the torch function behind this kernel.
    skbnngp.MixedActivationGPRegressor : MAP fit with exact or Nystrom inference.

    Notes
    -----
    The kernel is evaluated in torch float64 on the CPU. ``eval_gradient=True`` returns
    ``dK/dlog(theta)`` from forward-mode autograd, one pass per free hyperparameter (in the
    order of :attr:`hyperparameters`, which scikit-learn sorts by name).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process import GaussianProcessRegressor
    >>> from sklearn.gaussian_process.kernels import WhiteKernel
    >>> from skbnngp.kernels import MixedActivationKernel
    >>> X = np.linspace(-0.5, 0.5, 12).reshape(-1, 1)
    >>> kernel = MixedActivationKernel() + WhiteKernel(1e-2)
    >>> gpr = GaussianProcessRegressor(kernel, random_state=0).fit(X, np.sin(6 * X[:, 0]))
    >>> gpr.predict(X[:2]).shape
    (2,)
    """

    def __init__(self, sigma_b2=1.0, sigma_v2=1.0, sigma_u2=1.0, sigma_a2=1.0, leaky_slope=0.5,
                 mix_odds=1.0, activations=("tanh", "leaky_relu"),
                 sigma_b2_bounds=(1e-5, 1e5), sigma_v2_bounds=(1e-5, 1e5),
                 sigma_u2_bounds=(1e-5, 1e5), sigma_a2_bounds=(1e-5, 1e5),
                 leaky_slope_bounds=(1e-4, 0.9999), mix_odds_bounds=(1e-6, 1e6)):
        self.sigma_b2 = sigma_b2
        self.sigma_v2 = sigma_v2
        self.sigma_u2 = sigma_u2
        self.sigma_a2 = sigma_a2
        self.leaky_slope = leaky_slope
        self.mix_odds = mix_odds
        self.activations = activations
        self.sigma_b2_bounds = sigma_b2_bounds
        self.sigma_v2_bounds = sigma_v2_bounds
        self.sigma_u2_bounds = sigma_u2_bounds
        self.sigma_a2_bounds = sigma_a2_bounds
        self.leaky_slope_bounds = leaky_slope_bounds
        self.mix_odds_bounds = mix_odds_bounds

    # hyperparameters (scikit-learn discovers the ``hyperparameter_*`` properties)
    @property
    def hyperparameter_sigma_b2(self):
        return Hyperparameter("sigma_b2", "numeric", self.sigma_b2_bounds)

    @property
    def hyperparameter_sigma_v2(self):
        return Hyperparameter("sigma_v2", "numeric", self.sigma_v2_bounds)

    @property
    def hyperparameter_sigma_u2(self):
        return Hyperparameter("sigma_u2", "numeric", self.sigma_u2_bounds)

    @property
    def hyperparameter_sigma_a2(self):
        return Hyperparameter("sigma_a2", "numeric", self.sigma_a2_bounds)

    @property
    def hyperparameter_leaky_slope(self):
        bounds = self.leaky_slope_bounds if "leaky_relu" in self.activations else "fixed"
        return Hyperparameter("leaky_slope", "numeric", bounds)

    @property
    def hyperparameter_mix_odds(self):
        if len(self.activations) == 1:
            return Hyperparameter("mix_odds", "numeric", "fixed")
        return Hyperparameter("mix_odds", "numeric", self.mix_odds_bounds,
                              int(np.size(self.mix_odds)))

    @property
    def weights(self):
        return to_numpy(self._weights(self._odds()))

    def _odds(self):
        n = len(self.activations) - 1
        odds = np.atleast_1d(np.asarray(self.mix_odds, dtype=np.float64))
        if odds.size == 1 and n > 1:
            odds = np.repeat(odds, n)
        if n and (odds.shape != (n,) or not np.all(odds > 0) or not np.all(np.isfinite(odds))):
            raise ValueError(f"mix_odds must hold {n} positive finite value(s), got "
                             f"{self.mix_odds!r}.")
        return torch.as_tensor(odds[:n], dtype=torch.float64)

    @staticmethod
    def _weights(odds):
        full = torch.cat([odds, torch.ones(1, dtype=odds.dtype)])
        return full / full.sum()

    def is_stationary(self):
        """Returns False: the kernel depends on the norms of the inputs, not only x - x'."""
        return False

    def _evaluate(self, X, Y, values, odds, diag=False):
        return mixed_activation_kernel(X, Y, weights=self._weights(odds),
                                       activations=tuple(self.activations), diag=diag,
                                       **values)

    def _values(self):
        return {k: torch.tensor(float(getattr(self, k)), dtype=torch.float64) for k in _SCALARS}

    def __call__(self, X, Y=None, eval_gradient=False):
        """Return the kernel ``k(X, Y)`` and optionally its gradient.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        Y : array-like of shape (n_samples_Y, n_features), default=None
            ``None`` evaluates ``k(X, X)``.
        eval_gradient : bool, default=False
            Also return ``dK/dlog(theta)`` for the free hyperparameters (only when ``Y`` is
            None).

        Returns
        -------
        K : ndarray of shape (n_samples_X, n_samples_Y)
        K_gradient : ndarray of shape (n_samples_X, n_samples_X, n_dims), optional
        """
        if eval_gradient and Y is not None:
            raise ValueError("Gradient can only be evaluated when Y is None.")
        Xt = as_tensor(np.asarray(X, dtype=np.float64), _CPU, torch.float64)
        Yt = None if Y is None else as_tensor(np.asarray(Y, dtype=np.float64), _CPU,
                                              torch.float64)
        values, odds = self._values(), self._odds()
        with torch.no_grad():
            K = to_numpy(self._evaluate(Xt, Yt, values, odds))
        if not eval_gradient:
            return K
        grads = []
        for hp in self.hyperparameters:  # sorted by name, as scikit-learn's theta
            if hp.fixed:
                continue
            if hp.name == "mix_odds" and hp.n_elements > 1:
                eye = torch.eye(odds.numel(), dtype=torch.float64)
                tangents = [(None, odds * eye[i]) for i in range(odds.numel())]
            elif hp.name == "mix_odds":  # one (possibly tied) odds value
                tangents = [(None, odds.clone())]
            else:
                tangents = [(hp.name, values[hp.name].clone())]
            for name, tangent in tangents:
                with fwAD.dual_level(), torch.no_grad():
                    vals, od = dict(values), odds
                    if name is None:
                        od = fwAD.make_dual(odds, tangent)
                    else:
                        vals[name] = fwAD.make_dual(values[name], tangent)
                    out = self._evaluate(Xt, None, vals, od)
                    grads.append(to_numpy(fwAD.unpack_dual(out).tangent))
        n = Xt.shape[0]
        return K, (np.stack(grads, axis=2) if grads else np.empty((n, n, 0)))

    def diag(self, X):
        """Return ``k(X, X)``'s diagonal from the closed forms, without forming the matrix.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        K_diag : ndarray of shape (n_samples,)
        """
        Xt = as_tensor(np.asarray(X, dtype=np.float64), _CPU, torch.float64)
        with torch.no_grad():
            return to_numpy(self._evaluate(Xt, None, self._values(), self._odds(), diag=True))

    def __repr__(self):
        w = ", ".join(f"{x:.3g}" for x in self.weights)
        return (f"{type(self).__name__}(sigma_b2={self.sigma_b2:.3g}, "
                f"sigma_v2={self.sigma_v2:.3g}, sigma_u2={self.sigma_u2:.3g}, "
                f"sigma_a2={self.sigma_a2:.3g}, leaky_slope={self.leaky_slope:.3g}, "
                f"weights=[{w}], activations={tuple(self.activations)!r})")
