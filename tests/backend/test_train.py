"""The shared network-training loop and MLP builder (used by DBK, Rich-BLL and FiD-GP)."""

import math

import numpy as np
import pytest
import torch

from skbnngp._backend import NetworkTrainer, TrainingDivergedError, build_mlp, last_linear

DT = torch.float64


def _regression(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 2, generator=g, dtype=DT) * 2 - 1
    y = torch.sin(3 * X[:, :1]) + 0.05 * torch.randn(n, 1, generator=g, dtype=DT)
    return X, y


def _mse_trainer(net, X, y, **kw):
    def loss(rows, epoch):
        return (net(X[rows]) - y[rows]).square().mean()
    return NetworkTrainer(loss, list(net.parameters()), modules=[net], **kw)


def test_build_mlp_is_seeded_on_the_host_and_leaves_global_rng_alone():
    state = torch.random.get_rng_state()
    a = build_mlp(3, (5, 4), 2, seed=1)
    b = build_mlp(3, (5, 4), 2, seed=1)
    c = build_mlp(3, (5, 4), 2, seed=2)
    assert torch.equal(torch.random.get_rng_state(), state)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert not torch.equal(a[0].weight, c[0].weight)
    # PyTorch's default scale U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert float(a[0].weight.detach().abs().max()) <= 1 / math.sqrt(3)
    assert last_linear(a) is a[-1] and a[-1].out_features == 2


def test_build_mlp_resnet_and_validation():
    net = build_mlp(3, (6, 6, 6), 2, architecture="resnet", activation="relu")
    assert net(torch.zeros(4, 3, dtype=DT)).shape == (4, 2)
    assert sum(isinstance(m, torch.nn.Linear) for m in net.modules()) == 4
    with pytest.raises(ValueError, match="equal width"):
        build_mlp(3, (6, 5), 2, architecture="resnet")
    with pytest.raises(ValueError, match="activation"):
        build_mlp(3, (6,), 2, activation="swish!")


def test_training_reduces_loss_and_is_reproducible():
    X, y = _regression()
    curves = []
    for _ in range(2):
        net = build_mlp(2, (16,), 1, seed=0)
        res = _mse_trainer(net, X, y, learning_rate=1e-2).fit(
            64, batch_size=16, max_epochs=60, rng=np.random.RandomState(0), tol=0.0,
            n_iter_no_change=1000)
        curves.append(res.loss_curve)
    assert curves[0] == curves[1]
    assert len(curves[0]) == 60 and curves[0][-1] < 0.3 * curves[0][0]
    assert res.n_steps == 60 * 4 and not res.converged


def test_early_stopping_restores_the_best_state():
    """Validation scores are recorded every interval; the best epoch's state is restored."""
    X, y = _regression()
    net = build_mlp(2, (16,), 1, seed=0)
    trainer = _mse_trainer(net, X, y, learning_rate=1e-2)
    snaps = {}
    # a validation score that is best at epoch 20 and worse afterwards
    scores = iter([5.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])

    def validate():
        snaps[trainer.epoch] = [p.detach().clone() for p in net.parameters()]
        return next(scores)

    res = trainer.fit(64, max_epochs=200, validate=validate, validation_interval=10,
                      n_iter_no_change=30, rng=np.random.RandomState(0))
    assert res.validation_epochs == [10, 20, 30, 40, 50]
    assert res.best_epoch == 20 and res.stopped_early and res.converged
    for p, q in zip(net.parameters(), snaps[20]):
        assert torch.equal(p, q)


