"""A model fitted on CUDA pickles without a live device tensor, and a machine without CUDA
loads it and predicts on the CPU what the GPU predicted (the README's persistence promise and
the architecture's "fitted state pickles without live device tensors"). Skipped without CUDA:
``benchmarks/gpu/gpu_check.sh`` runs it on a lent GPU machine.
"""

import io
import os
import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from skbnngp.utils import all_estimators

from .conftest import MODES, ROOT, TINY, persistence_data, predictive_outputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")


class _DeviceSpy(pickle.Pickler):
    """A pickler that records every tensor or storage on a non-CPU device it is asked to
    write (``persistent_id`` sees each object before it is reduced)."""

    def __init__(self, fh):
        super().__init__(fh, protocol=pickle.HIGHEST_PROTOCOL)
        self.found = []

    def persistent_id(self, obj):
        dev = None
        if isinstance(obj, torch.Tensor):
            dev = obj.device
        elif isinstance(obj, (torch.UntypedStorage, torch.TypedStorage)):
            dev = obj.device
        elif isinstance(obj, torch.nn.Module):
            devs = {t.device.type for t in [*obj.parameters(), *obj.buffers()]}
            dev = torch.device("cuda") if devs - {"cpu"} else None
        if dev is not None and torch.device(dev).type != "cpu":
            self.found.append(type(obj).__name__)
        return None


def _cuda_cases():
    for name, Est in all_estimators():
        for mode in MODES.get(name, [{}]):
            yield pytest.param(name, Est, {**TINY.get(name, {}), **mode},
                               id="-".join([name, *map(str, mode.values())]))


_LOADER = r"""
import pickle, sys, warnings
import numpy as np
import torch
sys.path.insert(0, sys.argv[3])
from tests.conftest import predictive_outputs
assert not torch.cuda.is_available()
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    est = pickle.load(open(sys.argv[1], "rb"))
X = np.load(sys.argv[2])
out = predictive_outputs(est, X)
out["device"] = str(est.device_)
out["warned"] = any("not available here" in str(w.message) for w in seen)
pickle.dump(out, open(sys.argv[1] + ".out", "wb"))
"""


@pytest.mark.parametrize("name,Est,params", list(_cuda_cases()))
def test_cuda_fit_pickles_plain_and_loads_on_a_cpu_machine(tmp_path, name, Est, params):
    X, y = persistence_data(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Est(device="cuda", random_state=0, **params).fit(X, y)
        assert est.device_.type == "cuda"
        on_gpu = predictive_outputs(est, X)
    buf = io.BytesIO()
    spy = _DeviceSpy(buf)
    spy.dump(est)
    assert spy.found == [], f"{name} pickles live device objects: {spy.found}"
    # the model in memory still predicts on the GPU after pickling (its cache was not lost)
    assert est.device_.type == "cuda"

    path = tmp_path / "model.pkl"
    path.write_bytes(buf.getvalue())
    np.save(tmp_path / "X.npy", X)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _LOADER, str(path), str(tmp_path / "X.npy"),
                           str(ROOT)], check=False, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    on_cpu = pickle.loads((tmp_path / "model.pkl.out").read_bytes())
    assert on_cpu.pop("device") == "cpu"
    assert on_cpu.pop("warned"), "loading a CUDA model without CUDA must say it moves to the CPU"
    tol = 1e-6 if est.get_params()["dtype"] in ("float64", "double") else 1e-4  # FiD: float32
    for key, value in on_gpu.items():
        if key == "predict" and "proba" in on_gpu:
            # labels agree wherever the two top probabilities are clearly apart
            top2 = np.sort(on_gpu["proba"], axis=1)[:, -2:]
            clear = (top2[:, 1] - top2[:, 0]) > 10 * tol
            np.testing.assert_array_equal(on_cpu[key][clear], value[clear], err_msg=key)
        else:
            # CPU and GPU kernels round differently: the CUDA-against-CPU tolerance of the
            # model's dtype, relative to the output's scale
            scale = float(np.abs(value[np.isfinite(value)]).max())
            np.testing.assert_allclose(on_cpu[key], value, rtol=0, atol=tol * max(scale, 1.0),
                                       err_msg=f"{name}: {key}")
