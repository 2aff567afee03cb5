"""The peer and baseline models of the benchmark scripts, each written once.

Every benchmark script takes its peers from here, so that a figure in one report and a figure
in another measure the same model. Each is a scikit-learn estimator (``fit``, ``predict``,
and ``predict_dist`` or ``predict_proba`` where the scripts score it) or a factory returning
one:

Regression

* :func:`sklearn_gpr`: scikit-learn's ``GaussianProcessRegressor``, amplitude x ARD RBF +
  white noise, ``normalize_y=True`` (at its defaults the reference GP of ``skbnngp compare``);
* :class:`GPyTorchExactGPRegressor`: GPyTorch's exact GP, scaled ARD RBF, Adam on the exact
  marginal likelihood;
* :class:`SVGPRegressor`: GPyTorch's stochastic variational GP (Hensman et al. 2013);
* :class:`LaplaceLastLayerRegressor`: laplace-torch's last-layer Laplace on an MLP it trains;
* :class:`PosthocLaplaceRegressor`: laplace-torch's last-layer Laplace on a given network;
* :class:`DeepEnsembleRegressor`: a deep ensemble of Gaussian-head MLPs (Lakshminarayanan
  et al. 2017), whose predictive is a :class:`skbnngp.distributions.NormalMixture`.

* :class:`MLPEnsembleRegressor`: five scikit-learn ``MLPRegressor(early_stopping=True)``
  members, a Gaussian mixture with each member's validation MSE as its variance;
* :class:`NGBoostRegressor`, :class:`CatBoostUncertaintyRegressor`: NGBoost and CatBoost
  (``RMSEWithUncertainty``), early-stopped on a 10 % validation split (optional: ngboost,
  catboost).

Classification

* :func:`sklearn_gpc`: scikit-learn's ``GaussianProcessClassifier``, amplitude x RBF;
* :func:`logistic_regression`, :func:`mlp_classifier`: scikit-learn's;
* :class:`MLPEnsembleClassifier`: ``MLPClassifier`` members with different seeds, their
  probabilities averaged.

GPyTorch and laplace-torch are optional (``pip install -e ".[bench]"``; laplace-torch by
hand, see ``benchmarks/README.md``): without them the baseline raises an ``ImportError`` that
says which baseline is skipped and how to install it, which the scripts record as that row's
error.
"""

from __future__ import annotations

import copy
import importlib
import math

import numpy as np
from scipy import stats
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

#: How to install each optional peer.
EXTRAS = {"gpytorch": 'pip install -e ".[bench]"',
          "laplace": "pip install laplace-torch; see benchmarks/README.md"}


def require(module, baseline):
    """``import module``, or an ``ImportError`` saying that ``baseline`` is skipped."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"{baseline} skipped: {module} is not installed "
                          f"({EXTRAS.get(module, 'pip install ' + module)})") from exc


def _sync(torch, device):
    """Waits for queued CUDA work, so that a fit's clock stops when its work is done."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


# ============================================================================ scikit-learn
def sklearn_gpr(n_features, *, length_scale_bounds=(1e-5, 1e5), noise_level=1.0,
                noise_level_bounds=(1e-5, 1e5), random_state=None):
    """scikit-learn's GP regressor: ``ConstantKernel(1) * RBF(ones(n_features)) +
    WhiteKernel(noise_level)`` with ``normalize_y=True`` and one L-BFGS-B run; the bounds are
    scikit-learn's defaults unless given."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

    kernel = (ConstantKernel(1.0) * RBF(np.ones(n_features), length_scale_bounds)
              + WhiteKernel(noise_level, noise_level_bounds))
    return GaussianProcessRegressor(kernel=kernel, normalize_y=True, random_state=random_state)


def sklearn_gpc(n_features=None, *, length_scale=1.0, random_state=None):
    """scikit-learn's GP classifier (Laplace, one-vs-rest): ``ConstantKernel(1) * RBF``, one
    length scale per feature up to ``skbnngp compare``'s ``GPC_ARD_MAX_FEATURES`` features and
    one shared above (or when ``n_features`` is None), all started at ``length_scale``."""
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from skbnngp.compare._registry import GPC_ARD_MAX_FEATURES

    ard = n_features is not None and n_features <= GPC_ARD_MAX_FEATURES
    scale = length_scale * np.ones(n_features) if ard else length_scale
    return GaussianProcessClassifier(kernel=ConstantKernel(1.0) * RBF(length_scale=scale),
                                     random_state=random_state)


def logistic_regression(max_iter=1000):
    """scikit-learn's ``LogisticRegression`` (L2, C=1)."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=max_iter)