def test_plateau_schedule_restores_the_best_state_and_lowers_the_rate():
    """``plateau_drops``: each plateau of ``n_iter_no_change`` epochs goes back to the best
    state and multiplies the rate by ``plateau_factor``; the plateau after the last drop
    stops. Patience counts from the later of the best epoch and the last drop."""
    X, y = _regression()
    net = build_mlp(2, (16,), 1, seed=0)
    trainer = _mse_trainer(net, X, y, learning_rate=1e-2)
    snaps, rates = {}, {}
    # best at epoch 20; after the first drop (epoch 50) a new best at 60; then flat
    scores = iter([5.0, 1.0, 2.0, 3.0, 4.0, 0.5] + [9.0] * 20)

    def validate():
        snaps[trainer.epoch] = [p.detach().clone() for p in net.parameters()]
        rates[trainer.epoch] = trainer.optimizer.param_groups[0]["lr"]
        return next(scores)

    res = trainer.fit(64, max_epochs=500, validate=validate, validation_interval=10,
                      n_iter_no_change=30, plateau_drops=2, plateau_factor=0.1,
                      rng=np.random.RandomState(0))
    # plateaus at 50 (30 after the best at 20) and 90 (30 after the best at 60): two drops;
    # the next plateau, 30 epochs after the drop at 90, stops at 120
    assert res.lr_drops == [50, 90]
    assert res.n_epochs == 120 and res.stopped_early and res.best_epoch == 60
    assert rates[50] == pytest.approx(1e-2) and rates[60] == pytest.approx(1e-3)
    assert rates[100] == pytest.approx(1e-4)
    for p, q in zip(net.parameters(), snaps[60]):
        assert torch.equal(p, q)
    # without drops the same scores stop at the first plateau
    net2 = build_mlp(2, (16,), 1, seed=0)
    scores = iter([5.0, 1.0, 2.0, 3.0, 4.0, 0.5] + [9.0] * 20)
    res2 = _mse_trainer(net2, X, y, learning_rate=1e-2).fit(
        64, max_epochs=500, validate=lambda: next(scores), validation_interval=10,
        n_iter_no_change=30, rng=np.random.RandomState(0))
    assert res2.lr_drops == [] and res2.n_epochs == 50 and res2.best_epoch == 20


def test_plateau_patience_shortens_the_plateaus_after_a_drop():
    """``plateau_patience``: once the rate has been lowered, a plateau is that many epochs
    without improvement, not ``n_iter_no_change``."""
    X, y = _regression()
    net = build_mlp(2, (16,), 1, seed=0)
    # best at 20; no better score after the first plateau
    scores = iter([5.0, 1.0] + [9.0] * 40)
    res = _mse_trainer(net, X, y, learning_rate=1e-2).fit(
        64, max_epochs=500, validate=lambda: next(scores), validation_interval=10,
        n_iter_no_change=30, plateau_drops=2, plateau_patience=10,
        rng=np.random.RandomState(0))
    # first plateau at 50 (30 after the best); then 10 epochs each: a drop at 60, stop at 70
    assert res.lr_drops == [50, 60]
    assert res.n_epochs == 70 and res.stopped_early and res.best_epoch == 20


def test_without_validation_stops_on_a_flat_training_loss():
    X, y = _regression()
    net = build_mlp(2, (), 1, seed=0)  # a linear model: converges fast
    res = _mse_trainer(net, X, y, learning_rate=0.1).fit(
        64, max_epochs=5000, tol=1e-6, n_iter_no_change=20, rng=np.random.RandomState(0))
    assert res.converged and res.n_epochs < 5000


def test_non_finite_loss_raises_and_restores_last_finite_state():
    X, y = _regression()
    net = build_mlp(2, (8,), 1, seed=0)

    def loss(rows, epoch):
        out = (net(X[rows]) - y[rows]).square().mean()
        return out * (float("nan") if epoch >= 25 else 1.0)

    trainer = NetworkTrainer(loss, list(net.parameters()), modules=[net], learning_rate=1e-2)
    good = {}

    def validate():
        good[trainer.epoch] = [p.detach().clone() for p in net.parameters()]
        return 1.0

    with pytest.raises(TrainingDivergedError, match="non-finite at epoch 26"):
        trainer.fit(64, max_epochs=100, validate=validate, validation_interval=5,
                    n_iter_no_change=500,
                    sync_steps=5, rng=np.random.RandomState(0))
    # restored to the state after epoch 25 (the last check whose losses were all finite)
    for p in net.parameters():
        assert bool(torch.isfinite(p).all())
    for p, q in zip(net.parameters(), good[25]):
        assert torch.equal(p, q)
    assert issubclass(TrainingDivergedError, ValueError)


