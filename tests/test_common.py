"""scikit-learn's estimator checks over every public estimator, discovered automatically.

Each expected failure is a one-sentence reason kept on the estimator class in
``_expected_failed_checks`` (a dict ``{check_name: reason}``); an estimator without that
attribute is expected to pass every check.
"""

import pytest
from sklearn.linear_model import Ridge
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbnngp import ConformalRegressor, StudentTProcessRegressor
from skbnngp.utils import all_estimators

from .conftest import EXTRA, FAST

# the checks fit with few iterations on purpose
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

def _instances():
    for name, Est in all_estimators():
        yield Est(**FAST.get(name, {}))
        for params in EXTRA.get(name, []):
            yield Est(**params)
    # the meta-estimator, around a fast model, by each of its methods
    fast = StudentTProcessRegressor(**FAST["StudentTProcessRegressor"])
    yield ConformalRegressor(fast, random_state=0)
    yield ConformalRegressor(fast, method="cv+", cv=3)
    # around a point predictor: absolute residuals
    yield ConformalRegressor(Ridge(), method="cv+", cv=3)


def _expected_failed_checks(estimator):
    return dict(getattr(type(estimator), "_expected_failed_checks", {}))


@parametrize_with_checks(list(_instances()), expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_every_public_estimator_is_checked():
    names = {name for name, _ in all_estimators()}
    assert {"StudentTProcessRegressor", "StudentTProcessClassifier"} <= names
    assert set(FAST) <= names