def mlp_classifier(hidden_layer_sizes=(100,), max_iter=1000, random_state=0):
    """scikit-learn's ``MLPClassifier`` (ReLU, Adam, L2 1e-4)."""
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes, max_iter=max_iter, random_state=random_state)


class MLPEnsembleClassifier(ClassifierMixin, BaseEstimator):
    """``n_members`` :func:`mlp_classifier` with ``random_state`` ``random_state + k``; the
    probabilities are averaged."""

    def __init__(self, n_members=5, hidden_layer_sizes=(100,), max_iter=1000, random_state=0):
        self.n_members = n_members
        self.hidden_layer_sizes = hidden_layer_sizes
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X, y):
        self.members_ = [mlp_classifier(self.hidden_layer_sizes, self.max_iter,
                                        self.random_state + k).fit(X, y)
                         for k in range(self.n_members)]
        self.classes_ = self.members_[0].classes_
        return self

    def predict_proba(self, X):
        return np.mean([m.predict_proba(X) for m in self.members_], axis=0)

    def predict(self, X):
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


# ============================================================================ GPyTorch
class _GaussianRegressor(RegressorMixin, BaseEstimator):
    """``predict`` and ``predict_dist`` from ``_mean_std(X)`` (in the units of y)."""

    def predict(self, X, return_std=False):
        mean, std = self._mean_std(X)
        return (mean, std) if return_std else mean

    def predict_dist(self, X):
        return stats.norm(*self._mean_std(X))


def _gpytorch_rbf_mean_and_kernel(gpytorch, module, n_features):
    module.mean_module = gpytorch.means.ConstantMean()
    module.covar_module = gpytorch.kernels.ScaleKernel(
        gpytorch.kernels.RBFKernel(ard_num_dims=n_features))


class GPyTorchExactGPRegressor(_GaussianRegressor):
    """GPyTorch's exact GP: constant mean, scaled ARD RBF kernel, Gaussian likelihood, on
    standardised y; ``n_steps`` Adam steps at ``lr`` on the exact marginal likelihood, in
    ``dtype`` on ``device``; ``fast_pred_var`` predicts the variance by LOVE."""

    def __init__(self, n_steps=50, lr=0.1, dtype="float64", fast_pred_var=False,
                 device="cpu"):
        self.n_steps = n_steps
        self.lr = lr
        self.dtype = dtype
        self.fast_pred_var = fast_pred_var
        self.device = device

    def _tensor(self, torch, A):
        return torch.as_tensor(A, dtype=getattr(torch, self.dtype), device=self.device)

    def fit(self, X, y):
        gpytorch = require("gpytorch", "GPyTorch exact GP")
        import torch

        self.y_mean_, self.y_scale_ = y.mean(), y.std()
        Xt, yt = self._tensor(torch, X), self._tensor(torch, (y - self.y_mean_) / self.y_scale_)

        class GP(gpytorch.models.ExactGP):
            def __init__(self, lik):
                super().__init__(Xt, yt, lik)
                _gpytorch_rbf_mean_and_kernel(gpytorch, self, Xt.shape[1])

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                                 self.covar_module(x))

        dtype = getattr(torch, self.dtype)
        lik = gpytorch.likelihoods.GaussianLikelihood().to(self.device, dtype)
        model = GP(lik).to(self.device, dtype)
        model.train()
        lik.train()
        opt = torch.optim.Adam(model.parameters(), lr=self.lr)
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
        for _ in range(self.n_steps):
            opt.zero_grad()
            (-mll(model(Xt), yt)).backward()
            opt.step()
        _sync(torch, self.device)
        model.eval()
        lik.eval()
        self.model_, self.likelihood_ = model, lik
        return self

    def _mean_std(self, X):
        import contextlib

        import gpytorch
        import torch

        fast = gpytorch.settings.fast_pred_var() if self.fast_pred_var else \
            contextlib.nullcontext()
        with torch.no_grad(), fast:
            pred = self.likelihood_(self.model_(self._tensor(torch, X)))
            mean = pred.mean.cpu().double().numpy() * self.y_scale_ + self.y_mean_
            std = pred.variance.sqrt().cpu().double().numpy() * self.y_scale_
        return mean, std


