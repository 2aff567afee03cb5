"""``sample_weight``: a weighted likelihood equal to the repeated rows' (the GP engines, before
any merging of rows), integer weights equal to repeated rows and zero weights to dropped rows,
weighted calibration residuals, and duplicated rows in the Student-t classifier."""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import has_fit_parameter

from skbnngp import (
    DBKRegressor,
    FiDGPClassifier,
    MixedActivationGPRegressor,
    RichBLLRegressor,
    StudentTProcessClassifier,
    StudentTProcessRegressor,
)
from skbnngp._backend import _dbk as dbk
from skbnngp._backend._calibration import fit_temperature, student_t_calibration
from skbnngp._backend._gp import ExactGP, NystromGP, leave_group_out, leave_one_copy_out
from skbnngp._backend._jacobian import split_parameters
from skbnngp._backend._projection import fit_last_layer, last_layer_variance
from skbnngp._backend._train import build_mlp

from .conftest import FAST

#: The estimators whose fit takes sample_weight: every one.
WEIGHTED = [StudentTProcessRegressor, StudentTProcessClassifier, MixedActivationGPRegressor,
            DBKRegressor, RichBLLRegressor, FiDGPClassifier]
GP_REGRESSORS = [StudentTProcessRegressor(max_iter=30, device="cpu", random_state=0),
                 MixedActivationGPRegressor(approx="exact", max_iter=30, device="cpu",
                                            random_state=0),
                 MixedActivationGPRegressor(n_anchors=10, max_iter=30, device="cpu",
                                            random_state=0)]


def _rbf(p, X1, X2=None, diag=False):
    if diag:
        return p["amp"] * torch.ones(X1.shape[0], dtype=X1.dtype)
    X2 = X1 if X2 is None else X2
    return p["amp"] * torch.exp(-0.5 * torch.cdist(X1, X2).square() / p["ls"])


def _unpack(raw):
    return {"amp": raw[0].exp(), "ls": raw[1].exp(), "noise_variance": raw[2].exp()}


def _data(rng, n=12):
    X = rng.normal(size=(n, 2))
    Y = np.sin(X[:, :1]) + 0.1 * rng.normal(size=(n, 1))
    w = rng.integers(1, 4, size=n).astype(float)
    return X, Y, w


def _engines(kind, X, Y, w):
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)
    rep = np.repeat(np.arange(len(w)), w.astype(int))
    if kind == "exact":
        return (ExactGP(_rbf, _unpack, t(X), t(Y), weights=t(w)),
                ExactGP(_rbf, _unpack, t(X[rep]), t(Y[rep])), rep)
    Z = t(X[:5] + 0.1)
    return (NystromGP(_rbf, _unpack, t(X), t(Y), Z, weights=t(w)),
            NystromGP(_rbf, _unpack, t(X[rep]), t(Y[rep]), Z), rep)


