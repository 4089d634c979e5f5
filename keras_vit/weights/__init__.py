"""Checkpoint formats: a reader and a writer per format (one key map each,
`rows`), what each holds (`capabilities`), the formats themselves
(`formats.FORMATS`), and a model built from a file (`load_checkpoint`, with
`keras_vit.assign`'s `build_model`).

The names import their modules when first used, so that the format registry
(`keras_vit.weights.formats`) imports no backend."""

import typing

from keras_vit.lazy import import_lazily

_NAMES = {
    "Checkpoint": "keras_vit.weights.checkpoint",
    "CheckpointError": "keras_vit.io.files",
    "assign_weights": "keras_vit.assign",
    "build_model": "keras_vit.assign",
    "check_output": "keras_vit.weights.writers",
    "load_checkpoint": "keras_vit.weights.load",
    "read_checkpoint": "keras_vit.weights.formats",
    "save_checkpoint": "keras_vit.weights.writers",
    "transfer_weights": "keras_vit.assign",
}
__all__ = sorted(_NAMES)

if typing.TYPE_CHECKING:  # what the names are, for readers of the code and the API docs
    from keras_vit.assign import assign_weights
    from keras_vit.assign import build_model
    from keras_vit.assign import transfer_weights
    from keras_vit.io.files import CheckpointError
    from keras_vit.weights.checkpoint import Checkpoint
    from keras_vit.weights.formats import read_checkpoint
    from keras_vit.weights.load import load_checkpoint
    from keras_vit.weights.writers import check_output
    from keras_vit.weights.writers import save_checkpoint

import_lazily(__name__, _NAMES)
