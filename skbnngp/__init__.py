"""skbnngp: scikit-learn compatible Bayesian neural-network / Gaussian-process estimators.

All heavy kernel and linear-algebra work runs in PyTorch on the ``device`` the user picks;
NumPy arrays go in and come out.
"""

__version__ = "0.1.0.dev0"

from ._dbk import DBKRegressor  # noqa: E402
from ._fidgp import FiDGPClassifier  # noqa: E402
from ._mixed_activation import MixedActivationGPRegressor  # noqa: E402
from ._rich_bll import RichBLLRegressor  # noqa: E402
from ._student_t import StudentTProcessClassifier, StudentTProcessRegressor  # noqa: E402

__all__ = [
    "StudentTProcessRegressor",
    "StudentTProcessClassifier",
    "MixedActivationGPRegressor",
    "DBKRegressor",
    "RichBLLRegressor",
    "FiDGPClassifier",
    "__version__",
]


def __getattr__(name):
    # Submodules (``skbnngp.kernels``, ``skbnngp.metrics``, ``skbnngp.datasets`` ...) are
    # imported on first access so that ``import skbnngp`` stays light.
    import importlib

    if name in {"kernels", "metrics", "datasets", "distributions", "exceptions", "utils"}:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'skbnngp' has no attribute {name!r}")