class SVGPRegressor(_GaussianRegressor):
    """GPyTorch's stochastic variational GP (Hensman et al. 2013): ``n_inducing`` learned
    inducing points (started at a random subset of rows), constant mean, scaled ARD RBF
    kernel, Gaussian likelihood, on standardised y in float64; Adam at ``lr`` on the ELBO in
    shuffled mini-batches of ``batch_size`` rows, for ``n_steps`` steps or ``max_epochs``
    epochs, whichever ends first (None: no limit of that kind)."""

    def __init__(self, n_inducing=500, batch_size=1024, n_steps=2000, max_epochs=None, lr=0.01,
                 device="cpu", random_state=0):
        self.n_inducing = n_inducing
        self.batch_size = batch_size
        self.n_steps = n_steps
        self.max_epochs = max_epochs
        self.lr = lr
        self.device = device
        self.random_state = random_state

    def fit(self, X, y):
        gpytorch = require("gpytorch", "GPyTorch SVGP")
        import itertools

        import torch

        torch.manual_seed(self.random_state)
        n = len(X)
        Xt = torch.as_tensor(np.asarray(X, dtype=np.float64), device=self.device)
        self.y_mean_, self.y_scale_ = float(np.mean(y)), float(np.std(y)) or 1.0
        yt = torch.as_tensor((y - self.y_mean_) / self.y_scale_, device=self.device)
        rng = np.random.RandomState(self.random_state)
        z = Xt[rng.choice(n, min(self.n_inducing, n), replace=False)].clone()

        class Model(gpytorch.models.ApproximateGP):
            def __init__(self):
                dist = gpytorch.variational.CholeskyVariationalDistribution(z.shape[0])
                strat = gpytorch.variational.VariationalStrategy(
                    self, z, dist, learn_inducing_locations=True)
                super().__init__(strat)
                _gpytorch_rbf_mean_and_kernel(gpytorch, self, X.shape[1])

            def forward(self, x):
                return gpytorch.distributions.MultivariateNormal(self.mean_module(x),
                                                                 self.covar_module(x))

        model = Model().to(self.device).double()
        lik = gpytorch.likelihoods.GaussianLikelihood().to(self.device).double()
        mll = gpytorch.mlls.VariationalELBO(lik, model, num_data=n)
        opt = torch.optim.Adam(list(model.parameters()) + list(lik.parameters()), lr=self.lr)
        model.train()
        lik.train()
        gen = torch.Generator().manual_seed(self.random_state)
        n_steps = math.inf if self.n_steps is None else self.n_steps
        epochs = itertools.count() if self.max_epochs is None else range(self.max_epochs)
        step = 0
        for _ in epochs:
            if step >= n_steps:
                break
            perm = torch.randperm(n, generator=gen).to(self.device)
            for start in range(0, n, self.batch_size):
                idx = perm[start:start + self.batch_size]
                opt.zero_grad()
                (-mll(model(Xt[idx]), yt[idx])).backward()
                opt.step()
                step += 1
                if step >= n_steps:
                    break
        _sync(torch, self.device)
        model.eval()
        lik.eval()
        self.model_, self.likelihood_ = model, lik
        self.n_steps_ = step
        return self

    def _mean_std(self, X):
        import gpytorch
        import torch

        Xt = torch.as_tensor(np.asarray(X, dtype=np.float64), device=self.device)
        means, variances = [], []
        with torch.no_grad(), gpytorch.settings.fast_pred_var():
            for start in range(0, len(X), 2048):
                pred = self.likelihood_(self.model_(Xt[start:start + 2048]))
                means.append(pred.mean.cpu().numpy())
                variances.append(pred.variance.cpu().numpy())
        return (np.concatenate(means) * self.y_scale_ + self.y_mean_,
                np.sqrt(np.concatenate(variances)) * self.y_scale_)


# ============================================================================ torch MLPs
def mlp(n_in, hidden, n_out, seed):
    """A ReLU MLP ``n_in -> hidden... -> n_out`` initialised with ``torch.manual_seed(seed)``."""
    import torch

    torch.manual_seed(seed)
    layers, width = [], n_in
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, n_out))
    return torch.nn.Sequential(*layers)


