"""The MLP's squared error with a hand-written gradient, and the trainer's flat-buffer step.

The hand-written gradient calls the kernels autograd's backward calls, so on one machine the
numbers agree to round-off; the tolerances (1e-12 relative in float64, 1e-6 in float32) leave
room for a BLAS that sums a transposed product in another order, and nothing more.
"""

import numpy as np
import pytest
import torch

from skbnngp._backend import NetworkTrainer, build_mlp
from skbnngp._backend._flat import AdamStep, FlatParameters, clip_grad_norm_
from skbnngp._backend._mlp_grad import MLPSquaredError
from skbnngp._backend._projection import mse_objective

TOL = {torch.float64: 1e-12, torch.float32: 1e-6}


def _data(n=120, d=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=dtype)
    Y = torch.sin(X[:, :1]) + 0.1 * torch.randn(n, 1, generator=g, dtype=dtype)
    w = torch.rand(n, generator=g, dtype=dtype) + 0.5
    return X, Y, w


def _autograd_loss(net, X, Y, w):
    """The same objective through autograd (what ``mse_objective`` built before)."""
    def loss(rows, epoch):
        r = (net(X[rows]).reshape(-1, 1) - Y[rows]).square()
        return r.mean() if w is None else (w[rows] * r).mean()
    return loss


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("batch", [1, 7, 32, 120])
def test_gradient_equals_autograd(dtype, activation, weighted, batch):
    X, Y, w = _data(dtype=dtype)
    w = (w / w.mean()).reshape(-1, 1) if weighted else None
    net = build_mlp(5, (16, 9), 1, activation=activation, seed=3, dtype=dtype)
    fast = MLPSquaredError.for_network(net, X, Y, w)
    assert fast is not None
    rows = torch.randperm(120, generator=torch.Generator().manual_seed(batch))[:batch]
    loss = _autograd_loss(net, X, Y, w)(rows, 0)
    loss.backward()
    expected = [p.grad.clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = None
    value = fast.value_and_grad(rows, 0)
    tol = TOL[dtype]
    torch.testing.assert_close(value, loss.detach(), rtol=tol, atol=0)
    for p, g in zip(net.parameters(), expected):
        torch.testing.assert_close(p.grad, g, rtol=tol, atol=tol * float(g.abs().max()))
    # calling it gives the differentiable loss, like any other objective
    torch.testing.assert_close(fast(rows, 0), loss, rtol=tol, atol=0)
    # a second call writes into the existing gradients instead of adding to them
    fast.value_and_grad(rows, 0)
    for p, g in zip(net.parameters(), expected):
        torch.testing.assert_close(p.grad, g, rtol=tol, atol=tol * float(g.abs().max()))


def test_other_networks_keep_autograd():
    X, Y, _ = _data()
    resnet = build_mlp(5, (8, 8), 1, architecture="resnet", activation="relu")
    gelu = build_mlp(5, (8,), 1, activation="gelu")
    own = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 1)).double()
    frozen = build_mlp(5, (8,), 1)
    frozen[0].weight.requires_grad_(False)
    for net in (resnet, gelu, own, frozen):
        assert MLPSquaredError.for_network(net, X, Y) is None
        assert not hasattr(mse_objective(net, X, Y), "value_and_grad")
    assert isinstance(mse_objective(build_mlp(5, (8,), 1), X, Y), MLPSquaredError)
    # a linear model (no hidden layer) is covered too
    assert MLPSquaredError.for_network(build_mlp(5, (), 1), X, Y) is not None


def _train(net, loss, epochs, weight_decay=0.0, lr=0.05, rng_seed=0, chunks=(None,)):
    trainer = NetworkTrainer(loss, list(net.parameters()), modules=[net], learning_rate=lr,
                             weight_decay=weight_decay, grad_clip=0.5)
    rng = np.random.RandomState(rng_seed)
    curve = []
    for part in chunks:
        res = trainer.fit(120, batch_size=16, max_epochs=part or epochs, rng=rng,
                          n_iter_no_change=None)
        curve += res.loss_curve
    return trainer, curve


@pytest.mark.parametrize("weighted", [False, True])
def test_flat_training_follows_the_autograd_trajectory(weighted):
    """Adam on one flat buffer and the clipped hand-written gradient: the same steps as
    per-tensor Adam on autograd's gradient (a high rate so the clip acts)."""
    X, Y, w = _data()
    w = (w / w.mean()).reshape(-1, 1) if weighted else None
    ref = build_mlp(5, (16, 9), 1, activation="relu", seed=1)
    fast = build_mlp(5, (16, 9), 1, activation="relu", seed=1)
    t_ref, c_ref = _train(ref, _autograd_loss(ref, X, Y, w), 15, weight_decay=1e-3)
    t_fast, c_fast = _train(fast, MLPSquaredError.for_network(fast, X, Y, w), 15,
                            weight_decay=1e-3)
    assert not t_ref._flats and len(t_fast._flats) == 1
    np.testing.assert_allclose(c_fast, c_ref, rtol=1e-10)
    for p, q in zip(fast.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


def test_flat_path_only_when_the_loss_writes_the_trained_parameters():
    """The loss's gradients are used only when it writes those of every trained parameter;
    parameters split over two groups get one buffer each and train as with autograd."""
    X, Y, _ = _data()
    nets = [build_mlp(5, (8,), 1, activation="relu", seed=0) for _ in range(2)]
    losses = [MLPSquaredError.for_network(nets[0], X, Y), _autograd_loss(nets[1], X, Y, None)]
    trainers = []
    for net, loss in zip(nets, losses):
        ps = list(net.parameters())
        trainers.append(NetworkTrainer(loss, ps[:2], ps[2:], modules=[net], learning_rate=0.05,
                                       weight_decay=1e-3, grad_clip=0.5))
        trainers[-1].fit(120, batch_size=16, max_epochs=3, rng=np.random.RandomState(0),
                         n_iter_no_change=None)
    assert len(trainers[0]._flats) == 2 and not trainers[1]._flats
    for p, q in zip(*(net.parameters() for net in nets)):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-13)
    ps = list(nets[0].parameters())
    assert not NetworkTrainer(losses[0], ps[:2], modules=[nets[0]])._flats  # a subset


