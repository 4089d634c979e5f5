"""Journey: a ViT saved to a .keras file loads back, here and in a new process.

    python keras_file.py               save, reload here, then load in a new process
    python keras_file.py load PATH     (that new process)

The tiny ViT is saved with ``model.save``, reloaded in the same process,
and then loaded by a fresh Python that does nothing but ``import keras,
keras_vit`` and ``keras.saving.load_model(path)``: both give the saved
model's logits (within 1e-5), stored next to the file.
"""

import subprocess
import sys

import keras
import keras_vit
import numpy as np

import _journey

PATH = "tiny.keras"
EXPECTED = "tiny_logits.npz"


def save():
    _journey.installed()
    model = _journey.tiny_vit()
    x = _journey.images()
    np.savez(EXPECTED, images=x, logits=_journey.logits(model, x))
    model.save(PATH)
    _journey.assert_same(_journey.logits(keras.saving.load_model(PATH), x), np.load(EXPECTED)["logits"],
                         "reloaded in the process that saved it")
    _journey.passed_on(subprocess.run([sys.executable, __file__, "load", PATH], capture_output=True, text=True))


def load(path):
    model = keras.saving.load_model(path)
    expected = np.load(EXPECTED)
    assert isinstance(model, keras_vit.ViT), f"{path} loads as a {type(model).__name__}"
    difference = _journey.assert_same(_journey.logits(model, expected["images"]), expected["logits"],
                                      "loaded in a new process")
    _journey.ok(f"saved, reloaded in the process and in a new one ({difference:.0e})")


if __name__ == "__main__":
    load(sys.argv[2]) if sys.argv[1:2] == ["load"] else save()
