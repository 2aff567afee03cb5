"""Does refining the hyperparameters on all rows above subset_size pay (issue 19 item 5)?

Usage: python benchmarks/bench_mixed_activation_refine.py N_TRAIN SEED REFINE_ITER...
(friedman1, 8 features, noise 1; 2,000 test rows; each REFINE_ITER patches the private
``skbnngp._mixed_activation.REFINE_ITER``). One JSON line per setting; results of
``8000 0 0 30`` in results/bench_mixed_activation.refine.jsonl."""
import sys, time, json, warnings
from unittest import mock
import numpy as np, torch
from sklearn.datasets import make_friedman1
from skbnngp import MixedActivationGPRegressor, _mixed_activation
torch.set_num_threads(1)
n_train = int(sys.argv[1]); seed = int(sys.argv[2]); iters = [int(a) for a in sys.argv[3:]]
X, y = make_friedman1(n_train + 2000, 8, noise=1.0, random_state=seed)
Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
for it in iters:
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as w, \
            mock.patch.object(_mixed_activation, "REFINE_ITER", it):
        warnings.simplefilter("always")
        reg = MixedActivationGPRegressor(device="cpu", random_state=0).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    m, s = reg.predict(Xte, return_std=True)
    z = (yte - m) / s
    print(json.dumps(dict(n=n_train, seed=seed, refine_iter=it, fit_s=round(fit_s, 1), n_iter=reg.n_iter_,
          nlpd=float(np.mean(0.5*np.log(2*np.pi*s**2)+0.5*z**2)), rmse=float(np.sqrt(np.mean((yte-m)**2))),
          cov95=float(np.mean(np.abs(z) < 1.96)), noise=reg.noise_variance_, theta=[round(t, 3) for t in reg.theta_],
          warns=[str(x.message)[:80] for x in w])), flush=True)
