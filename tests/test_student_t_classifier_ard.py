"""StudentTProcessClassifier's ``ard="auto"``: ARD relevances are kept only when the
paired leave-one-out class log losses say they pay (issue 20)."""

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.preprocessing import StandardScaler

from skbnngp import StudentTProcessClassifier


def _data(n, n_features, n_informative, seed):
    X, y = make_classification(n, n_features, n_informative=n_informative, n_redundant=0,
                               n_classes=2, class_sep=0.8, random_state=seed)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def irrelevant():
    # two informative features among eight: the shared kernel weighs six noise features
    # as much as the signal, and per-feature relevances should help clearly
    return _data(160, 8, 2, 0)


def _fit(X, y, **kw):
    return StudentTProcessClassifier(device="cpu", random_state=0, **kw).fit(X, y)


def test_auto_takes_ard_where_features_are_irrelevant_and_matches_the_explicit_fits(irrelevant):
    X, y = irrelevant
    auto, shared, ard = _fit(X, y), _fit(X, y, ard=False), _fit(X, y, ard=True)
    gain, se = auto.ard_loo_gain_
    # the gain is the difference of the two fits' mean leave-one-out log losses
    assert gain == pytest.approx(shared.loo_log_loss_ - ard.loo_log_loss_, rel=1e-6, abs=1e-9)
    assert 0 < se < gain / 2
    assert auto.ard_ and ard.ard_ and not shared.ard_
    # the chosen model is the explicit ARD fit
    np.testing.assert_allclose(auto.predict_proba(X), ard.predict_proba(X), rtol=1e-6)
    assert auto.loo_log_loss_ == pytest.approx(ard.loo_log_loss_)
    # and the relevances single out the two informative features
    rel = auto.regressor_.relevance_
    assert np.all(np.sort(rel)[-2:] > 10 * np.max(np.sort(rel)[:-2]))


def test_auto_keeps_the_shared_kernel_without_a_clear_gain():
    # every feature informative: ARD has nothing to find, its gain is not two standard
    # errors above zero, and the shared kernel is kept
    X, y = _data(120, 3, 3, 1)
    auto, shared = _fit(X, y), _fit(X, y, ard=False)
    gain, se = auto.ard_loo_gain_
    assert not gain > 2 * se
    assert not auto.ard_
    np.testing.assert_allclose(auto.predict_proba(X), shared.predict_proba(X), rtol=1e-6)


def test_auto_rejects_a_degenerate_ard_fit(irrelevant, monkeypatch):
    X, y = irrelevant
    monkeypatch.setattr(StudentTProcessClassifier, "_degenerate",
                        lambda self, fit: bool(fit["reg"].ard_))
    auto = _fit(X, y)
    gain, se = auto.ard_loo_gain_
    assert gain > 2 * se  # ARD would have won on the losses alone
    assert not auto.ard_


@pytest.mark.parametrize(("alpha_evidence", "bounds", "expected"), [
    (1e-6, ["bias_variance=10 (upper bound)"], True),
    (1e-6, ["alpha=1e-06 (lower bound)"], False),  # the LOO grid's choice, not a runaway
    (1e-6, [], False),
    (0.3, ["bias_variance=10 (upper bound)"], False),
])
def test_degenerate_needs_the_noise_floor_and_a_kernel_bound(alpha_evidence, bounds, expected):
    clf = StudentTProcessClassifier()
    assert clf._degenerate({"alpha_evidence": alpha_evidence, "bounds": bounds}) is expected


@pytest.mark.parametrize("kw", [{"ard": False}, {"ard": True}, {"ard": np.True_},
                                {"alpha_selection": "evidence"}])
def test_no_comparison_without_auto_or_loo(irrelevant, kw):
    X, y = irrelevant
    clf = _fit(X[:80], y[:80], **kw)
    assert clf.ard_loo_gain_ is None
    assert clf.ard_ is bool(kw.get("ard", False))


def test_one_feature_needs_no_comparison(irrelevant):
    X, y = irrelevant
    clf = _fit(X[:80, :1], y[:80])
    assert clf.ard_loo_gain_ is None and not clf.ard_


def test_ard_rejects_other_strings(irrelevant):
    X, y = irrelevant
    with pytest.raises(ValueError, match="ard"):
        _fit(X, y, ard="yes")


