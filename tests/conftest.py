import os
import sys

import keras
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend: {keras.backend.backend()}"


@pytest.fixture(autouse=True)
def _float32_policy():
    """Every test starts and ends with the float32 policy and a fixed seed."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def images():
    return np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