@pytest.mark.parametrize("kind", ["exact", "nystrom"])
def test_weighted_likelihood_equals_repeated_rows(kind, rng):
    """The weighted likelihood (noise s / w_i and the weights' constant) is the repeated
    rows' likelihood, with its gradient; so are the leave-one-out residuals once a row is
    left out with its repeats (a weighted row's variance moved to one observation's)."""
    X, Y, w = _data(rng)
    weighted, repeated, rep = _engines(kind, X, Y, w)
    raw = torch.tensor([0.2, -0.3, math.log(0.05)], dtype=torch.float64)
    (nw, gw), (nr, gr) = weighted.value_and_grad(raw), repeated.value_and_grad(raw)
    np.testing.assert_allclose(float(nw), float(nr), rtol=1e-10)
    np.testing.assert_allclose(gw.numpy(), gr.numpy(), rtol=1e-8, atol=1e-10)
    sw, sr = weighted.state(raw), repeated.state(raw)
    np.testing.assert_allclose(float(sw["nll"]), float(sr["nll"]), rtol=1e-10)
    # leave-one-out of a weighted row = leaving all its repeats out
    r, v = weighted.loo(sw, _unpack(raw))
    groups = [np.flatnonzero(rep == i) for i in range(len(w)) if w[i] > 1]
    rr, vr = repeated.loo(sr, _unpack(raw))
    rr, vr = leave_group_out(repeated, sr, _unpack(raw), rr, vr, groups)
    first = np.searchsorted(rep, np.arange(len(w)))
    s = math.exp(float(raw[2]))
    np.testing.assert_allclose(r.numpy(), rr.numpy()[first], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(v.numpy() + s * (1 - 1 / w), vr.numpy()[first], rtol=1e-7)


@pytest.mark.parametrize("kind", ["exact", "nystrom"])
def test_leave_one_copy_out_equals_repeated_rows_one_by_one(kind, rng):
    """Replicates (inputs that recur): a weighted row loses one copy, not all, which is the
    repeated rows' own leave-one-out with the twins kept (the closed-form rank-one update
    against explicit leave-one-out of every repeated row); rows of weight 1, and the limit
    w -> 1, are the whole row left out with one observation's noise."""
    X, Y, w = _data(rng)
    weighted, repeated, rep = _engines(kind, X, Y, w)
    raw = torch.tensor([0.2, -0.3, math.log(0.05)], dtype=torch.float64)
    s = math.exp(float(raw[2]))
    sw, sr = weighted.state(raw), repeated.state(raw)
    r, v = leave_one_copy_out(*weighted.loo(sw, _unpack(raw)), weighted.weights, s)
    rr, vr = repeated.loo(sr, _unpack(raw))
    first = np.searchsorted(rep, np.arange(len(w)))
    np.testing.assert_allclose(r.numpy(), rr.numpy()[first], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(v.numpy(), vr.numpy()[first], rtol=1e-7)
    assert np.any(w == 1) and np.any(w > 1)
    near_one = torch.full((len(rep),), 1.0 + 1e-7, dtype=torch.float64)
    r1, v1 = leave_one_copy_out(rr, vr, near_one, s)
    r0, v0 = rr, vr
    np.testing.assert_allclose(r1.numpy(), r0.numpy(), rtol=1e-5, atol=1e-10)
    np.testing.assert_allclose(v1.numpy(), v0.numpy(), rtol=1e-5)


@pytest.mark.parametrize("est", GP_REGRESSORS, ids=lambda e: repr(e)[:40])
def test_gp_integer_weights_equal_repeated_rows(est, rng):
    """Integer weights give the model of the shuffled repeated rows (hyperparameters, log
    evidence, predictive), zero weights that of the rows dropped."""
    X = rng.normal(size=(30, 3))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=30)
    w = rng.integers(0, 4, size=30)
    perm = rng.permutation(int(w.sum()))
    Xr, yr = np.repeat(X, w, axis=0)[perm], np.repeat(y, w)[perm]
    Xt = rng.normal(size=(20, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).fit(X, y, sample_weight=w)
        b = clone(est).fit(Xr, yr)
        c = clone(est).fit(X[w > 0], y[w > 0], sample_weight=w[w > 0])
    for other in (b, c):
        np.testing.assert_allclose(a.log_marginal_likelihood_value_,
                                   other.log_marginal_likelihood_value_, rtol=1e-8)
        for ua, ub in zip(a.predict(Xt, return_std=True), other.predict(Xt, return_std=True)):
            np.testing.assert_allclose(ua, ub, rtol=1e-8, atol=1e-10)
        assert a.calibration_factor_ == pytest.approx(other.calibration_factor_, rel=1e-8)


@pytest.mark.parametrize("est", GP_REGRESSORS[:2], ids=lambda e: repr(e)[:40])
def test_gp_noise_driven_to_its_bound_by_repeated_rows_warns(est, rng):
    """Every row counted twice: the identical repeats are evidence of no noise, the noise
    ends on its lower bound, and a UserWarning says why; weights of mean 1 (importances)
    keep the noise off the bound and do not warn."""
    X = rng.normal(size=(60, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=60)
    est = clone(est).set_params(max_iter=100)
    with pytest.warns(UserWarning, match="lower bound.*count 120 times"):
        clone(est).fit(X, y, sample_weight=np.full(60, 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        for w in (None, np.full(60, 0.5), rng.uniform(0.5, 1.5, size=60)):
            clone(est).fit(X, y, sample_weight=None if w is None else w / w.mean())


@pytest.mark.parametrize("est", GP_REGRESSORS[:2], ids=lambda e: repr(e)[:40])
def test_importance_weights_with_zeros_follow_the_warnings_advice(est, rng):
    """Half the weights zero: divided by their plain mean, the kept rows count twice each,
    the noise ends on its bound, and the warning's advice is the mean of the non-zero
    weights, which fits without the warning."""
    X = rng.normal(size=(60, 3))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * rng.normal(size=60)
    est = clone(est).set_params(max_iter=100)
    w = np.tile([0.0, 3.0], 30)
    with pytest.warns(UserWarning, match="divide sample_weight by the mean of its non-zero"):
        clone(est).fit(X, y, sample_weight=w / w.mean())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)
        clone(est).fit(X, y, sample_weight=w / w[w > 0].mean())


@pytest.mark.parametrize("cls", [c for c in WEIGHTED if c is not StudentTProcessClassifier],
                         ids=lambda c: c.__name__)
def test_weights_far_below_one_warn(cls, rng):
    """Weights normalised to sum to 1 count the data as one observation (the model then
    leans on its prior): a UserWarning says so; weights of mean 1/2 do not warn. The
    Student-t classifier scales its weights to mean 1, so it has nothing to warn of."""
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    if cls is FiDGPClassifier:
        y = (y > 0).astype(int)
    est = cls(**FAST.get(cls.__name__, {}))
    with pytest.warns(UserWarning, match="averages 0.025 .* count as 1 observations"):
        clone(est).fit(X, y, sample_weight=np.full(40, 1 / 40))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clone(est).fit(X, y, sample_weight=np.full(40, 0.5))
    assert not [w for w in caught if "averages" in str(w.message)]


def test_weighted_calibration_equals_repeated_residuals(rng):
    z = rng.standard_t(4, size=40)
    w = rng.integers(1, 4, size=40)
    assert student_t_calibration(z, weights=w) == pytest.approx(
        student_t_calibration(np.repeat(z, w)), rel=1e-9)


@pytest.mark.parametrize("cls", WEIGHTED)
def test_has_sample_weight_and_rejects_negative(cls):
    assert has_fit_parameter(cls(), "sample_weight")
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int) if "Classifier" in cls.__name__ else X[:, 0]
    w = np.ones(20)
    w[3] = -1
    with pytest.raises(ValueError, match="sample_weight"):
        cls(**FAST[cls.__name__]).fit(X, y, sample_weight=w)


def _classifier_data():
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=450, n_features=5, n_informative=3, random_state=1)
    return X[:150], y[:150], X[150:], y[150:]


def test_classifier_duplicated_rows_keep_log_loss():
    """Every row twice, or ~70% duplicated rows: the test log loss stays within 0.05 of the
    de-duplicated fit's (duplicates are merged into weighted rows before the evidence and
    leave-one-out noise search, which the weighted likelihood makes exact)."""
    from sklearn.metrics import log_loss

    X, y, Xt, yt = _classifier_data()
    idx = np.r_[np.arange(150), np.random.default_rng(0).choice(150, 350)]

    def loss(Xa, ya):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = StudentTProcessClassifier(random_state=0, device="cpu").fit(Xa, ya)
        return log_loss(yt, clf.predict_proba(Xt))

    base = loss(X, y)
    assert abs(loss(np.vstack([X, X]), np.r_[y, y]) - base) <= 0.05
    assert abs(loss(X[idx], y[idx]) - base) <= 0.05


def test_classifier_weights_equal_repeated_rows_and_class_weight():
    X, y, Xt, _ = _classifier_data()
    X, y = X[:60], y[:60]
    w = np.random.default_rng(1).integers(0, 3, size=60)
    perm = np.random.default_rng(2).permutation(int(w.sum()))
    est = StudentTProcessClassifier(**FAST["StudentTProcessClassifier"], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).fit(X, y, sample_weight=w)
        b = clone(est).fit(np.repeat(X, w, axis=0)[perm], np.repeat(y, w)[perm])
        cw = {0: 2.0, 1: 1.0}
        c = clone(est).set_params(class_weight=cw).fit(X, y)
        d = clone(est).fit(X, y, sample_weight=np.where(y == 0, 2.0, 1.0))
    np.testing.assert_allclose(a.predict_proba(Xt), b.predict_proba(Xt), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(c.predict_proba(Xt), d.predict_proba(Xt), rtol=1e-8, atol=1e-12)


# ============================================================================ the networks
def _t(a):
    return torch.as_tensor(a, dtype=torch.float64)


def _blr_data(rng, n=14, r=4, C=2):
    Phi = rng.normal(size=(n, r))
    Y = Phi @ rng.normal(size=(r, C)) + 0.3 * rng.normal(size=(n, C))
    w = rng.integers(1, 4, size=n).astype(float)
    return Phi, Y, w, np.repeat(np.arange(n), w.astype(int))


@pytest.mark.parametrize("correction, objective", [(False, "bound"), (True, "bound"),
                                                   (True, "evidence")])
def test_dbk_weighted_objectives_equal_repeated_rows(correction, objective, rng):
    """DBK's exact training objective (noise and correction (s + c_i) / w_i and the repeats'
    constant) and its ELBO with frequency weights are the repeated rows' own, with the same
    gradient with respect to the features."""
    Phi, Y, w, rep = _blr_data(rng)
    P = _t(Phi).requires_grad_(True)
    noise = _t(0.2)
    jw = dbk.exact_objective(P, _t(Y), noise, correction, objective, 0.1, weights=_t(w))
    (gw,) = torch.autograd.grad(jw, P)
    jr = dbk.exact_objective(P[rep], _t(Y[rep]), noise, correction, objective, 0.1)
    (gr,) = torch.autograd.grad(jr, P)
    assert jw.item() == pytest.approx(jr.item(), rel=1e-11)
    np.testing.assert_allclose(gw.numpy(), gr.numpy(), rtol=1e-9, atol=1e-11)
    m, L = _t(rng.normal(size=(4, 2))), _t(np.tril(rng.normal(size=(4, 4))))
    ew = dbk.svi_objective(_t(Phi), _t(Y), m, L, noise, len(w), correction, weights=_t(w))
    er = dbk.svi_objective(_t(Phi[rep]), _t(Y[rep]), m, L, noise, len(rep), correction)
    assert float(ew) == pytest.approx(float(er), rel=1e-11)


@pytest.mark.parametrize("selection, k", [("evidence", None), ("heldout", 9)])
def test_dbk_weighted_conditioning_equals_repeated_rows(selection, k, rng):
    """The exact posterior after training, the noise and prior scale chosen by the (held-out)
    evidence, and the leave-one-out residuals: with weights as with the repeated rows (a
    weighted row left out with its repeats, its residual scaled for one new observation)."""
    X, Y, w, rep = _blr_data(rng, n=14, r=3)
    net = build_mlp(3, (8,), 4, seed=0, dtype=torch.float64)
    Xt, Yt = _t(X), _t(Y)
    kr = None if k is None else int(w[:k].sum())
    args = (1.0, True, selection, 1e-6, 64)
    a = dbk.condition_exact(net, 0.5, Xt, Yt, _t(0.1), args[1], k, *args[2:],
                            weights=_t(w))
    b = dbk.condition_exact(net, 0.5, Xt[rep], Yt[rep], _t(0.1), args[1], kr, *args[2:])
    for u, v in [(a[0], b[0]), (a[1], b[1]), (float(a[2]), float(b[2])), (a[5], b[5])]:
        assert u == pytest.approx(v, rel=1e-6)
    np.testing.assert_allclose(a[3].mean.numpy(), b[3].mean.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose((a[3].factor @ a[3].factor.T).numpy(),
                               (b[3].factor @ b[3].factor.T).numpy(), rtol=1e-6, atol=1e-9)
    feat = dbk.scaled_features(net, a[0])
    zw, vw = dbk.loo_residuals(feat, Xt, Yt, a[3], a[2], a[4], True, 64, (), _t(w))
    groups = [np.flatnonzero(rep == i) for i in range(len(w)) if w[i] > 1]
    zr, vr = dbk.loo_residuals(feat, Xt[rep], Yt[rep], a[3], a[2], a[4], True, 64, groups)
    first = np.searchsorted(rep, np.arange(len(w)))
    np.testing.assert_allclose(zw.numpy(), zr.numpy()[first], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(vw.numpy(), vr.numpy()[first], rtol=1e-7)
    # replicates (inputs that recur): one copy out, the repeated rows' plain leave-one-out
    zc, vc = dbk.loo_residuals(feat, Xt, Yt, a[3], a[2], a[4], True, 64, (), _t(w),
                               copies=True)
    zr, vr = dbk.loo_residuals(feat, Xt[rep], Yt[rep], a[3], a[2], a[4], True, 64)
    np.testing.assert_allclose(zc.numpy(), zr.numpy()[first], rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(vc.numpy(), vr.numpy()[first], rtol=1e-7)


@pytest.mark.parametrize("kind", ["rich", "bll", "ntk"])
def test_rich_bll_weighted_last_layer_equals_repeated_rows(kind, rng):
    """Rich-BLL's last layer (Gram matrices, projection, evidence's scales) with frequency
    weights is the repeated rows' one."""
    X, _, w, rep = _blr_data(rng, n=20, r=3, C=1)
    net = build_mlp(3, (6,), 1, seed=1, dtype=torch.float64)
    head, _, body = split_parameters(net)
    Xt = _t(X)
    with torch.no_grad():
        Phi = torch.cat([torch.tanh(net[0](Xt)), torch.ones(20, 1, dtype=torch.float64)], 1)
    Y = _t(np.sin(X[:, :1]) + 0.1 * rng.normal(size=(20, 1)))
    a = fit_last_layer(net, body, Xt, Phi, Y, kind=kind, weights=_t(w))
    b = fit_last_layer(net, body, Xt[rep], Phi[rep], Y[rep], kind=kind)
    # the same evidence, maximised by L-BFGS: its value agrees tightly, the maximiser (flat
    # along the prior variance for the NTK features) to the optimiser's tolerance. The NTK's
    # p = 31 features exceed the 20 distinct rows: the Gram matrix is singular, and its
    # null directions (cut at round-off) differ in the last digits between the two sums.
    assert a.log_evidence == pytest.approx(b.log_evidence, rel=1e-5 if kind == "ntk" else 1e-9)
    assert a.noise == pytest.approx(b.noise, rel=1e-4)
    assert a.prior_variance == pytest.approx(b.prior_variance, rel=1e-3)
    feats = Phi
    if kind == "ntk":
        from skbnngp._backend._projection import network_features
        feats = network_features(net, head, body, Xt, with_body=True)[1]
    np.testing.assert_allclose(last_layer_variance(feats, a.factor).numpy(),
                               last_layer_variance(feats, b.factor).numpy(), rtol=1e-4)


def test_fid_weighted_temperature_equals_repeated_rows(rng):
    logits = rng.normal(size=(5, 30, 3)) * 3
    y = rng.integers(0, 3, size=30)
    w = rng.integers(1, 4, size=30)
    rep = np.repeat(np.arange(30), w)
    tw, nw = fit_temperature(logits, y, weights=w)
    tr, nr = fit_temperature(logits[:, rep], y[rep])
    assert tw == pytest.approx(tr, rel=1e-6)
    assert nw == pytest.approx(nr, rel=1e-9)


NETWORKS = [DBKRegressor(**FAST["DBKRegressor"], random_state=0),
            DBKRegressor(**dict(FAST["DBKRegressor"], inference="svi", batch_size=16),
                         random_state=0),
            RichBLLRegressor(**FAST["RichBLLRegressor"], random_state=0),
            FiDGPClassifier(**dict(FAST["FiDGPClassifier"], max_iter=30), random_state=0)]


def _outputs(est, X):
    if hasattr(est, "predict_proba"):
        return [est.predict_proba(X), est.ood_score(X)]
    return list(est.predict(X, return_std=True))


@pytest.mark.parametrize("est", NETWORKS, ids=lambda e: repr(e)[:48])
def test_network_integer_weights_equal_repeated_rows(est, rng):
    """Integer weights give the model of the shuffled repeated rows, zero weights that of the
    rows dropped, and unit weights that of no weights: exactly (up to round-off, 1e-12),
    since repeated rows are merged into the same weighted, sorted rows before training."""
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int) if hasattr(est, "predict_proba") else \
        np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    w = rng.integers(0, 4, size=40)
    perm = rng.permutation(int(w.sum()))
    Xt = rng.normal(size=(15, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).fit(X, y, sample_weight=w)
        b = clone(est).fit(np.repeat(X, w, axis=0)[perm], np.repeat(y, w)[perm])
        c = clone(est).fit(X[w > 0], y[w > 0], sample_weight=w[w > 0])
        d = clone(est).fit(X, y, sample_weight=np.ones(40))
        e = clone(est).fit(X, y)
    for other in (b, c):
        for u, v in zip(_outputs(a, Xt), _outputs(other, Xt)):
            np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-14)
    for u, v in zip(_outputs(d, Xt), _outputs(e, Xt)):
        np.testing.assert_array_equal(u, v)
    # the weights matter: doubling half the rows is not the unweighted fit
    w2 = np.where(np.arange(40) < 20, 3.0, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = clone(est).fit(X, y, sample_weight=w2)
    assert not np.allclose(_outputs(f, Xt)[0], _outputs(e, Xt)[0])


def test_fid_class_weight_combines_with_sample_weight(rng):
    """``class_weight`` multiplies ``sample_weight``: "balanced" uses the weighted class
    counts (the same model as its dict), and the product of the two equals one sample weight
    of the same total (the KL's n), up to round-off amplified by training (rtol 1e-6;
    without input scaling, whose statistics take the sample weights only)."""
    X = rng.normal(size=(50, 3))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0.3).astype(int)
    w = rng.integers(1, 4, size=50).astype(float)
    # one stage on every row (one balance), inputs unscaled (their statistics take the
    # sample weights, not the class weights)
    est = FiDGPClassifier(**dict(FAST["FiDGPClassifier"], max_iter=30), calibration=None,
                          normalize_X=False, random_state=0)
    counts = np.bincount(y, weights=w)
    balanced = w.sum() / (2 * counts)
    cw = balanced[y] * w
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = clone(est).set_params(class_weight="balanced").fit(X, y, sample_weight=w)
        b = clone(est).set_params(class_weight={0: balanced[0], 1: balanced[1]}).fit(
            X, y, sample_weight=w)
        c = clone(est).fit(X, y, sample_weight=cw * w.sum() / cw.sum())
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    np.testing.assert_allclose(a.predict_proba(X), c.predict_proba(X), rtol=1e-6)