def train_early_stopping(net, loss_fn, X, y, *, seed, lr=3e-3, batch_size=64, max_epochs=1000,
                         patience=50, validation_fraction=0.1, weight_decay=0.0):
    """Adam on ``loss_fn(net(x), y)`` with early stopping on a random validation split.

    Returns ``net`` with the weights of the best validation loss and the number of epochs.
    ``X``, ``y`` are float tensors; with fewer than 20 rows no split is made (fixed epochs).
    """
    import torch

    n = X.shape[0]
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    n_val = round(validation_fraction * n) if n >= 20 else 0
    val, tr = perm[:n_val], perm[n_val:]
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, best_epoch, epoch = np.inf, copy.deepcopy(net.state_dict()), 0, 0
    for epoch in range(1, max_epochs + 1):
        net.train()
        order = tr[torch.randperm(tr.numel(), generator=gen)]
        for start in range(0, order.numel(), batch_size):
            idx = order[start:start + batch_size]
            opt.zero_grad()
            loss_fn(net(X[idx]), y[idx]).backward()
            opt.step()
        if n_val:
            net.eval()
            with torch.no_grad():
                v = float(loss_fn(net(X[val]), y[val]))
            if v < best - 1e-6:
                best, best_state, best_epoch = v, copy.deepcopy(net.state_dict()), epoch
            elif epoch - best_epoch >= patience:
                break
    if n_val:
        net.load_state_dict(best_state)
    net.eval()
    return net, (best_epoch if n_val else epoch)


class _TorchRegressor(RegressorMixin, BaseEstimator):
    """Standardises y and holds float32 tensors for the network baselines."""

    def _prepare(self, X, y):
        import torch

        self.y_mean_, self.y_scale_ = float(np.mean(y)), float(np.std(y)) or 1.0
        Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
        yt = torch.as_tensor(((y - self.y_mean_) / self.y_scale_).astype(np.float32))
        return Xt, yt

    def predict(self, X):
        return self.predict_dist(X).mean()


class DeepEnsembleRegressor(_TorchRegressor):
    """``n_members`` MLPs with a Gaussian head each (mean, softplus variance), Gaussian NLL,
    independent initialisations and shuffling, early stopping; the predictive is their
    equal mixture (Lakshminarayanan et al. 2017, without adversarial training)."""

    def __init__(self, n_members=5, hidden=(50, 50), max_epochs=1000, patience=50,
                 random_state=0):
        self.n_members = n_members
        self.hidden = hidden
        self.max_epochs = max_epochs
        self.patience = patience
        self.random_state = random_state

    def fit(self, X, y):
        import torch

        Xt, yt = self._prepare(X, y)

        def nll(out, target):
            var = torch.nn.functional.softplus(out[:, 1]) + 1e-6
            return torch.mean(0.5 * torch.log(var) + 0.5 * (target - out[:, 0]) ** 2 / var)

        self.members_ = []
        for k in range(self.n_members):
            seed = self.random_state + 1000 * k
            net, _ = train_early_stopping(mlp(X.shape[1], self.hidden, 2, seed), nll, Xt, yt,
                                          seed=seed, max_epochs=self.max_epochs,
                                          patience=self.patience)
            self.members_.append(net)
        return self

    def predict_dist(self, X):
        import torch

        from skbnngp.distributions import NormalMixture

        with torch.no_grad():
            out = torch.stack([m(torch.as_tensor(np.asarray(X, dtype=np.float32)))
                               for m in self.members_]).double().numpy()
        loc = out[..., 0] * self.y_scale_ + self.y_mean_
        scale = np.sqrt(np.logaddexp(0.0, out[..., 1]) + 1e-6) * self.y_scale_
        return NormalMixture(loc, scale)


# ============================================================================ laplace-torch
def _fit_last_layer_laplace(net, X, y, sigma_noise):
    """laplace-torch's last-layer Laplace with a full Hessian, fitted on tensors ``X``,
    ``y`` (n, 1) in batches of 256."""
    laplace = require("laplace", "laplace-torch last-layer Laplace")
    import torch

    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=256)
    la = laplace.Laplace(net, "regression", subset_of_weights="last_layer",
                         hessian_structure="full", sigma_noise=sigma_noise)
    la.fit(loader)
    return la


