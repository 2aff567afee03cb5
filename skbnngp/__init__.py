"""skbnngp: scikit-learn compatible Bayesian neural-network / Gaussian-process estimators.

All heavy kernel and linear-algebra work runs in PyTorch on the ``device`` the user picks;
NumPy arrays go in and come out.
"""

__version__ = "0.1.0.dev0"

# The estimators are imported on first use (PEP 562), so that ``import skbnngp`` and
# ``skbnngp --help`` do not load torch and scikit-learn.
_ESTIMATORS = {
    "StudentTProcessRegressor": "._student_t",
    "StudentTProcessClassifier": "._student_t_classifier",
    "MixedActivationGPRegressor": "._mixed_activation",
    "DBKRegressor": "._dbk",
    "RichBLLRegressor": "._rich_bll",
    "FiDGPClassifier": "._fidgp",
    "ConformalRegressor": "._conformal",
}

__all__ = [
    "StudentTProcessRegressor",
    "StudentTProcessClassifier",
    "MixedActivationGPRegressor",
    "DBKRegressor",
    "RichBLLRegressor",
    "FiDGPClassifier",
    "ConformalRegressor",
    "__version__",
]


def __getattr__(name):
    # Submodules (``skbnngp.kernels``, ``skbnngp.metrics``, ``skbnngp.datasets`` ...) are
    # imported on first access so that ``import skbnngp`` stays light.
    import importlib

    if name in _ESTIMATORS:
        value = getattr(importlib.import_module(_ESTIMATORS[name], __name__), name)
        globals()[name] = value
        return value
    if name in {"kernels", "metrics", "datasets", "distributions", "exceptions", "utils",
                "compare", "model_selection"}:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'skbnngp' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_ESTIMATORS))
