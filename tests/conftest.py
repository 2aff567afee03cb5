import signal

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises ``KeyboardInterrupt`` in this process during the test, as in a terminal.

    A process started in the background by a non-interactive shell (``cmd &``, as some CI
    runners and ``nohup`` do) inherits SIGINT ignored, and Python then installs no handler:
    a test that sends itself SIGINT would see nothing happen."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
