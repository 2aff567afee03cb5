"""Warnings raised by skbnngp.

:class:`~sklearn.exceptions.ConvergenceWarning` (scikit-learn's own) is used when an
optimiser stops before converging; the classes below cover the rest.
"""


class NumericalWarning(RuntimeWarning):
    """A numerical fix was applied: jitter added to a matrix, variances clipped, ...

    The message says what was done and how much.
    """


class DeviceWarning(UserWarning):
    """A fitted model was moved to another device (for example CUDA -> CPU on unpickling)."""


class HeavyTailWarning(UserWarning):
    """A predictive has no finite variance (a Student-t with at most 2 degrees of freedom),
    so a requested standard deviation or covariance is infinite; its intervals
    (``predict_dist(X).interval(level)``) are finite."""


class NumericalError(ValueError):
    """A matrix could not be factorised even after the largest jitter was added.

    Subclasses :class:`ValueError` so callers that catch bad input also catch it.
    """


__all__ = ["NumericalWarning", "DeviceWarning", "HeavyTailWarning", "NumericalError"]
