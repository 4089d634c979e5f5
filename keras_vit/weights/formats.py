"""Which reader a checkpoint path needs, and refusing pickled files."""

import pathlib

from keras_vit.io.files import CheckpointError
from keras_vit.io.files import weights_folder
from keras_vit.weights.checkpoint import read_config_json
from keras_vit.weights.huggingface import read_huggingface
from keras_vit.weights.keras_hub import is_keras_hub_preset
from keras_vit.weights.keras_hub import read_keras_hub
from keras_vit.weights.npz import read_npz
from keras_vit.weights.timm import read_timm

PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".pkl", ".pickle", ".ckpt")
FORMATS = (
    "vit_jax / AugReg / big_vision .npz; a Hugging Face ViT, DeiT, DINOv2, DINOv3, CLIP, SigLIP or "
    "SigLIP 2 directory (config.json + model.safetensors); a timm ViT .safetensors file or hub "
    "folder; a keras-hub ViT, DeiT, DINOv2 or DINOv3 preset folder"
)


def _refuse_pickle(path):
    raise CheckpointError(
        f"{path} is a pickle-based PyTorch file, which can run arbitrary code "
        "when loaded, so keras_vit does not open it. Convert it to safetensors "
        "where you trust it, e.g. `safetensors.torch.save_file(torch.load(path, "
        "weights_only=True), 'model.safetensors')` (for Hugging Face: "
        "`model.save_pretrained(dir, safe_serialization=True)`)."
    )


def _safetensors_kind(path):
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as file:
            keys = list(file.keys())
    except Exception as error:  # safetensors raises several error types
        raise CheckpointError(
            f"{path} could not be read as safetensors ({error}). The file may be "
            "truncated: download or save it again."
        ) from error
    if "patch_embed.proj.weight" in keys:
        return "timm"
    if any(k.endswith(("embeddings.patch_embeddings.projection.weight",
                       "embeddings.patch_embedding.weight")) for k in keys):
        return "huggingface"
    raise CheckpointError(
        f"{path} is a safetensors file but not a known ViT layout (first keys: "
        f"{sorted(keys)[:5]}). Known formats: {FORMATS}."
    )


def reader_for(path):
    """The reader a local checkpoint needs, decided from its name and
    ``config.json`` (safetensors: from its key names) before any weights are
    read: :func:`~keras_vit.weights.npz.read_npz`,
    :func:`~keras_vit.weights.huggingface.read_huggingface`,
    :func:`~keras_vit.weights.timm.read_timm` or
    :func:`~keras_vit.weights.keras_hub.read_keras_hub`, each taking the path (a
    Hugging Face ``model.safetensors`` is read with its folder).

    Raises:
        CheckpointError: no such file, a pickle-based file, or an unknown format.
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise CheckpointError(f"No checkpoint at {path}.")
    if path.suffix in PICKLE_SUFFIXES:
        _refuse_pickle(path)
    if path.is_dir():
        if (path / "model.keras").exists() or (path / "checkpoints").is_dir():
            raise CheckpointError(
                f"{path} is a keras_vit work directory, not a checkpoint: its trained model is "
                f"{path / 'model.keras'}" + ("" if (path / "model.keras").exists() else
                                            ", written when its run ends") + "."
            )
        if not (path / "model.safetensors").exists():
            pickled = [p for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
            if pickled:
                _refuse_pickle(pickled[0])
        config = path / "config.json"
        if not config.exists():
            raise CheckpointError(f"{path} is a directory without config.json. Known formats: {FORMATS}.")
        if is_keras_hub_preset(path):
            return read_keras_hub
        return read_timm if "architecture" in read_config_json(config) else read_huggingface
    if path.suffix == ".npz":
        return read_npz
    if path.suffix == ".safetensors":
        if _safetensors_kind(path) == "timm":
            return read_timm
        if not (weights_folder(path) / "config.json").exists():
            raise CheckpointError(
                f"{path} holds Hugging Face ViT weights but there is no config.json "
                "beside it; pass the directory saved by `save_pretrained`."
            )
        return read_huggingface
    raise CheckpointError(f"{path}: unknown checkpoint format. Known formats: {FORMATS}.")


def read_checkpoint(path, num_heads=None):
    """Reads any supported checkpoint into a :class:`Checkpoint`."""
    reader = reader_for(path)
    if reader is read_timm:
        return read_timm(path, num_heads)
    return reader(path)
