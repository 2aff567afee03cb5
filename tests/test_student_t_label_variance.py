"""StudentTProcessClassifier's ``label_variance``: the variance ``p (1 - p)`` of a one-hot
target added per class to the predictive of ``predict_proba``, its weight chosen by
leave-one-out (issue 20)."""

import pickle

import numpy as np
import pytest
import torch
from scipy.stats import norm
from sklearn.datasets import make_classification

from skbnngp import StudentTProcessClassifier
from skbnngp._student_t import _argmax_proba, _label_variance


def _proba(mu, V, nodes, extra=None, n=32):
    return _argmax_proba(mu, V, nodes, n, "cpu", torch.float64, extra=extra).numpy()


def test_two_classes_match_the_closed_form():
    """Binary: P(y_1 > y_0) = Phi((mu_1 - mu_0) / sqrt(var_0 + var_1)) at each scale node,
    averaged over the nodes; unequal per-class variances included."""
    rng = np.random.default_rng(0)
    mu = rng.uniform(-0.2, 1.2, size=(40, 2))
    V = rng.uniform(0.01, 0.5, size=40)
    extra = rng.uniform(0.0, 0.3, size=(40, 2))
    nodes = np.array([0.4, 1.0, 2.5])
    P = _proba(mu, V, nodes, extra)
    expected = np.mean([norm.cdf((mu[:, 1] - mu[:, 0])
                                 / np.sqrt(2 * s * V + extra[:, 0] + extra[:, 1]))
                        for s in nodes], axis=0)
    np.testing.assert_allclose(P[:, 1], expected, atol=1e-7)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-7)


def test_three_classes_match_monte_carlo():
    rng = np.random.default_rng(1)
    mu = np.array([[0.6, 0.3, 0.1], [0.45, 0.5, 0.05], [0.9, 0.05, 0.05]])
    V = np.array([0.05, 0.2, 0.01])
    extra = 0.5 * _label_variance(mu, 0.0)
    P = _proba(mu, V, np.array([1.0]), extra)
    draws = mu + np.sqrt(V[:, None] + extra) * rng.standard_normal((400_000, 3, 3))
    mc = np.stack([(draws.argmax(-1) == c).mean(0) for c in range(3)], axis=1)
    np.testing.assert_allclose(P, mc, atol=4e-3)  # 400k draws: sd at most 8e-4


def test_zero_extra_is_the_shared_variance_rule():
    rng = np.random.default_rng(2)
    mu, V = rng.normal(size=(30, 4)), rng.uniform(0.05, 1.0, size=30)
    nodes = np.array([0.5, 1.5])
    np.testing.assert_allclose(_proba(mu, V, nodes, np.zeros((30, 4))), _proba(mu, V, nodes),
                               rtol=1e-12, atol=1e-14)


def test_label_variance_of_both_codings():
    mu = np.array([-0.3, 0.0, 0.25, 0.5, 1.0, 1.4])
    np.testing.assert_allclose(_label_variance(mu, 0.0), [0, 0, 0.1875, 0.25, 0, 0])
    np.testing.assert_allclose(_label_variance(mu - 0.1, -0.1), _label_variance(mu, 0.0))
    assert torch.is_tensor(_label_variance(torch.as_tensor(mu), 0.0))


def _fit(X, y, **kw):
    return StudentTProcessClassifier(device="cpu", random_state=0, **kw).fit(X, y)


@pytest.fixture(scope="module")
def overlapping():
    return make_classification(300, 4, n_informative=3, n_redundant=0, n_classes=3,
                               n_clusters_per_class=1, class_sep=0.5, random_state=0)


def test_auto_takes_a_weight_where_classes_overlap_and_lowers_the_loo_loss(overlapping):
    X, y = overlapping
    auto, none = _fit(X, y), _fit(X, y, label_variance=0.0)
    assert none.label_variance_ == 0.0
    assert auto.label_variance_ in StudentTProcessClassifier._label_variance_grid
    assert auto.label_variance_ > 0
    # the alpha search is the same; the weight is then chosen at that alpha, where 0 is on
    # the grid, so the leave-one-out loss cannot rise
    assert auto.loo_log_loss_ < none.loo_log_loss_
    # the extra variance softens the most confident predictions near the boundary
    Pa, Pn = auto.predict_proba(X), none.predict_proba(X)
    assert Pa.max(axis=1).mean() < Pn.max(axis=1).mean()


def test_auto_keeps_zero_on_separated_classes():
    X, y = make_classification(150, 3, n_informative=2, n_redundant=0, class_sep=3.0,
                               random_state=1)
    auto, none = _fit(X, y), _fit(X, y, label_variance=0.0)
    assert auto.label_variance_ == 0.0
    np.testing.assert_array_equal(auto.predict_proba(X), none.predict_proba(X))


def test_fixed_weight_is_used_and_evidence_selection_means_zero(overlapping):
    X, y = overlapping
    assert _fit(X, y, label_variance=0.5, ard=False).label_variance_ == 0.5
    assert _fit(X, y, alpha_selection="evidence", ard=False).label_variance_ == 0.0


@pytest.mark.parametrize("bad", [-0.1, "loo", None])
def test_bad_label_variance_is_refused(overlapping, bad):
    X, y = overlapping
    with pytest.raises((ValueError, TypeError), match="label_variance"):
        _fit(X[:40], y[:40], label_variance=bad)


def test_pickles_from_before_the_parameter_load_as_weight_zero(overlapping):
    X, y = overlapping
    clf = _fit(X, y, label_variance=0.0, ard=False)
    state = clf.__getstate__()
    state.pop("label_variance")
    state.pop("label_variance_")
    old = StudentTProcessClassifier.__new__(StudentTProcessClassifier)
    old.__setstate__(state)
    assert old.get_params()["label_variance"] == 0.0
    np.testing.assert_array_equal(old.predict_proba(X), clf.predict_proba(X))
    again = pickle.loads(pickle.dumps(old))
    np.testing.assert_array_equal(again.predict_proba(X), clf.predict_proba(X))