def test_flat_buffer_is_released_after_fit_and_rebound_for_the_next():
    X, Y, _ = _data()
    a = build_mlp(5, (16,), 1, activation="tanh", seed=2)
    b = build_mlp(5, (16,), 1, activation="tanh", seed=2)
    t_a, curve_a = _train(a, MLPSquaredError.for_network(a, X, Y), 6, chunks=(2, 4))
    _, curve_b = _train(b, MLPSquaredError.for_network(b, X, Y), 6)
    # after fit each parameter owns its memory again and holds no gradient
    buf = t_a._flats[0].buffer
    for p in a.parameters():
        assert p.grad is None and p._base is None
        assert p.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr()
    # two fits in a row (Adam's state kept) are one fit of as many epochs
    np.testing.assert_allclose(curve_a, curve_b, rtol=1e-12)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-12, atol=0)


def test_flat_parameters_clip_matches_torch():
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float64))
          for s in [(4, 3), (4,), (1, 4), (1,)]]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    flats = [FlatParameters(ps[:2]), FlatParameters(ps[2:])]
    for p, q in zip(ps, ref):
        q.grad = torch.randn(p.shape, generator=g, dtype=torch.float64) * 3
        p.grad.copy_(q.grad)
    clip_grad_norm_(flats, ps, 1.0)
    torch.nn.utils.clip_grad_norm_(ref, 1.0)
    for p, q in zip(ps, ref):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=0)
    total = torch.linalg.vector_norm(torch.cat([f.buffer.grad for f in flats]))
    assert abs(float(total) - 1.0) < 1e-5
    # the parameters are views of the buffers while bound
    with torch.no_grad():
        flats[0].buffer.zero_()
    assert all(float(p.detach().abs().max()) == 0.0 for p in ps[:2])
    assert float(ps[2].detach().abs().max()) > 0
    assert not FlatParameters.supports([ps[0], ps[1].float()])


@pytest.mark.parametrize("target", [0.3, 1.0 - 1e-9, 1.0 - 1e-7, 1.0, 1.0 + 1e-9, 4.0,
                                    float("nan")])
def test_flat_clip_matches_torch_at_and_near_the_bound(target):
    """Below the bound the quick check skips the clip, whose factor is then exactly 1; near
    it and above (and with a NaN gradient) the clip runs as torch's: the same numbers."""
    g = torch.Generator().manual_seed(1)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=torch.float64))
          for s in [(5, 3), (5,), (1, 5), (1,)]]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in ps]
    flats = [FlatParameters(ps[:2]), FlatParameters(ps[2:])]
    grads = [torch.randn(p.shape, generator=g, dtype=torch.float64) for p in ps]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(q) for q in grads]))
    for p, q, gr in zip(ps, ref, grads):
        q.grad = gr * (target / norm)
        p.grad.copy_(q.grad)
    clip_grad_norm_(flats, ps, 1.0)
    torch.nn.utils.clip_grad_norm_(ref, 1.0)
    for p, q in zip(ps, ref):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("Optimizer", [torch.optim.Adam, torch.optim.AdamW])
def test_the_flat_adam_step_is_optimizer_step(Optimizer):
    """``AdamStep`` (torch's functional Adam on the optimiser's own state) moves two flat
    groups exactly as ``optimizer.step()``: 30 steps with weight decay and a learning rate
    changed between steps, equal bit for bit; its functional path runs on this torch."""
    g = torch.Generator().manual_seed(0)
    start = [torch.randn(n, generator=g, dtype=torch.float64) for n in (7, 3)]
    grads = [[torch.randn(n, generator=g, dtype=torch.float64) for n in (7, 3)]
             for _ in range(30)]
    out = []
    for functional in (True, False):
        ps = [torch.nn.Parameter(x.clone()) for x in start]
        opt = Optimizer([{"params": [ps[0]], "weight_decay": 0.01},
                         {"params": [ps[1]], "weight_decay": 0.0}], lr=0.05, foreach=False)
        step = AdamStep(opt) if functional else opt.step
        if functional:
            assert step.fn is not None
        for t, gs in enumerate(grads):
            for p, gr in zip(ps, gs):
                p.grad = gr.clone()
            for group in opt.param_groups:
                group["lr"] = 0.05 * 0.5 ** (t // 10)
            step()
        out.append([p.detach().clone() for p in ps])
    for a, b in zip(*out):
        assert torch.equal(a, b)
