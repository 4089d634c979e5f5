"""The files keras_vit writes and reads, checked before anything is written.

Every output path is checked before work starts (`output_file`,
`output_folder`), JSON reports never hold ``NaN`` or ``Infinity``
(`write_json`: non-finite numbers become ``null``, which JSON has), a JSON
file that cannot be parsed is reported with its path (`read_json`), and
each file is written to a temporary name and renamed, so a kill or a full
disk leaves the previous file whole (`write_atomic`).

The errors are `ValueError` (a value to change) and `FileNotFoundError`
(a path to create), each naming the path and what to do.
"""

import json
import math
import os
import pathlib
import shutil
import tempfile
import zipfile


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (or fetched), or does not fit the model."""


def output_folder(path, flag):
    """`path` as a folder keras_vit may create or write into; raises a
    `ValueError` naming `flag` (e.g. ``"--workdir"``) when it is a file,
    lies under a file, or cannot be written. Creates nothing.

    Returns:
        pathlib.Path.
    """
    path = pathlib.Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{flag} {path} is a file, not a folder. Name a folder (it is created if "
                         "missing), or move the file away.")
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, so no folder can be made under it. "
                         "Choose another path.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: {existing} is not writable by this user. Choose a "
                         "folder you can write to.")
    return path


def output_file(path, flag, suffixes=None, new=None):
    """`path` as a file keras_vit may write: its folder exists and is
    writable, it is not a folder, and it ends in one of `suffixes` (e.g.
    ``(".keras",)``) when given. `new`: ``"file"``, a path that must not
    exist; ``"folder"``, a folder to make, which may exist empty. Creates
    nothing.

    Returns:
        pathlib.Path.
    """
    path = pathlib.Path(path).expanduser()
    named = f"{flag} {path}".lstrip()
    if suffixes and not str(path).endswith(tuple(suffixes)):
        raise ValueError(f"{named} must end in {' or '.join(suffixes)}, the format written "
                         f"there, e.g. {path.with_suffix(suffixes[0]).name}.")
    if new and path.exists() and not (new == "folder" and path.is_dir() and not any(path.iterdir())):
        empty = " or an empty folder" if new == "folder" else ""
        raise ValueError(f"{named} exists; nothing was written. Choose a new path{empty}, or "
                         "remove it first.")
    if path.is_dir() and new != "folder":
        raise ValueError(f"{named} is a folder; name a file in it, e.g. "
                         f"{path / ('model' + (suffixes[0] if suffixes else ''))}.")
    folder = path.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"{named}: the folder {folder} does not exist. Create it "
                                "first (mkdir -p), or write somewhere that exists.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{named}: the folder {folder} is not writable by this user.")
    return path


def weights_folder(path):
    """The folder of a checkpoint given as the folder or as the
    ``.safetensors`` file in it (a Hugging Face ``model.safetensors``)."""
    path = pathlib.Path(path)
    return path.parent if path.suffix == ".safetensors" else path


def finite_or_null(value):
    """`value` (a JSON-able tree of dicts, lists and numbers) with every NaN
    and infinity replaced by None."""
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_atomic(path, content):
    """Writes `content` (str, bytes, or a function that writes to a binary
    file) to `path` through a temporary file in the same folder, flushed to
    disk and renamed: a reader sees the old file or the new one, never part
    of one, and a failed write (a full disk) leaves the old file and no
    temporary one."""
    path = pathlib.Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if isinstance(content, str):
        content = content.encode("utf-8")
    try:
        with open(tmp, "wb") as file:
            if callable(content):
                content(file)
            else:
                file.write(content)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_folder(path, fill):
    """Makes the folder `path` (new, or empty) with `fill(folder)`, which
    writes into a temporary folder beside it, renamed to `path` at the end:
    a failed write leaves `path` as it was and no temporary folder."""
    path = pathlib.Path(path)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        fill(tmp)
        if path.exists():
            path.rmdir()  # empty (`output_file`)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path, data, **dumps_kwargs):
    """Writes `data` as strict JSON (`finite_or_null`: no NaN or Infinity)
    with `write_atomic`."""
    text = json.dumps(finite_or_null(data), allow_nan=False, **dumps_kwargs)
    write_atomic(path, text + "\n")


def read_json(path, what=None, content=None, fix="Repair or remove the file.", error=ValueError):
    """The JSON object in `path`; a file that is not a JSON object raises
    `error` (a `ValueError` or a subclass) naming it, `what` it should hold
    (e.g. "the run's config") and the `fix`. `content`: the file's bytes
    where they were read already (a tokenizer's files travel as bytes);
    `path` then names them."""
    path = pathlib.Path(path)
    should = f"; it should hold {what}" if what else ""
    try:
        data = json.loads(path.read_text(encoding="utf-8") if content is None
                          else bytes(content).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as problem:
        raise error(f"{path} is not valid JSON ({problem}){should}. {fix}") from None
    if not isinstance(data, dict):
        raise error(f"{path} holds a JSON {type(data).__name__}, not an object{should}. {fix}")
    return data


def load_keras_model(path, flag):
    """The model in a `.keras` file, loaded with ``safe_mode`` and no
    compile; a missing, damaged or foreign file raises an error naming
    `flag` (e.g. ``"--init"``; empty for a positional argument) and the
    path."""
    import keras

    path = pathlib.Path(path).expanduser()
    named = f"{flag} {path}" if flag else str(path)
    if not path.exists():
        raise FileNotFoundError(f"{named}: no such file.")
    if not path.is_file():
        raise ValueError(f"{named} is a folder, not a .keras file.")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{named} is not a readable .keras file: it is not a zip archive "
                         "(damaged, cut short, or another format). Save the model again.")
    try:
        return keras.saving.load_model(path, safe_mode=True, compile=False)
    except Exception as error:  # Keras raises many kinds; the message names each
        raise ValueError(f"{named}: not a readable .keras model ({type(error).__name__}: "
                         f"{error}).") from error
