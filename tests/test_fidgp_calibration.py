"""FiDGPClassifier's post-hoc temperature scaling: the tempered NLL and its minimiser, the
held-out split, ``refit`` and ``calibration="auto"``."""

import pickle
import warnings
from unittest.mock import patch

import numpy as np
import pytest
from sklearn.datasets import load_iris

from skbnngp import FiDGPClassifier, _fidgp
from skbnngp._backend._calibration import (
    LOG_T_PRIOR_SD,
    LOG_T_PRIOR_SD_ABOVE,
    LOG_T_RANGE,
    fit_temperature,
    log_temperature_prior,
    tempered_nll,
)
from skbnngp._fidgp import _warm_epochs, train_batch_size
from skbnngp._rows import collapse_rows

from ._promise import assert_same_labels, assert_same_predictions

pytest.importorskip("zuko")
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

SMALL = {"hidden_layer_sizes": (8,), "max_iter": 6, "batch_size": 50, "random_state": 0,
         "device": "cpu", "dtype": "float64"}


def _softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def fitted():
    X, y = load_iris(return_X_y=True)
    clf = FiDGPClassifier(calibration="temperature", refit=False, validation_fraction=0.2,
                          **SMALL).fit(X, y)
    return pickle.dumps(clf), X, y


# ============================================================ the NLL and its minimiser
def test_tempered_nll_is_the_log_of_the_averaged_softmax():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 40, 3)) * 3
    y = rng.integers(0, 3, 40)
    for t in (0.3, 1.0, 4.0):
        p = _softmax(logits / t).mean(axis=0)
        want = -np.mean(np.log(p[np.arange(40), y]))
        assert tempered_nll(logits, y, t) == pytest.approx(want, rel=1e-12)


