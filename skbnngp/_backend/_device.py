"""Device and dtype resolution, and the only NumPy <-> torch conversions of the package."""

from __future__ import annotations

import numpy as np
import torch

_DTYPES = {
    "float64": torch.float64,
    "double": torch.float64,
    "float32": torch.float32,
    "float": torch.float32,
}


def resolve_device(device="auto") -> torch.device:
    """Turn a user's ``device`` argument into a :class:`torch.device`.

    Parameters
    ----------
    device : {"auto", "cpu", "cuda", "cuda:N", "mps"} or torch.device
        ``"auto"`` picks CUDA when it is available, else the CPU.

    Raises
    ------
    ValueError
        If the string is not a device name, or names an accelerator that is absent.
    """
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        if device == "auto":
            return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        try:
            dev = torch.device(device)
        except RuntimeError as exc:
            raise ValueError(
                f"device={device!r} is not a valid device; use 'auto', 'cpu', 'cuda' or 'cuda:N'."
            ) from exc
    else:
        raise ValueError(
            f"device must be a string or a torch.device, got {type(device).__name__}."
        )
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={str(dev)!r} was requested but CUDA is not available on this machine; "
                "use device='auto' or 'cpu'."
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={str(dev)!r}: only {torch.cuda.device_count()} CUDA device(s) present."
            )
    elif dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ValueError("device='mps' was requested but MPS is not available.")
    elif dev.type != "cpu":
        raise ValueError(f"device={str(dev)!r} is not supported; use 'auto', 'cpu' or 'cuda'.")
    return dev


def resolve_dtype(dtype="float64") -> torch.dtype:
    """Turn ``"float64"``/``"float32"`` (or a NumPy/torch float type) into a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype in (torch.float64, torch.float32):
            return dtype
    elif isinstance(dtype, str):
        if dtype in _DTYPES:
            return _DTYPES[dtype]
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
        if name in _DTYPES:
            return _DTYPES[name]
    raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}.")


def as_tensor(array, device, dtype) -> torch.Tensor:
    """Copy a NumPy array (or scalar) onto ``device`` as ``dtype``, once.

    A NumPy array is always copied into new, C-contiguous memory from torch's allocator, even
    where torch could share the array's memory. That allocator aligns every buffer (64 bytes on
    the CPU), and MKL's threaded kernels choose how to split a sum by the alignment of their
    operands: a shared buffer would make results depend, at round-off level, on where NumPy
    happened to place the array (e.g. after unpickling) and on its memory layout.
    """
    if isinstance(array, torch.Tensor):
        return array.to(device=device, dtype=dtype)
    return torch.tensor(np.ascontiguousarray(array), dtype=dtype, device=device)


def to_numpy(tensor) -> np.ndarray:
    """Bring a tensor back to host memory as a NumPy array (detached)."""
    if isinstance(tensor, torch.Tensor):
        return tensor.detach().cpu().numpy()
    return np.asarray(tensor)


def to_float(tensor) -> float:
    """A 0-d tensor as a Python float."""
    if isinstance(tensor, torch.Tensor):
        return float(tensor.detach().cpu().item())
    return float(tensor)


def to_device_state(obj, device):
    """Move every tensor inside nested dicts/lists/tuples to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device_state(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device_state(v, device) for v in obj)
    return obj
