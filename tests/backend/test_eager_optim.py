"""Optimisers whose compiler-marked methods run their bodies, and a plain MLP's per-sample
gradients written by hand: both the numbers of what they replace, without importing torch's
compiler.

On one machine the same kernels run on the same operands, so the numbers agree to round-off;
the tolerances (1e-12 relative in float64, 1e-6 in float32) leave room for a BLAS that sums a
product of a batch in another order than row by row, and nothing more.
"""

import subprocess
import sys
import textwrap

import pytest
import torch
from torch.func import functional_call, grad, vmap

from skbnngp._backend import build_mlp
from skbnngp._backend._eager_optim import eager_class, make_optimizer
from skbnngp._backend._flat import AdamStep
from skbnngp._backend._jacobian import body_jacobians, split_parameters
from skbnngp._backend._mlp_grad import per_sample_body_gradients

TOL = {torch.float64: 1e-12, torch.float32: 1e-6}


def _quadratic(p):
    return ((p - torch.arange(p.numel(), dtype=p.dtype)) ** 2 * (1 + p.abs())).sum()


@pytest.mark.parametrize("cls, options", [
    (torch.optim.Adam, {"lr": 0.05}),
    (torch.optim.Adam, {"lr": 0.05, "weight_decay": 0.1, "foreach": False}),
    (torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.1}),
])
def test_adam_steps_as_torch(cls, options):
    ps = [torch.linspace(-1, 1, 6, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    opts = [cls([ps[0]], **options), make_optimizer(cls, [ps[1]], **options)]
    assert isinstance(opts[1], cls)
    for _ in range(25):
        for p, opt in zip(ps, opts):
            opt.zero_grad(set_to_none=True)
            _quadratic(p).backward()
            opt.step()
    torch.testing.assert_close(ps[1], ps[0], rtol=TOL[torch.float64], atol=0)
    state = opts[1].state_dict()
    again = make_optimizer(cls, [ps[1]], **options)
    again.load_state_dict(state)
    assert again.state_dict()["state"][0]["step"] == 25


def test_adam_step_leaves_grad_mode_and_runs_closure_with_grad():
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    opt = make_optimizer(torch.optim.Adam, [p], lr=0.1)

    def closure():
        assert torch.is_grad_enabled()
        opt.zero_grad()
        loss = _quadratic(p)
        loss.backward()
        return loss

    assert torch.is_grad_enabled()
    loss = opt.step(closure)
    assert torch.is_grad_enabled() and float(loss.detach()) > 0 \
        and float(p.detach().abs().sum()) > 0
    with torch.no_grad():
        opt.step(closure)
        assert not torch.is_grad_enabled()


def test_lbfgs_as_torch():
    ps = [torch.full((4,), 3.0, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    make = [torch.optim.LBFGS, lambda params, **kw: make_optimizer(torch.optim.LBFGS, params,
                                                                   **kw)]
    for p, mk in zip(ps, make):
        opt = mk([p], lr=1.0, max_iter=30, line_search_fn="strong_wolfe")

        def closure(p=p, opt=opt):
            opt.zero_grad()
            loss = _quadratic(p)
            loss.backward()
            return loss
        opt.step(closure)
    torch.testing.assert_close(ps[1], ps[0], rtol=TOL[torch.float64], atol=0)
    assert float(_quadratic(ps[1].detach())) < 1e-6  # it did minimise (from 27)


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_flat_adam_step_takes_the_functional_update(cls):
    """The trainer's optimiser (an eager subclass) keeps AdamStep's functional update, the
    same numbers as ``step`` without its per-call overhead."""
    ps = [torch.linspace(-1, 1, 6, dtype=torch.float64, requires_grad=True) for _ in range(2)]
    opts = [make_optimizer(cls, [p], lr=0.05, weight_decay=0.1, foreach=False) for p in ps]
    fast = AdamStep(opts[1])
    assert fast.fn is not None
    for _ in range(5):
        for p, step in zip(ps, (opts[0].step, fast)):
            p.grad = None
            _quadratic(p).backward()
            step()
    torch.testing.assert_close(ps[1], ps[0], rtol=TOL[torch.float64], atol=0)


def test_step_hooks_still_run():
    seen = []
    p = torch.ones(2, requires_grad=True)
    opt = make_optimizer(torch.optim.Adam, [p], lr=0.1)
    opt.register_step_post_hook(lambda *args: seen.append(1))
    p.sum().backward()
    opt.step()
    assert seen == [1]
    assert eager_class(torch.optim.Adam) is eager_class(torch.optim.Adam)


def _reference(net, names, X):
    params = dict(net.named_parameters())
    body = {k: params[k].detach() for k in names}
    rest = {k: v.detach() for k, v in params.items() if k not in body}

    def f(p, x):
        return functional_call(net, {**rest, **p}, (x.unsqueeze(0),)).reshape(())

    g = vmap(grad(f), in_dims=(None, 0))(body, X)
    return torch.cat([g[k].reshape(X.shape[0], -1) for k in names], dim=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("hidden", [(7,), (6, 5, 4)])
def test_per_sample_gradients_as_torch_func(dtype, activation, hidden):
    net = build_mlp(3, hidden, 1, activation=activation, seed=2, dtype=dtype)
    X = torch.randn(23, 3, generator=torch.Generator().manual_seed(0), dtype=dtype)
    _, _, names = split_parameters(net)
    J = torch.cat([J for _, J in body_jacobians(net, names, X, chunk=10)])
    torch.testing.assert_close(J, _reference(net, names, X), rtol=TOL[dtype], atol=TOL[dtype])


def test_per_sample_gradients_fall_back_to_torch_func():
    net = build_mlp(3, (5,), 1, activation="relu", seed=0)
    _, _, names = split_parameters(net)
    assert per_sample_body_gradients(build_mlp(3, (5,), 2, seed=0), names) is None
    assert per_sample_body_gradients(net, names[2:]) is None  # not every hidden parameter
    X = torch.randn(6, 3, dtype=torch.float64)
    # the first layer frozen: torch.func's answer over the parameters left
    net[0].weight.requires_grad_(False)
    _, _, names = split_parameters(net)
    J = torch.cat([J for _, J in body_jacobians(net, names, X, chunk=4)])
    torch.testing.assert_close(J, _reference(net, names, X))


def test_default_fits_do_not_import_torch_compiler():
    """The first default fit of each estimator in a fresh process, and the loading and
    prediction of the fitted model, import neither ``torch._dynamo`` nor SymPy, whose import
    costs more than a small fit."""
    code = textwrap.dedent("""
        import pickle, sys, warnings
        import numpy as np
        warnings.simplefilter("ignore")
        from skbnngp.utils import all_estimators
        rng = np.random.default_rng(0)
        X = rng.normal(size=(60, 3))
        y = X[:, 0] + 0.1 * rng.normal(size=60)
        for name, cls in all_estimators():
            if name == "ConformalRegressor":
                continue
            small = {"max_iter": 3} if "max_iter" in cls().get_params() and name in (
                "DBKRegressor", "RichBLLRegressor", "FiDGPClassifier") else {}
            est = cls(device="cpu", random_state=0, **small)
            classifier = "Classifier" in name
            est.fit(X, (y > 0).astype(int) if classifier else y)
            est = pickle.loads(pickle.dumps(est))  # a saved model, loaded
            est.predict_proba(X) if classifier else est.predict(X, return_std=True)
            loaded = [m for m in ("torch._dynamo", "sympy") if m in sys.modules]
            assert not loaded, (name, loaded)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