def test_fitted_temperature_minimises_the_nll_against_a_grid():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 300, 4)) * 5
    # labels from a softer predictive than the logits': an interior optimum above 1
    p = _softmax(logits.mean(axis=0) / 3)
    y = (rng.random(300)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    t, nll = fit_temperature(logits, y, prior_sd=None)
    grid = np.exp(np.linspace(*LOG_T_RANGE, 2001))
    losses = np.array([tempered_nll(logits, y, g) for g in grid])
    assert nll == pytest.approx(tempered_nll(logits, y, t), rel=1e-12)
    assert nll <= losses.min() + 1e-9
    assert 1 < t < np.exp(LOG_T_RANGE[1]) / 2
    # the grid's minimiser is within one grid step (in log T) of the fitted T
    step = (LOG_T_RANGE[1] - LOG_T_RANGE[0]) / 2000
    assert abs(np.log(grid[np.argmin(losses)]) - np.log(t)) <= 2 * step


@pytest.mark.parametrize("t_true", [0.5, 2.0])
def test_fitted_temperature_recovers_the_temperature_labels_were_drawn_at(t_true):
    # labels drawn from softmax(z / t_true): the NLL's population minimiser is t_true; with
    # 20,000 rows its standard error in log T is about 0.01, so 0.1 is a wide margin
    rng = np.random.default_rng(2)
    z = rng.normal(size=(1, 20000, 3)) * 3
    p = _softmax(z[0] / t_true)
    y = (rng.random(20000)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    t, _ = fit_temperature(z, y)  # the prior weighs 1 / 20,000 of the likelihood
    assert abs(np.log(t / t_true)) < 0.1


def test_temperature_prior_keeps_t_away_from_zero_when_validation_is_all_right():
    # every row right with margin 3: the likelihood alone decreases as T -> 0
    logits = np.zeros((1, 15, 3))
    logits[0, :, 0] = 3.0
    y = np.zeros(15, dtype=int)
    t_mle, _ = fit_temperature(logits, y, prior_sd=None)
    assert t_mle < 0.1  # the flat likelihood leaves it near the range's lower end
    t, _ = fit_temperature(logits, y)
    # the posterior mode: d/dv [n * nll(e^v)] + v / sd^2 = 0 (checked on a grid)
    grid = np.linspace(*LOG_T_RANGE, 4001)
    obj = [15 * tempered_nll(logits, y, np.exp(v)) + 0.5 * v * v / LOG_T_PRIOR_SD**2
           for v in grid]
    assert abs(np.log(t) - grid[int(np.argmin(obj))]) < 2 * (grid[1] - grid[0])
    assert 0.2 < t < 1


def _overconfident(n, seed=3, t_true=2.5):
    """Logits (1, n, 4) and labels drawn from softmax(logits / t_true): an over-confident
    predictive whose plain fit is near ``t_true``."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(1, n, 4)) * 3
    p = _softmax(z[0] / t_true)
    return z, (rng.random(n)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)


def test_log_temperature_prior_is_wider_above_one():
    assert log_temperature_prior(0.0) == 0.0
    assert log_temperature_prior(-0.7) == pytest.approx(0.5 * 0.49 / LOG_T_PRIOR_SD**2)
    assert log_temperature_prior(0.7) == pytest.approx(0.5 * 0.49 / LOG_T_PRIOR_SD_ABOVE**2)
    assert LOG_T_PRIOR_SD_ABOVE > LOG_T_PRIOR_SD
    assert log_temperature_prior(0.7, 0.5, None) == 0.0


def test_temperature_of_few_rows_is_pulled_toward_one_and_of_many_is_the_plain_fit():
    # few held-out rows (a handful per class): the posterior mode lies strictly between 1
    # and the plain fit, and nearer the plain fit than the symmetric N(0, 0.5^2) prior's
    z, y = _overconfident(24)
    t_mle, _ = fit_temperature(z, y, prior_sd=None)
    t, _ = fit_temperature(z, y)
    t_sym, _ = fit_temperature(z, y, prior_sd_above=LOG_T_PRIOR_SD)
    assert 1 < t_sym < t < t_mle
    # the same rows repeated: the prior's weight per row falls as 1 / n and the mode
    # converges to the plain fit (the relative shift in log T is about sd^-2 / (n I))
    zz, yy = np.tile(z, (1, 200, 1)), np.tile(y, 200)
    t_many, _ = fit_temperature(zz, yy)
    assert t_many == pytest.approx(t_mle, rel=2e-3)
    # and the mode solves the posterior on a grid
    grid = np.linspace(*LOG_T_RANGE, 4001)
    obj = [tempered_nll(z, y, np.exp(v)) + log_temperature_prior(v) / 24 for v in grid]
    assert abs(np.log(t) - grid[int(np.argmin(obj))]) < 2 * (grid[1] - grid[0])


def test_auto_batch_size_caps_the_steps_per_epoch():
    assert train_batch_size("auto", 50) == 50
    assert train_batch_size("auto", 800) == 100
    assert train_batch_size("auto", 1437) == 180  # digits' 5-fold training rows: 8 steps
    assert train_batch_size(32, 1437) == 32
    for n in (801, 1000, 5000, 60000):
        assert -(-n // train_batch_size("auto", n)) <= 8


# ============================================================ the estimator
def test_temperature_one_reproduces_the_uncalibrated_probabilities(fitted):
    blob, X, _ = fitted
    clf = pickle.loads(blob)
    T = clf.temperature_
    assert T != 1.0 and clf.validation_nll_ is not None
    logits = clf._draw_logits(clf._input(X), clf.n_predict_samples, clf._predict_seed)
    logits = logits.numpy()
    np.testing.assert_allclose(clf.predict_proba(X), _softmax(logits / T).mean(axis=0),
                               rtol=1e-10, atol=1e-12)
    clf.temperature_ = 1.0
    np.testing.assert_allclose(clf.predict_proba(X), _softmax(logits).mean(axis=0),
                               rtol=1e-10, atol=1e-12)


def test_temperature_changes_neither_the_draws_classes_nor_the_ood_score(fitted):
    blob, X, _ = fitted
    a, b = pickle.loads(blob), pickle.loads(blob)
    b.temperature_ = 1.0
    np.testing.assert_array_equal(a.sample_proba(X).argmax(axis=2),
                                  b.sample_proba(X).argmax(axis=2))
    np.testing.assert_array_equal(a.ood_score(X), b.ood_score(X))


def test_fitted_temperature_is_the_validation_minimiser(fitted):
    # refit the same split by hand: the network sees the training rows only, and T minimises
    # the NLL of the held-out rows under the prediction draws
    blob, X, y = fitted
    clf = pickle.loads(blob)
    # iris repeats one (x, y) row: the fit merges it into one row of weight 2 (sorted rows)
    X, y, w = collapse_rows(X, y, None)
    assert len(y) == 149 and w.max() == 2
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=4)
    train, val, w_train, w_val = clf._validation_split(y, 3, int(seeds[3]), X, w)
    np.testing.assert_array_equal(w_train, w[train])  # the repeated row stays whole
    np.testing.assert_array_equal(w_val, w[val])
    assert len(np.intersect1d(train, val)) == 0 and len(train) + len(val) == len(y)
    assert np.all(np.bincount(y[val], minlength=3) == 10)  # 20% of 50 (49) per class
    np.testing.assert_allclose(clf._X_offset, np.average(X[train], axis=0, weights=w[train]),
                               rtol=1e-12)
    logits = clf._draw_logits(clf._input(X[val]), clf.n_predict_samples,
                              clf._predict_seed).numpy()
    n_val = w[val].sum()
    grid = np.linspace(*LOG_T_RANGE, 801)
    obj = [tempered_nll(logits, y[val], np.exp(v), w[val]) + log_temperature_prior(v) / n_val
           for v in grid]
    v = np.log(clf.temperature_)
    mine = tempered_nll(logits, y[val], clf.temperature_, w[val]) \
        + log_temperature_prior(v) / n_val
    assert mine <= min(obj) + 1e-9
    assert clf.validation_nll_ == pytest.approx(tempered_nll(logits, y[val], clf.temperature_,
                                                             w[val]))


def test_no_calibration_keeps_every_row_and_temperature_one():
    X, y = load_iris(return_X_y=True)
    clf = FiDGPClassifier(calibration=None, **SMALL).fit(X, y)
    assert clf.temperature_ == 1.0 and clf.validation_nll_ is None
    np.testing.assert_allclose(clf._X_offset, X.mean(axis=0), rtol=1e-12)
    P = clf.sample_proba(X)
    np.testing.assert_allclose(clf.predict_proba(X), P.mean(axis=0), rtol=1e-10)


def test_refit_keeps_the_held_out_temperature_and_the_uncalibrated_network(fitted):
    # the held-out stage of refit=True is the refit=False fit (same split, same draws); the
    # final network is calibration=None's, trained on every row. Separate fits are compared
    # under the repeatability promise (tests/_promise.py), not bit for bit.
    blob, X, y = fitted
    held_out = pickle.loads(blob)
    params = {**SMALL, "validation_fraction": 0.2}
    refit = FiDGPClassifier(calibration="temperature", refit=True, **params).fit(X, y)
    plain = FiDGPClassifier(calibration=None, **params).fit(X, y)
    assert held_out.temperature_ != 1.0
    assert refit.temperature_ == pytest.approx(held_out.temperature_, rel=1e-8)
    assert refit.validation_nll_ == pytest.approx(held_out.validation_nll_, rel=1e-8)
    np.testing.assert_allclose(refit._X_offset, X.mean(axis=0), rtol=1e-12)
    assert_same_predictions(refit.ood_score(X), plain.ood_score(X), "float64", "ood_score")
    draws_refit, draws_plain = refit.sample_proba(X), plain.sample_proba(X)
    for d in range(draws_plain.shape[0]):  # the class of each draw, T aside
        assert_same_labels(draws_refit[d].argmax(axis=1), draws_plain[d].argmax(axis=1),
                           draws_plain[d], "float64", f"draw {d}")
    logits = refit._draw_logits(refit._input(X), refit.n_predict_samples,
                                refit._predict_seed).numpy()
    np.testing.assert_allclose(refit.predict_proba(X),
                               _softmax(logits / refit.temperature_).mean(axis=0),
                               rtol=1e-10, atol=1e-12)
    refit.temperature_ = 1.0
    assert_same_predictions(refit.predict_proba(X), plain.predict_proba(X), "float64",
                            "predict_proba at T = 1")


def test_refit_without_calibration_is_the_plain_fit():
    X, y = load_iris(return_X_y=True)
    a = FiDGPClassifier(calibration=None, refit=True, **SMALL).fit(X, y)
    b = FiDGPClassifier(calibration=None, **SMALL).fit(X, y)
    assert a.temperature_ == 1.0 and a.validation_nll_ is None
    assert_same_predictions(a.predict_proba(X), b.predict_proba(X), "float64")


def test_temperature_needs_two_rows_of_every_class():
    X, y = load_iris(return_X_y=True)
    X, y = np.vstack([X[:100], X[100:101]]), np.concatenate([y[:100], y[100:101]])
    with pytest.raises(ValueError, match="calibration"):
        FiDGPClassifier(calibration="temperature", **SMALL).fit(X, y)


def test_validation_fraction_is_validated():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match="validation_fraction"):
        FiDGPClassifier(calibration="temperature", validation_fraction=1.0, **SMALL).fit(X, y)


# ============================================================ refit="warm" and "auto"
def test_warm_refit_continues_the_held_out_network_at_the_final_learning_rate():
    # refit="warm" trains the held-out stage's network on further: its T and validation NLL
    # are that stage's, the inputs keep that stage's scaling, and the record of the epochs
    # goes on for a tenth of max_iter at the final KL weight. With a final learning rate of
    # ~0 (LR_GAMMA tiny) the fine-tuning cannot move the network: its probabilities are the
    # held-out fit's.
    X, y = load_iris(return_X_y=True)
    params = {**SMALL, "max_iter": 20, "validation_fraction": 0.2, "kl_weight": 0.3}
    held = FiDGPClassifier(calibration="temperature", refit=False, **params).fit(X, y)
    warm = FiDGPClassifier(calibration="temperature", refit="warm", **params).fit(X, y)
    assert warm.calibration_ == "temperature"
    assert warm.temperature_ == pytest.approx(held.temperature_, rel=1e-8)
    assert warm.validation_nll_ == pytest.approx(held.validation_nll_, rel=1e-8)
    np.testing.assert_allclose(warm._X_offset, held._X_offset, rtol=1e-12)
    assert not np.allclose(warm._X_offset, X.mean(axis=0))  # the held-out rows left out
    k = _warm_epochs(20)
    assert k == 2 and warm.n_iter_ == held.n_iter_ + k == 22
    assert len(warm.loss_curve_) == 22
    assert_same_predictions(warm.loss_curve_[:20], held.loss_curve_, "float64", "loss curve")
    assert warm.kl_weights_[20:] == [0.3, 0.3]
    # the fine-tuning moves the network ...
    assert np.abs(warm.predict_proba(X) - held.predict_proba(X)).max() > 1e-4
    # ... and does nothing at a learning rate of 3e-3 * 1e-12 (without the flows' spectral
    # normalisation, whose power iteration moves its buffers on every training pass)
    with patch.multiple(_fidgp, LR_GAMMA=1e-12, FLOW_SPECTRAL_NORM=False):
        frozen = FiDGPClassifier(calibration="temperature", refit="warm", **params).fit(X, y)
        held0 = FiDGPClassifier(calibration="temperature", refit=False, **params).fit(X, y)
    np.testing.assert_allclose(frozen.predict_proba(X), held0.predict_proba(X),
                               rtol=1e-8, atol=1e-10)  # the Adam steps of ~3e-15 only


def test_warm_refit_learns_the_held_out_rows():
    # the rows held out for T are trained on in the warm stage: their loss falls below the
    # held-out fit's (at T = 1, a large final learning rate and many fine-tuning epochs)
    X, y = load_iris(return_X_y=True)
    params = {**SMALL, "max_iter": 60, "validation_fraction": 0.3, "learning_rate_init": 1e-2}
    with patch.object(_fidgp, "LR_GAMMA", 1.0):
        held = FiDGPClassifier(calibration="temperature", refit=False, **params).fit(X, y)
        warm = FiDGPClassifier(calibration="temperature", refit="warm", **params).fit(X, y)
    _, val, _, _ = held._validation_split(np.unique(y, return_inverse=True)[1], 3,
                                        int(np.random.RandomState(0).randint(
                                            np.iinfo(np.int32).max, size=4)[3]))
    for m in (held, warm):
        m.temperature_ = 1.0

    def nll(m, rows):
        p = m.predict_proba(X[rows])
        return -np.mean(np.log(p[np.arange(len(rows)), y[rows]]))
    assert nll(warm, val) < nll(held, val)


def test_auto_calibrates_when_every_class_has_enough_rows():
    X, y = load_iris(return_X_y=True)
    auto = FiDGPClassifier(**SMALL).fit(X, y)  # calibration="auto", refit="warm"
    explicit = FiDGPClassifier(calibration="temperature", refit="warm", **SMALL).fit(X, y)
    assert auto.calibration_ == "temperature"
    assert auto.temperature_ == pytest.approx(explicit.temperature_, rel=1e-8)
    assert_same_predictions(auto.predict_proba(X), explicit.predict_proba(X), "float64",
                            "auto against temperature")
    # a class of 9 rows: 1 / validation_fraction = 10 not reached -> no calibration, every
    # row trained on, T = 1 (where an explicit "temperature" would hold out rows)
    keep = np.r_[0:50, 50:100, 100:109]
    with pytest.warns(UserWarning, match=r"fitted no temperature: class 2 has 9 row\(s\)"):
        small = FiDGPClassifier(**SMALL).fit(X[keep], y[keep])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # None asked for: no word about it
        plain = FiDGPClassifier(calibration=None, **SMALL).fit(X[keep], y[keep])
    assert small.calibration_ is None and small.temperature_ == 1.0
    assert small.validation_nll_ is None
    np.testing.assert_allclose(small._X_offset, X[keep].mean(axis=0), rtol=1e-12)
    assert_same_predictions(small.predict_proba(X), plain.predict_proba(X), "float64",
                            "auto without calibration against None")
    # one more row of that class reaches it
    keep10 = np.r_[0:50, 50:100, 100:110]
    assert FiDGPClassifier(**SMALL).fit(X[keep10], y[keep10]).calibration_ == "temperature"
    # and a class of one row is fitted (no validation split is attempted)
    one = np.r_[0:100, 100:101]
    with pytest.warns(UserWarning, match="class 2 has 1 row"):
        assert FiDGPClassifier(**SMALL).fit(X[one], y[one]).calibration_ is None


def test_the_validation_split_keeps_repeats_whole_and_splits_design_points():
    """Issue 53 item 1: a twin in training made its held-out row look easy, and the
    temperature sharpened the probabilities (defaults, every row twice: test log loss 0.42
    -> 0.49): a merged repeat of (x, label) stays whole. A merged row whose input carries
    another label too (a cell of categorical inputs) has its copies split instead: held
    out whole, the training never saw that label there."""
    clf = FiDGPClassifier(validation_fraction=0.1)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(int)
    train, val, w_train, w_val = clf._validation_split(y, 2, 5)
    assert w_train is None and w_val is None and len(val) == 20
    np.testing.assert_array_equal(np.sort(np.r_[train, val]), np.arange(200))
    for k in (200, 140):  # rows repeated, merged as the fit merges them
        XX, yy, w = collapse_rows(np.r_[X, X[:k]], np.r_[y, y[:k]], None)
        train, val, w_train, w_val = clf._validation_split(yy, 2, 5, XX, w)
        assert not set(train) & set(val)
        np.testing.assert_array_equal(w_val, w[val])
        assert set(yy[val]) == {0, 1} and set(yy[train]) == {0, 1}
    # a 4 x 3 categorical design: 400 rows, 24 merged (cell, label) rows
    a, b = rng.integers(0, 4, 400), rng.integers(0, 3, 400)
    cells = np.c_[np.eye(4)[a], np.eye(3)[b]]
    labels = (rng.uniform(size=400) < 0.3 + 0.1 * a).astype(int)
    XX, yy, w = collapse_rows(cells, labels, None)
    train, val, w_train, w_val = clf._validation_split(yy, 2, 5, XX, w)
    total = np.zeros(len(yy))
    np.add.at(total, train, w_train)
    np.add.at(total, val, w_val)
    np.testing.assert_array_equal(total, w)  # every copy on exactly one side
    for c in (0, 1):
        held = w_val[yy[val] == c].sum()
        assert abs(held - 0.1 * w[yy == c].sum()) <= 1
    # every cell keeps rows of both labels in training where it has both
    assert set(map(tuple, XX[train])) == set(map(tuple, XX))
    # aggregated counts up to 10^9 copies a row: drawn row by row, never listed copy by copy
    big = np.where(w > 2, w * 10**8, w)
    train, val, w_train, w_val = clf._validation_split(yy, 2, 5, XX, big)
    total = np.zeros(len(yy))
    np.add.at(total, train, w_train)
    np.add.at(total, val, w_val)
    np.testing.assert_array_equal(total, big)
    for c in (0, 1):
        assert abs(w_val[yy[val] == c].sum() - 0.1 * big[yy == c].sum()) <= 1


def test_a_categorical_design_keeps_its_temperature_near_one():
    """Two one-hot factors (4 x 3 cells), 400 rows: the validation split held out whole
    (cell, label) rows, the temperature rose to 8-13 and flattened every probability
    (test ECE 0.20, log loss 0.65-0.67 against 0.51-0.53 for the true probabilities)."""
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(0)

    def draw(n):
        a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
        p = 1 / (1 + np.exp(-(np.array([-1, 0, 1, 2])[a] + np.array([0, -1, 1])[b])))
        return np.c_[np.eye(4)[a], np.eye(3)[b]], (rng.uniform(size=n) < p).astype(int), p

    X, y, _ = draw(400)
    Xt, yt, pt = draw(4000)
    clf = FiDGPClassifier(random_state=0).fit(X, y)
    assert clf.calibration_ == "temperature" and 0.5 < clf.temperature_ < 2.0
    assert log_loss(yt, clf.predict_proba(Xt)) < log_loss(yt, np.c_[1 - pt, pt]) + 0.05


def test_categories_of_a_single_label_are_not_held_out_whole():
    """Twenty one-hot categories, 1,000 rows, five always labelled 0 and five always 1: a
    pure category is one merged row, which the temperature split held out whole (its input
    carries no other label), so the first stage never saw it and the temperature rose to
    9-10, flattening every probability. The rows are replicates of a design: their copies
    are split too."""
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(0)
    p = np.r_[np.zeros(5), np.linspace(0.1, 0.9, 10), np.ones(5)]

    def draw(n):
        g = rng.integers(0, 20, n)
        return np.eye(20)[g], (rng.uniform(size=n) < p[g]).astype(int), p[g]

    X, y, _ = draw(1000)
    Xt, yt, pt = draw(4000)
    clf = FiDGPClassifier(max_iter=100, random_state=0).fit(X, y)
    assert clf.calibration_ == "temperature" and 0.5 < clf.temperature_ < 2.0
    true = np.clip(np.c_[1 - pt, pt], 1e-3, 1 - 1e-3)
    assert log_loss(yt, clf.predict_proba(Xt)) < log_loss(yt, true) + 0.05


def test_duplicated_rows_keep_the_log_loss():
    """Issue 53 item 1: trained on every row twice, or with 70 % of the rows repeated, the
    log loss on fresh data stays within 0.05 of the de-duplicated fit's."""
    from sklearn.metrics import log_loss

    from .conftest import FAST, noisy_binary

    rng = np.random.default_rng(0)
    X, y = noisy_binary(rng, 200)
    Xt, yt = noisy_binary(rng, 3000)
    losses = [log_loss(yt, FiDGPClassifier(**FAST["FiDGPClassifier"], random_state=0)
                       .fit(np.r_[X, X[:k]], np.r_[y, y[:k]]).predict_proba(Xt))
              for k in (0, 200, 140)]
    assert losses[0] < 0.5
    assert abs(losses[1] - losses[0]) <= 0.05 and abs(losses[2] - losses[0]) <= 0.05
