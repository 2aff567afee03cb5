"""scikit-learn's estimator checks over every public estimator, discovered automatically.

Each expected failure is a one-sentence reason kept on the estimator class in
``_expected_failed_checks`` (a dict ``{check_name: reason}``); an estimator without that
attribute is expected to pass every check.
"""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbnngp.utils import all_estimators

# the checks fit with few iterations on purpose
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

#: Small, fast settings per estimator (the checks fit dozens of tiny models).
FAST = {
    "StudentTProcessRegressor": dict(max_iter=15, device="cpu"),
    "StudentTProcessClassifier": dict(max_iter=15, device="cpu"),
    "MixedActivationGPRegressor": dict(n_anchors=20, max_iter=15, device="cpu"),
    "DBKRegressor": dict(n_basis=8, hidden_layer_sizes=(16,), max_iter=30, device="cpu"),
    "RichBLLRegressor": dict(hidden_layer_sizes=(16,), max_iter=30, device="cpu"),
    "FiDGPClassifier": dict(hidden_layer_sizes=(16,), max_iter=60, batch_size=256,
                            learning_rate_init=2e-2, device="cpu"),
}


#: Further configurations worth the whole check list (another inference mode ...).
EXTRA = {
    "DBKRegressor": [dict(FAST["DBKRegressor"], inference="svi", batch_size=16,
                          learning_rate_init=1e-2)],
}


def _instances():
    for name, Est in all_estimators():
        yield Est(**FAST.get(name, {}))
        for params in EXTRA.get(name, []):
            yield Est(**params)


def _expected_failed_checks(estimator):
    return dict(getattr(type(estimator), "_expected_failed_checks", {}))


@parametrize_with_checks(list(_instances()), expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


def test_every_public_estimator_is_checked():
    names = {name for name, _ in all_estimators()}
    assert {"StudentTProcessRegressor", "StudentTProcessClassifier"} <= names
    assert set(FAST) <= names