class LaplaceLastLayerRegressor(_TorchRegressor):
    """laplace-torch's last-layer Laplace (full Hessian) on a ReLU MLP it trains on MSE
    (early stopping on 10 %); the prior precision and the noise maximise the Laplace marginal
    likelihood (Adam on their logs, started from precision 1 and the training RMSE)."""

    def __init__(self, hidden=(50, 50), n_hyper_steps=200, max_epochs=1000, patience=50,
                 random_state=0):
        self.hidden = hidden
        self.n_hyper_steps = n_hyper_steps
        self.max_epochs = max_epochs
        self.patience = patience
        self.random_state = random_state

    def fit(self, X, y):
        require("laplace", "laplace-torch last-layer Laplace")
        import torch

        Xt, yt = self._prepare(X, y)
        net, _ = train_early_stopping(
            mlp(X.shape[1], self.hidden, 1, self.random_state),
            lambda out, t: torch.mean((out[:, 0] - t) ** 2), Xt, yt, seed=self.random_state,
            max_epochs=self.max_epochs, patience=self.patience)
        with torch.no_grad():
            rmse = float(torch.sqrt(torch.mean((net(Xt)[:, 0] - yt) ** 2)))
        la = _fit_last_layer_laplace(net, Xt, yt[:, None], max(rmse, 1e-3))
        log_prior = torch.zeros(1, requires_grad=True)
        log_sigma = torch.tensor([math.log(max(rmse, 1e-3))], requires_grad=True)
        opt = torch.optim.Adam([log_prior, log_sigma], lr=0.1)
        for _ in range(self.n_hyper_steps):
            opt.zero_grad()
            (-la.log_marginal_likelihood(log_prior.exp(), log_sigma.exp())).backward()
            opt.step()
        la.prior_precision = log_prior.detach().exp()
        la.sigma_noise = log_sigma.detach().exp()
        self.laplace_ = la
        self.prior_precision_ = float(la.prior_precision)
        self.noise_std_ = float(la.sigma_noise) * self.y_scale_
        return self

    def predict_dist(self, X):
        import torch

        with torch.no_grad():
            f_mu, f_var = self.laplace_(torch.as_tensor(np.asarray(X, dtype=np.float32)),
                                        pred_type="glm")
        var = f_var.reshape(len(X)).double().numpy() + float(self.laplace_.sigma_noise) ** 2
        return stats.norm(f_mu.reshape(len(X)).double().numpy() * self.y_scale_ + self.y_mean_,
                          np.sqrt(var) * self.y_scale_)


class PosthocLaplaceRegressor(_GaussianRegressor):
    """laplace-torch's last-layer Laplace (full Hessian) on a trained ``network``, post hoc:
    the network sees ``(X - x_offset) / x_scale`` and predicts ``(y - y_offset) / y_scale``;
    the noise is ``noise_variance`` (in those units); the prior precision maximises the
    Laplace marginal likelihood (laplace-torch's ``optimize_prior_precision``)."""

    def __init__(self, network, noise_variance, *, x_offset=0.0, x_scale=1.0, y_offset=0.0,
                 y_scale=1.0):
        self.network = network
        self.noise_variance = noise_variance
        self.x_offset = x_offset
        self.x_scale = x_scale
        self.y_offset = y_offset
        self.y_scale = y_scale

    def _x(self, X):
        import torch

        return torch.as_tensor((X - self.x_offset) / self.x_scale)

    def fit(self, X, y):
        import torch

        ys = torch.as_tensor((y - self.y_offset) / self.y_scale)[:, None]
        la = _fit_last_layer_laplace(self.network, self._x(X), ys,
                                     float(np.sqrt(self.noise_variance)))
        la.optimize_prior_precision(method="marglik")
        self.laplace_ = la
        self.prior_precision_ = float(la.prior_precision)
        return self

    def _mean_std(self, X):
        import torch

        with torch.no_grad():
            f_mu, f_var = self.laplace_(self._x(X), pred_type="glm")
        mean = f_mu.numpy()[:, 0] * self.y_scale + self.y_offset
        std = np.sqrt(f_var.numpy().reshape(len(X)) + self.noise_variance) * self.y_scale
        return mean, std


# ============================================================================ heteroscedastic peers
def _validation_split(n, random_state, fraction=0.1):
    """``(train, validation)`` row indices: a random ``fraction`` held out for early stopping."""
    perm = np.random.RandomState(random_state).permutation(n)
    n_val = max(1, round(fraction * n))
    return perm[n_val:], perm[:n_val]


