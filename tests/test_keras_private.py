"""The private Keras hooks keras_vit relies on (`keras_vit.compat.keras_private`):
each exists in the installed Keras on this backend, a missing one is named,
and the Keras pin in pyproject.toml is the one the hooks are written for."""

import os
import re

import keras
import pytest

from keras_vit.compat import keras_private
from keras_vit.compat.keras_private import Hook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_private_hook_is_in_the_installed_keras():
    missing = keras_private.missing_hooks()
    print(f"Keras {keras.__version__} on {keras.backend.backend()}: "
          f"{len(keras_private.HOOKS) - len(missing)} of {len(keras_private.HOOKS)} private hooks found")
    assert not missing, "\n".join(missing)


def test_a_missing_hook_is_named_with_its_user_and_the_pin():
    hooks = (Hook("keras.optimizers.Optimizer", "_no_such_hook", "the test's optimizer"),
             Hook("optimizer instance", "_no_such_slot", "the test's schedule"),
             Hook("keras.src.no_such_module", "anything", "nobody"),
             Hook("keras.optimizers.Optimizer", "_backend_update_step", "found"))
    missing = keras_private.missing_hooks(hooks)
    assert len(missing) == 3, missing
    assert missing[0].startswith("keras.optimizers.Optimizer._no_such_hook (used by the test's optimizer) "
                                 f"is not in the installed Keras {keras.__version__}")
    assert "optimizer instance._no_such_slot" in missing[1]
    assert all(m.endswith(f"written against {keras_private.KERAS_REQUIREMENT}") for m in missing)


@pytest.mark.backend_independent
def test_pyproject_pins_the_keras_minor_version_of_the_hooks():
    with open(os.path.join(ROOT, "pyproject.toml")) as file:
        pins = re.findall(r'"(keras[<>=!~][^"]*)"', file.read())
    assert pins == [keras_private.KERAS_REQUIREMENT], pins
    low, high = re.fullmatch(r"keras>=(\d+\.\d+),<(\d+\.\d+)", keras_private.KERAS_REQUIREMENT).groups()
    major, minor = map(int, low.split("."))
    assert high == f"{major}.{minor + 1}", "the pin allows one Keras minor version"
    assert keras.__version__.startswith(f"{low}."), keras.__version__
