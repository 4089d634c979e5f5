"""Tensor files in and out: every array of a ``.npz``, ``.safetensors`` or
Keras ``.weights.h5`` file as float32 NumPy arrays, by key, with nothing
unpickled; a file that cannot be read raises a `CheckpointError` naming it
and what to do. The format readers (`keras_vit.weights`) map the keys."""

import json
import pathlib
import zipfile

import numpy as np

from keras_vit.io.files import CheckpointError


def load_npz(path):
    """Every array of an ``.npz`` file, as float32, without unpickling."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: np.asarray(archive[key], dtype=np.float32) for key in archive.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} could not be read as an .npz checkpoint ({error}). The file "
            "may be truncated (download it again) or hold Python objects, which "
            "are not loaded for safety."
        ) from error


def load_safetensors(path):
    """Every tensor of a ``.safetensors`` file, as float32 NumPy arrays."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return {k: np.asarray(v, dtype=np.float32) for k, v in load_file(str(path)).items()}
    except TypeError:  # "data type 'bfloat16' not understood" by NumPy
        return _load_with_ml_dtypes(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} could not be read as safetensors ({error}). The file may be "
            "truncated: download or save it again."
        ) from error


def _load_with_ml_dtypes(path):
    """bfloat16 tensors: NumPy has no such dtype, ml_dtypes does."""
    import struct

    import ml_dtypes

    dtypes = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32, "F64": np.float64}
    with open(path, "rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(size))
        data = file.read()
    arrays = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=dtypes[info["dtype"]])
        arrays[name] = array.reshape(info["shape"]).astype(np.float32)
    return arrays


def load_h5(path, source, fix):
    """Every array of a Keras ``.weights.h5`` file by path (its optimizer's left out).

    Raises:
        CheckpointError: no such file, or not one HDF5 can read; the
            message names `source` and what to do (`fix`).
    """
    import h5py

    path = pathlib.Path(path)
    if not path.is_file():
        raise CheckpointError(f"{source}: no {path.name} in the folder, which holds the "
                              f"weights. {fix}")
    arrays = {}

    def keep(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/"):
            arrays[name] = np.asarray(item, "float32")

    try:
        with h5py.File(path, "r") as file:
            file.visititems(keep)
    except OSError as error:
        raise CheckpointError(f"{source}: {path.name} is not a readable HDF5 weights file "
                              f"({error}); it may be cut short or damaged. {fix}") from None
    return arrays


def safetensors_bytes(tensors):
    """`tensors` as the bytes of a ``.safetensors`` file (PyTorch's metadata)."""
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()},
                metadata={"format": "pt"})
