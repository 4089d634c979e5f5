"""Journey: checkpoint formats written and read back.

    python checkpoints.py FORMAT [FORMAT ...]     of npz, timm, huggingface, keras_hub

``model.save_checkpoint(path, checkpoint_format=F)`` for each F: npz into a .npz
file, timm into a bare .safetensors file (a model with exact GELU, which
is what the tensors alone say) and, like huggingface and keras_hub, into
a folder (a new one, and an existing empty one made with
``tempfile.mkdtemp()`` and with ``os.mkdir``); then
``keras_vit.ViT.from_checkpoint(path)`` gives the model's logits (within
1e-5). For the folder formats, a folder with a file in it is refused, and
the file kept as it was.

Every case runs; those that fail are listed together on the last line
(exit status 1). A missing optional dependency ends the journey at once,
with its own message.
"""

import os
import sys
import tempfile

import keras_vit

import _journey

FOLDER_FORMATS = ("timm", "huggingface", "keras_hub")
# The tiny ViT at ViT-Ti's width: a timm file does not store the number of
# heads, and its reader knows the standard widths' (192: 3).
MODEL = dict(hidden_dim=192, num_heads=3, mlp_dim=768)
# vit_jax's code runs the paper's tanh GELU, keras-hub's ViT the exact (erf) one, and a bare
# timm file records no activation (timm's exact GELU is read).
EXACT_GELU = {"keras_hub", "timm file"}


def destinations(formats):
    """(format, path, how the path was made) of every write of `formats`."""
    files = {"npz": "tiny.npz", "timm": "tiny.safetensors"}
    for fmt in formats:
        if fmt in files:
            yield fmt, files[fmt], "a new file"
        if fmt not in FOLDER_FORMATS:
            continue
        yield fmt, f"{fmt}_new", "a new folder"
        yield fmt, tempfile.mkdtemp(prefix=f"{fmt}_mkdtemp_", dir="."), "an empty folder from tempfile.mkdtemp()"
        os.mkdir(f"{fmt}_mkdir")
        yield fmt, f"{fmt}_mkdir", "an empty folder from os.mkdir"


def refused(model, fmt):
    """Writing `fmt` into a folder that holds a file is refused, and the
    file kept."""
    folder = f"{fmt}_not_empty"
    os.mkdir(folder)
    mine = os.path.join(folder, "mine.txt")
    with open(mine, "w") as file:
        file.write("the user's")
    try:
        model.save_checkpoint(folder, checkpoint_format=fmt)
    except ModuleNotFoundError:
        raise
    except Exception:  # noqa: BLE001 (the refusal: its type is the package's to choose)
        pass
    else:
        raise AssertionError(f"{fmt} was written into {folder}, which holds {os.listdir(folder)}")
    assert os.listdir(folder) == ["mine.txt"], f"{fmt}: {folder} holds {os.listdir(folder)} after the refusal"
    with open(mine) as file:
        assert file.read() == "the user's", f"{fmt}: {mine} was changed"


def main(formats):
    assert formats and set(formats) <= {"npz", "timm", *FOLDER_FORMATS}, formats
    _journey.installed()
    tanh = _journey.tiny_vit(**MODEL)
    kinds = [*formats, *(["timm file"] if "timm" in formats else [])]
    models = {kind: tanh.with_config(gelu_approximate=False) if kind in EXACT_GELU else tanh for kind in kinds}
    x = _journey.images()
    expected = {kind: _journey.logits(model, x) for kind, model in models.items()}
    failures, done = [], []
    for fmt, path, how in destinations(formats):
        kind = "timm file" if str(path).endswith(".safetensors") else fmt
        try:
            models[kind].save_checkpoint(path, checkpoint_format=fmt)
            _journey.assert_same(_journey.logits(keras_vit.ViT.from_checkpoint(path), x), expected[kind],
                                 f"{fmt} read back")
            done.append(f"{fmt} into {how}")
        except ModuleNotFoundError:
            raise
        except Exception as error:  # noqa: BLE001 (each case is reported)
            failures.append(f"{fmt} into {how} ({path}): {type(error).__name__}: {error}".replace("\n", " "))
    for fmt in (f for f in formats if f in FOLDER_FORMATS):
        try:
            refused(models[fmt], fmt)
            done.append(f"{fmt} into a folder with a file refused")
        except ModuleNotFoundError:
            raise
        except Exception as error:  # noqa: BLE001
            failures.append(f"{fmt} into a folder with a file: {type(error).__name__}: {error}".replace("\n", " "))
    if failures:  # one line, the journey's last
        sys.exit(f"{len(failures)} of {len(failures) + len(done)} checkpoint cases failed: "
                 + " | ".join(failures))
    _journey.ok(f"{len(done)} cases: {'; '.join(done)}")


if __name__ == "__main__":
    main(sys.argv[1:])