class MLPEnsembleRegressor(RegressorMixin, BaseEstimator):
    """``n_members`` scikit-learn ``MLPRegressor(early_stopping=True)`` members with different
    seeds on standardised y; the predictive is the equal mixture of Gaussians centred on the
    members' means, each with the variance of that member's errors on its own early-stopping
    validation rows (its held-out MSE): the mixture's variance is the members' spread plus
    their mean validation MSE. One noise level for every input, as a deep ensemble of
    point-prediction networks has."""

    def __init__(self, n_members=5, hidden_layer_sizes=(100,), max_iter=2000, random_state=0):
        self.n_members = n_members
        self.hidden_layer_sizes = hidden_layer_sizes
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X, y):
        from sklearn.neural_network import MLPRegressor

        self.y_mean_, self.y_scale_ = float(np.mean(y)), float(np.std(y)) or 1.0
        ys = (y - self.y_mean_) / self.y_scale_
        self.members_, self.mse_ = [], []
        for k in range(self.n_members):
            seed = self.random_state + 1000 * k
            # the member's own validation split (MLPRegressor's 10 %), drawn here to score it
            tr, va = _validation_split(len(y), seed)
            m = MLPRegressor(hidden_layer_sizes=self.hidden_layer_sizes, early_stopping=True,
                             max_iter=self.max_iter,
                             random_state=seed).fit(X[tr], ys[tr])
            self.members_.append(m)
            self.mse_.append(float(np.mean((m.predict(X[va]) - ys[va]) ** 2)))
        return self

    def predict_dist(self, X):
        from skbnngp.distributions import NormalMixture

        loc = np.stack([m.predict(X) for m in self.members_]) * self.y_scale_ + self.y_mean_
        scale = np.sqrt(np.asarray(self.mse_))[:, None] * self.y_scale_ * np.ones_like(loc)
        return NormalMixture(loc, scale)

    def predict(self, X):
        return self.predict_dist(X).mean()


class NGBoostRegressor(RegressorMixin, BaseEstimator):
    """NGBoost's ``NGBRegressor`` (Normal, default base learner), early-stopped on a random
    10 % validation split (``early_stopping_rounds``), then used as fitted (best iteration)."""

    def __init__(self, n_estimators=2000, early_stopping_rounds=50, random_state=0):
        self.n_estimators = n_estimators
        self.early_stopping_rounds = early_stopping_rounds
        self.random_state = random_state

    def fit(self, X, y):
        ngboost = require("ngboost", "NGBoost")
        tr, va = _validation_split(len(y), self.random_state)
        self.model_ = ngboost.NGBRegressor(n_estimators=self.n_estimators, verbose=False,
                                           random_state=self.random_state).fit(
            X[tr], y[tr], X_val=X[va], Y_val=y[va],
            early_stopping_rounds=self.early_stopping_rounds)
        return self

    def predict_dist(self, X):
        p = self.model_.pred_dist(X).params
        return stats.norm(p["loc"], p["scale"])

    def predict(self, X):
        return self.model_.predict(X)


class CatBoostUncertaintyRegressor(RegressorMixin, BaseEstimator):
    """CatBoost with ``loss_function="RMSEWithUncertainty"`` (a mean and a data variance per
    row), early-stopped on a random 10 % validation split, one thread; ``predict``'s default
    prediction type for this loss returns the columns (mean, variance)."""

    def __init__(self, iterations=3000, early_stopping_rounds=100, random_state=0):
        self.iterations = iterations
        self.early_stopping_rounds = early_stopping_rounds
        self.random_state = random_state

    def fit(self, X, y):
        catboost = require("catboost", "CatBoost")
        tr, va = _validation_split(len(y), self.random_state)
        self.model_ = catboost.CatBoostRegressor(
            loss_function="RMSEWithUncertainty", iterations=self.iterations, thread_count=1,
            allow_writing_files=False, random_seed=self.random_state, verbose=0).fit(
            X[tr], y[tr], eval_set=(X[va], y[va]),
            early_stopping_rounds=self.early_stopping_rounds, use_best_model=True)
        return self

    def predict_dist(self, X):
        p = np.asarray(self.model_.predict(X))
        return stats.norm(p[:, 0], np.sqrt(np.maximum(p[:, 1], 1e-12)))

    def predict(self, X):
        return np.asarray(self.model_.predict(X))[:, 0]