def test_coarse_to_fine_alpha_search_finds_the_full_grid_minimum(irrelevant, monkeypatch):
    X, y = irrelevant
    fitted = {}
    for stride in (1, 4):
        monkeypatch.setattr(StudentTProcessClassifier, "_loo_coarse", stride)
        fitted[stride] = _fit(X, y, ard=False)
    full, fast = fitted[1], fitted[4]
    # the same grid point and label noise are chosen (values from the grids); the scores
    # and probabilities agree to round-off (two fits, whose BLAS sums may round differently)
    assert fast.regressor_.hyperparameters_["alpha"] == full.regressor_.hyperparameters_["alpha"]
    assert fast.label_noise_ == full.label_noise_
    assert fast.loo_log_loss_ == pytest.approx(full.loo_log_loss_, rel=1e-9)
    np.testing.assert_allclose(fast.predict_proba(X), full.predict_proba(X), rtol=1e-9,
                               atol=1e-12)


def test_coarse_to_fine_search_scores_fewer_points(irrelevant, monkeypatch):
    X, y = irrelevant
    calls = {}
    orig = StudentTProcessClassifier._loo_alpha

    def counting(self, reg, yi, fixed_w=None):
        import skbnngp._student_t as mod
        real, n = mod._argmax_proba, [0]

        def wrapped(*a, **k):
            n[0] += 1
            return real(*a, **k)

        monkeypatch.setattr(mod, "_argmax_proba", wrapped)
        try:
            return orig(self, reg, yi, fixed_w)
        finally:
            monkeypatch.setattr(mod, "_argmax_proba", real)
            calls[self._loo_coarse] = n[0]

    monkeypatch.setattr(StudentTProcessClassifier, "_loo_alpha", counting)
    for stride in (1, 4):
        monkeypatch.setattr(StudentTProcessClassifier, "_loo_coarse", stride)
        _fit(X, y, ard=False, label_variance=0.0)  # the alpha search alone
    # 37 grid points (4 a decade over 1e-6..1e3), plus the evidence's value unless on one
    assert calls[1] in (37, 38)
    assert calls[4] <= 20


def test_auto_falls_back_to_the_shared_kernel_without_leave_one_out_scores(irrelevant,
                                                                         monkeypatch):
    # a grid on which every leave-one-out loss is non-finite gives no per-row scores
    X, y = irrelevant
    orig = StudentTProcessClassifier._loo_alpha

    def no_scores(self, reg, yi, fixed_w=None):
        out = orig(self, reg, yi, fixed_w)
        return (out[0], None, 0.0, None, out[4]) if reg.ard_ else out

    monkeypatch.setattr(StudentTProcessClassifier, "_loo_alpha", no_scores)
    clf = _fit(X[:80], y[:80])
    assert clf.ard_loo_gain_ is None and not clf.ard_
    assert np.all(np.isfinite(clf.predict_proba(X)))


@pytest.mark.parametrize("keep_ard", [False, True])
def test_only_the_kept_fits_warnings_reach_the_user(irrelevant, monkeypatch, keep_ard):
    import warnings

    from skbnngp import StudentTProcessRegressor

    X, y = irrelevant
    orig_fit = StudentTProcessRegressor.fit

    def noisy_fit(self, X, y):
        out = orig_fit(self, X, y)
        warnings.warn(f"fit with ard={self.ard}", UserWarning)
        return out

    monkeypatch.setattr(StudentTProcessRegressor, "fit", noisy_fit)
    monkeypatch.setattr(StudentTProcessClassifier, "_ard_z", 2.0 if keep_ard else np.inf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = _fit(X, y)
    assert clf.ard_ is keep_ard
    messages = [str(w.message) for w in caught if w.category is UserWarning]
    assert messages == [f"fit with ard={keep_ard}"]


def test_auto_keeps_the_shared_kernel_when_both_predict_alike():
    # labels independent of X: both kernels predict about 1/2 everywhere, so their paired
    # differences (and the standard error) are tiny; a negligible gain must not pick ARD
    rng = np.random.RandomState(0)
    X, y = rng.randn(40, 5), np.array([0, 1] * 20)
    clf = _fit(X, y)
    gain, _ = clf.ard_loo_gain_
    assert abs(gain) < 1e-3
    assert not clf.ard_


def test_default_quadrature_matches_a_fine_one():
    # 16 Gauss-Hermite and scale nodes (the default) against 64: the probabilities agree to
    # well below what the benchmark's NLL or ECE can resolve
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clf = _fit(X[::2], y[::2])
    coarse = clf.predict_proba(X)
    fine = clf.set_params(n_quadrature=64).predict_proba(X)
    assert clf.get_params()["n_quadrature"] == 64
    assert StudentTProcessClassifier().n_quadrature == 16
    np.testing.assert_allclose(coarse, fine, atol=5e-4)
    # and a crude rule (4 nodes) is visibly worse, so the check can fail
    crude = clf.set_params(n_quadrature=4).predict_proba(X)
    assert np.abs(crude - fine).max() > 5 * np.abs(coarse - fine).max()