def test_weight_decay_applies_to_decay_params_only():
    w = torch.ones(3, dtype=DT, requires_grad=True)
    v = torch.ones(3, dtype=DT, requires_grad=True)

    def loss(rows, epoch):  # zero gradient from the data: only the decay moves parameters
        return 0.0 * (w.sum() + v.sum())

    NetworkTrainer(loss, [w], [v], learning_rate=0.1, weight_decay=1.0).fit(
        4, max_epochs=5, n_iter_no_change=100, rng=np.random.RandomState(0))
    assert bool((w < 1).all()) and torch.equal(v, torch.ones(3, dtype=DT))


def test_lr_milestones_and_grad_clip():
    p = torch.zeros(1, dtype=DT, requires_grad=True)
    seen = []

    def loss(rows, epoch):
        return -1e6 * p.sum()

    tr = NetworkTrainer(loss, [p], learning_rate=1.0, lr_milestones=(3,), lr_gamma=0.1,
                        grad_clip=1.0, optimizer="adamw")
    for _ in range(5):
        tr.run_epoch(2, None, np.random.RandomState(0))
        seen.append(tr.optimizer.param_groups[0]["lr"])
    assert seen == [1.0, 1.0, 1.0, pytest.approx(0.1), pytest.approx(0.1)]
    with pytest.raises(ValueError, match="optimizer"):
        NetworkTrainer(loss, [p], optimizer="sgd!")


def test_verbose_prints_progress(capsys):
    X, y = _regression()
    net = build_mlp(2, (4,), 1, seed=0)
    _mse_trainer(net, X, y).fit(64, max_epochs=20, validate=lambda: 1.0,
                                validation_interval=10, verbose=2, label="unit",
                                rng=np.random.RandomState(0))
    out = capsys.readouterr().out
    assert out.count("[unit] epoch") == 2 and "val" in out and "ms/epoch" in out


def test_verbose_1_is_a_summary_with_the_drops_and_why_training_stopped(capsys):
    """``verbose=1`` printed a line at every validation (750 lines for a default Rich-BLL
    fit) and never why training stopped: now a line about every ``REPORT_EPOCHS`` epochs,
    one per learning-rate drop and a last line with the reason and the epoch kept."""
    from skbnngp._backend import _train

    X, y = _regression()
    net = build_mlp(2, (4,), 1, seed=0)
    # best at epoch 2; plateaus of 30 epochs: drops at 32 and 62, the stop at 92
    scores = iter([5.0, 1.0] + [9.0] * 200)
    res = _mse_trainer(net, X, y).fit(
        64, max_epochs=500, validate=lambda: next(scores), validation_interval=1,
        n_iter_no_change=30, plateau_drops=2, verbose=1, label="unit",
        rng=np.random.RandomState(0))
    lines = capsys.readouterr().out.splitlines()
    assert res.lr_drops == [32, 62] and res.n_epochs == 92
    every = _train.REPORT_EPOCHS
    progress = [line for line in lines if "ms/epoch" in line]
    assert [int(line.split()[2]) for line in progress] == list(range(every, 92, every))
    drops = [line for line in lines if "learning rate x0.1" in line]
    assert [int(line.split()[2]) for line in drops] == [32, 62]
    assert all("back to epoch 2 " in line for line in drops)
    assert len(lines) == len(progress) + 3
    assert lines[-1].startswith("[unit] stopped after 92 epochs: no improvement for 30 "
                                "epochs; kept epoch 2 (val  1)")
    # a fixed schedule says so rather than "reached max_iter"
    _mse_trainer(build_mlp(2, (4,), 1, seed=0), X, y).fit(
        64, max_epochs=3, n_iter_no_change=None, verbose=1, label="unit",
        rng=np.random.RandomState(0))
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "[unit] ran its 3 epochs (a fixed schedule: no stopping rule)")
