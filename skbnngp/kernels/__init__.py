"""Neural-network Gaussian-process kernels (pure torch) and their scikit-learn adapters.

The torch functions (:func:`nngp_kernel`, :func:`ntk_kernel`, :func:`layer_variances`,
:func:`nngp_kernel_block`) take tensors on any device and dtype and are differentiable in the
hyperparameters; the activation objects give the Gaussian moments ``E[phi(u) phi(v)]`` they are
built from; :class:`NNGPKernel` and :class:`NTKKernel` plug them into
:class:`sklearn.gaussian_process.GaussianProcessRegressor`. The single-hidden-layer kernels
of the mixed-activation GP (:func:`mixed_activation_kernel`, :class:`MixedActivationKernel`) reuse
the same
activation objects.
"""

from ._activations import (
    Activation,
    Erf,
    LeakyReLU,
    QuadratureActivation,
    ReLU,
    Sigmoid,
    Tanh,
    gauss_hermite,
    get_activation,
)
from ._nngp import layer_variances, nngp_kernel, nngp_kernel_block, ntk_kernel
from ._sklearn import NNGPKernel, NTKKernel

__all__ = [
    "nngp_kernel",
    "ntk_kernel",
    "layer_variances",
    "nngp_kernel_block",
    "get_activation",
    "gauss_hermite",
    "Activation",
    "ReLU",
    "LeakyReLU",
    "Erf",
    "QuadratureActivation",
    "Tanh",
    "Sigmoid",
    "NNGPKernel",
    "NTKKernel",
]

# Mixed-activation GP: one-hidden-layer activation kernels, their mixture, sklearn adapter.
from ._mixture import (  # noqa: E402
    PAPER_ACTIVATIONS,
    MixedActivationKernel,
    activation_kernel,
    mixed_activation_kernel,
    preactivation_covariances,
)

__all__ += [
    "PAPER_ACTIVATIONS",
    "preactivation_covariances",
    "activation_kernel",
    "mixed_activation_kernel",
    "MixedActivationKernel",
]
