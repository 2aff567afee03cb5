"""Backend device resolution, chunking, seeding and the optimisation loop."""

import numpy as np
import pytest
import torch

from skbnngp._backend import (as_tensor, chunked_apply, make_generator, minimize,
                              resolve_device, resolve_dtype, to_numpy)


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_device(torch.device("cpu")).type == "cpu"
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu9")
    with pytest.raises(ValueError, match="device"):
        resolve_device(3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_requested_without_cuda_raises():
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


def test_resolve_dtype():
    assert resolve_dtype("float64") is torch.float64
    assert resolve_dtype(np.float32) is torch.float32
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8")


def test_round_trip_conversion():
    a = np.arange(6.0).reshape(2, 3)
    t = as_tensor(a, "cpu", torch.float64)
    assert t.dtype == torch.float64
    np.testing.assert_array_equal(to_numpy(t), a)


def test_chunked_apply_equals_whole():
    X = torch.randn(103, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    fn = lambda B: (B.sum(1), B**2)  # noqa: E731
    a1, b1 = chunked_apply(fn, X, 10)
    a2, b2 = fn(X)
    torch.testing.assert_close(a1, a2)
    torch.testing.assert_close(b1, b2)


def test_generator_repeatable():
    a = torch.rand(5, generator=make_generator(7, "cpu"))
    b = torch.rand(5, generator=make_generator(7, "cpu"))
    torch.testing.assert_close(a, b)


def _rosenbrock(x):
    x = x.detach().requires_grad_(True)
    f = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
    (g,) = torch.autograd.grad(f, x)
    return f.detach(), g


def test_lbfgs_converges_on_rosenbrock():
    res = minimize(_rosenbrock, torch.tensor([-1.2, 1.0], dtype=torch.float64), max_iter=200,
                   tol=1e-12)
    assert res.converged
    np.testing.assert_allclose(res.x.numpy(), [1.0, 1.0], atol=1e-4)
    assert res.loss_curve[-1] <= res.loss_curve[0]


def test_bounds_are_respected_and_reached():
    fun = lambda x: (((x - 3.0) ** 2).sum(), 2 * (x - 3.0))  # noqa: E731
    lo = torch.tensor([-1.0, -1.0], dtype=torch.float64)
    hi = torch.tensor([1.0, 5.0], dtype=torch.float64)
    res = minimize(fun, torch.zeros(2, dtype=torch.float64), bounds=(lo, hi), max_iter=100,
                   tol=1e-12)
    assert res.x[0] <= 1.0 and res.x[0] > 0.99
    np.testing.assert_allclose(res.x[1].item(), 3.0, atol=1e-5)


def test_max_iter_reports_non_convergence():
    res = minimize(_rosenbrock, torch.tensor([-1.2, 1.0], dtype=torch.float64), max_iter=3)
    assert not res.converged
    assert "without meeting tol" in res.message


def test_non_finite_objective_is_survived():
    def fun(x):
        if x[0] > 2.0:  # a wall the line search must back off from
            return torch.tensor(float("inf"), dtype=x.dtype), torch.zeros_like(x)
        return ((x - 3.0) ** 2).sum(), 2 * (x - 3.0)
    res = minimize(fun, torch.zeros(1, dtype=torch.float64), max_iter=50)
    assert np.isfinite(res.fun) and res.x[0] <= 2.0


def test_adam_reaches_minimum():
    fun = lambda x: (((x - 1.0) ** 2).sum(), 2 * (x - 1.0))  # noqa: E731
    res = minimize(fun, torch.zeros(3, dtype=torch.float64), method="adam", max_iter=3000,
                   learning_rate=0.05, tol=1e-10)
    np.testing.assert_allclose(res.x.numpy(), 1.0, atol=1e-2)


def test_verbose_prints(capsys):
    """``verbose=1``: the first and every ``REPORT_EVALS``-th evaluation and why the
    optimiser stopped; ``verbose=2``: every evaluation."""
    from skbnngp._backend import _optim

    x0 = torch.tensor([-1.2, 1.0], dtype=torch.float64)
    res = minimize(_rosenbrock, x0, max_iter=200, tol=1e-12, verbose=2, label="unit")
    lines = capsys.readouterr().out.splitlines()
    assert sum("[unit] eval" in line for line in lines) == res.n_fev > 2 * _optim.REPORT_EVALS
    res = minimize(_rosenbrock, x0, max_iter=200, tol=1e-12, verbose=1, label="unit")
    lines = capsys.readouterr().out.splitlines()
    evals = [int(line.split()[2]) for line in lines if "[unit] eval" in line]
    assert evals == [1] + list(range(_optim.REPORT_EVALS, res.n_fev + 1, _optim.REPORT_EVALS))
    assert res.converged and lines[-1].startswith(
        f"[unit] converged after {res.n_fev} evaluations; best loss")
    minimize(_rosenbrock, x0, max_iter=3, verbose=1, label="unit")
    assert "without meeting tol" in capsys.readouterr().out.splitlines()[-1]


def test_noise_tape_replays_the_eager_sequence():
    """A slot's refilled buffer holds exactly the draws an eager step would make next, in
    the recorded order, step after step, and each captured graph keeps its own buffer; a
    captured step that asks for other noise fails."""
    from skbnngp._backend._random import NoiseTape, TapeMismatch, host_rand, host_randn

    f64 = torch.float64
    tape = NoiseTape(make_generator(5, "cpu"))
    tape.start_record()
    first = [host_randn((3, 4), tape, "cpu", f64), host_rand((7,), tape, "cpu", f64)]
    tape.start_capture("cpu")
    views = [host_randn((3, 4), tape, "cpu", f64), host_rand((7,), tape, "cpu", f64)]
    slot = tape.end_capture()
    tape.start_record()  # a second graph (another batch size), with its own buffer
    host_randn((2,), tape, "cpu", f64)
    tape.start_capture("cpu")
    other = host_randn((2,), tape, "cpu", f64)
    other_slot = tape.end_capture()
    eager = make_generator(5, "cpu")
    want = [torch.randn((3, 4), generator=eager, dtype=f64),
            torch.rand((7,), generator=eager, dtype=f64),
            torch.randn((2,), generator=eager, dtype=f64)]
    assert all(torch.equal(g, w) for g, w in zip(first, want))
    for step in range(3):
        tape.refill(slot)
        want = [torch.randn((3, 4), generator=eager, dtype=f64),
                torch.rand((7,), generator=eager, dtype=f64)]
        assert all(torch.equal(g, w) for g, w in zip(views, want))
        if step == 1:
            tape.refill(other_slot)
            assert torch.equal(other, torch.randn((2,), generator=eager, dtype=f64))
    tape.start_record()
    host_randn((3, 4), tape, "cpu", f64)
    tape.start_capture("cpu")
    with pytest.raises(TapeMismatch):
        host_rand((3, 4), tape, "cpu", f64)  # the plan starts with a normal draw
    tape.start_capture("cpu")
    with pytest.raises(TapeMismatch):
        tape.end_capture()  # the normal draw was never asked for


def test_trainer_ignores_cuda_graph_off_cuda():
    """On the CPU a tape changes nothing: the steps, the optimiser and the result are the
    eager ones."""
    from skbnngp._backend import NetworkTrainer
    from skbnngp._backend._random import NoiseTape

    def run(tape):
        w = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
        target = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
        tr = NetworkTrainer(lambda rows, epoch: ((w - target) ** 2).sum(), [w],
                            learning_rate=0.1, cuda_graph=tape)
        tr.fit(4, max_epochs=20, n_iter_no_change=None)
        return tr, w.detach().clone()

    tr, w = run(NoiseTape(make_generator(0, "cpu")))
    assert tr.tape is None and tr.n_graph_steps == 0
    assert not isinstance(tr.optimizer.param_groups[0]["lr"], torch.Tensor)
    assert torch.equal(w, run(None)[1])


def test_stream_mismatch_note_is_the_only_warning_silenced():
    """The CUDA-graph warm-up hides autograd's stream-mismatch note, and nothing else."""
    import warnings

    from skbnngp._backend._train import _quiet_stream_mismatch

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with _quiet_stream_mismatch():
            warnings.warn("The AccumulateGrad node's stream does not match the stream of "
                          "the node that produced the incoming gradient.", UserWarning)
            warnings.warn("a different note", UserWarning)
        warnings.warn("The AccumulateGrad node's stream does not match (outside)", UserWarning)
    assert [str(w.message) for w in seen] == [
        "a different note", "The AccumulateGrad node's stream does not match (outside)"]
