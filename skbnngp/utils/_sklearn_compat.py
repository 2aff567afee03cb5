"""The only place where scikit-learn private helpers are imported (pinned: scikit-learn>=1.6)."""

from sklearn.base import _fit_context  # noqa: F401
from sklearn.utils._param_validation import (  # noqa: F401
    HasMethods, Interval, Options, StrOptions, validate_params,
)
from sklearn.utils.validation import check_is_fitted, validate_data  # noqa: F401
