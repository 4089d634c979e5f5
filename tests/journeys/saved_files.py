"""Journey: .keras files saved by earlier versions load the Keras way.

    python saved_files.py DATA_FOLDER

Each ``saved_<date>_<name>.keras`` of DATA_FOLDER is loaded after nothing
but ``import keras, keras_vit``, with ``keras.saving.load_model``, and gives
the logits stored in ``saved_<date>_logits.npz`` (key ``<name>``) on that
file's images (key ``<name>_images`` if there is one, else ``images``),
within 1e-5. A file saved compiled (its config has a compile_config: a
training run's model) loads with its optimizer.
"""

import glob
import json
import os
import re
import sys
import zipfile

import keras
import keras_vit  # noqa: F401 (all a user imports before load_model)
import numpy as np

import _journey

FILE_NAME = re.compile(r"saved_(\d{4}_\d{2}_\d{2})_(.+)\.keras")


def compiled(path):
    """Whether the .keras file at `path` was saved from a compiled model."""
    with zipfile.ZipFile(path) as archive:
        return bool(json.loads(archive.read("config.json")).get("compile_config"))


def main(folder):
    _journey.installed()
    paths = sorted(glob.glob(os.path.join(folder, "saved_*.keras")))
    assert paths, f"no saved_*.keras file in {folder}"
    checked = []
    for path in paths:
        date, name = FILE_NAME.fullmatch(os.path.basename(path)).groups()
        stored = np.load(os.path.join(folder, f"saved_{date}_logits.npz"))
        inputs = stored[f"{name}_images"] if f"{name}_images" in stored.files else stored["images"]
        model = keras.saving.load_model(path)
        assert type(model).__module__.startswith("keras_vit."), (
            f"{os.path.basename(path)} loads as a {type(model).__module__}.{type(model).__name__}")
        difference = _journey.assert_same(_journey.logits(model, inputs), stored[name],
                                          f"{os.path.basename(path)}: the logits it was saved with")
        state = ""
        if compiled(path):
            assert model.optimizer is not None, (
                f"{os.path.basename(path)} was saved compiled; it loads without its optimizer")
            state = f", compiled: {type(model.optimizer).__name__} at step {int(model.optimizer.iterations)}"
        checked.append(f"{date}/{name} ({type(model).__name__}{state}, {difference:.0e})")
    _journey.ok(f"{len(paths)} files load with their logits: {', '.join(checked)}")


if __name__ == "__main__":
    main(sys.argv[1])
