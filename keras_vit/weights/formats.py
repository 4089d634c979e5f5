"""The checkpoint formats, one record each (`FORMATS`): how a path is told to be the format's, its reader and
writer, and the capability columns (`keras_vit.weights.capabilities`) it is read and written as. The command
line's choices, `capabilities.COLUMNS`, `save_checkpoint`'s dispatch, `reader_for` and the docs' table of
paths (`markdown`) all come from here.

A format's reader and writer are ``read_<module>`` and ``write_<module>`` of ``keras_vit.weights.<module>``,
imported when first used, so that this module (and the command line's help) imports no backend. Every reader
is ``read(path, num_heads=None)`` and returns a `Checkpoint`; every writer is ``write(model, path)``.
"""

import collections
import dataclasses
import importlib
import pathlib
from collections.abc import Callable

from keras_vit.io.files import CheckpointError
from keras_vit.io.files import weights_folder
from keras_vit.weights.checkpoint import read_config_json

PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".pkl", ".pickle", ".ckpt")

# A capability column: its title in the docs, the phrase a refusal writes it as (None:
# never written) and its owner (``{reader}`` in the table's texts)
Column = collections.namedtuple("Column", ("title", "writes", "owner"))


@dataclasses.dataclass(frozen=True)
class Found:
    """What `reader_for` learns of a path before choosing, each file read once: a folder's parsed
    ``config.json`` (None for a file), a ``.safetensors`` file's key names (empty otherwise)."""

    path: pathlib.Path
    config: dict | None = None
    keys: tuple = ()


@dataclasses.dataclass(frozen=True)
class Format:
    """One checkpoint format.

    Attributes:
        name: ``save_checkpoint(checkpoint_format=...)``, ``keras-vit convert --format``.
        title: what its files are, in words (`known_formats`).
        module: ``keras_vit.weights.<module>``, which has ``read_<module>`` and ``write_<module>``.
        paths: ``(path, what it is)`` rows of the docs' table of paths.
        claims: ``claims(found)``: whether a `Found` path is this format's (asked in `FORMATS`' order).
        columns: the capability columns its files can be, name -> `Column`.
        written_as: ``written_as(config)``: the column a `ViTConfig` is written as.
        writes_folder: ``writes_folder(path)``: whether it writes a folder at `path`.
    """

    name: str
    title: str
    module: str
    paths: tuple
    claims: Callable
    columns: dict
    written_as: Callable
    writes_folder: Callable

    def _function(self, verb):
        return getattr(importlib.import_module(f"keras_vit.weights.{self.module}"), f"{verb}_{self.module}")

    @property
    def read(self):
        """``read(path, num_heads=None)``: the file or folder as a `Checkpoint`."""
        return self._function("read")

    @property
    def write(self):
        """``write(model, path)``: `model` written at a new `path`."""
        return self._function("write")


def huggingface_column(c):
    """The column format="huggingface" writes a `ViTConfig` `c` as: SigLIP 2's ``Siglip2VisionModel`` for
    NaFlex, ``DINOv3ViTModel`` for rotary position embeddings, a ``ViTModel`` otherwise."""
    return "hf_siglip2" if c.naflex else "hf_dinov3" if c.position_embedding == "rope" else "hf_vit"


def _folder_unless_safetensors(path):
    """Whether a folder format writes a folder at `path`: unless it names a ``.safetensors`` file."""
    return pathlib.Path(path).suffix != ".safetensors"


_HF_PATCH_KEYS = ("embeddings.patch_embeddings.projection.weight", "embeddings.patch_embedding.weight")

FORMATS = {format.name: format for format in (
    Format(
        "npz", "vit_jax / AugReg / big_vision .npz", "npz",
        paths=(("`*.npz`", "Google Flax checkpoint: vit_jax / AugReg, or big_vision (told apart by the keys)"),),
        claims=lambda found: found.path.suffix == ".npz",
        columns={"npz": Column("vit_jax / big_vision `.npz`", "npz", "vit_jax")},
        written_as=lambda c: "npz", writes_folder=lambda path: False),
    Format(
        "keras_hub", "a keras-hub ViT, DeiT, DINOv2 or DINOv3 preset folder", "keras_hub",
        paths=(("directory with `config.json` whose `registered_name` starts `keras_hub>`",
                "keras-hub preset of `ViTBackbone` or `DeiTBackbone` (with a classifier's `task.json` + "
                "`task.weights.h5`), `DINOV2Backbone` or `DINOV3Backbone`"),),
        claims=lambda found: str((found.config or {}).get("registered_name", "")).startswith("keras_hub>"),
        columns={"keras_hub": Column("keras-hub", "a keras-hub ViT preset", "keras-hub's ViT")},
        written_as=lambda c: "keras_hub", writes_folder=_folder_unless_safetensors),
    Format(
        "timm", "a timm ViT .safetensors file or hub folder", "timm",
        paths=(("directory with `config.json` whose JSON has an `\"architecture\"` key",
                "timm (hub directory: `model.safetensors` in it)"),
               ("`*.safetensors` containing `patch_embed.proj.weight`", "timm")),
        claims=lambda found: "architecture" in (found.config or {}) or "patch_embed.proj.weight" in found.keys,
        columns={"timm": Column("timm", "timm", "timm's VisionTransformer")},
        written_as=lambda c: "timm", writes_folder=_folder_unless_safetensors),
    Format(
        "huggingface", "a Hugging Face ViT, DeiT, DINOv2, DINOv3, CLIP, SigLIP, SigLIP 2 or AIMv2 directory "
        "(config.json + model.safetensors)", "huggingface",
        paths=(("any other directory with `config.json`", "Hugging Face ViT (`model.safetensors` in it)"),
               ("`*.safetensors` with a key ending in `embeddings.patch_embeddings.projection.weight`",
                "Hugging Face; `config.json` must be in the same directory")),
        claims=lambda found: found.config is not None or any(k.endswith(_HF_PATCH_KEYS) for k in found.keys),
        columns={
            "hf_vit": Column("Hugging Face ViT", "a Hugging Face ViT", "Hugging Face's ViT"),
            "hf_dinov2": Column("Hugging Face DINOv2", None, "Hugging Face's Dinov2Model"),
            "hf_dinov3": Column("Hugging Face DINOv3", "a Hugging Face DINOv3ViTModel",
                             "Hugging Face's DINOv3ViTModel"),
            "hf_siglip2": Column("Hugging Face SigLIP 2 NaFlex", "a Hugging Face Siglip2VisionModel",
                              "Hugging Face's Siglip2VisionModel"),
        },
        written_as=huggingface_column, writes_folder=_folder_unless_safetensors),
)}
_REFUSED = (("`*.bin`, `*.pth`, `*.pt`, `*.pkl`, `*.pickle`, `*.ckpt`", "refused: see [Safety](#safety)"),
            ("anything else", "`CheckpointError: unknown checkpoint format`"))


def known_formats():
    """The formats keras_vit reads, in words, for error messages."""
    return "; ".join(format.title for format in FORMATS.values())


def markdown():
    """The docs' table of which path is read as which format (docs/checkpoints.md)."""
    rows = [row for format in FORMATS.values() for row in format.paths]
    return "\n".join(["| Path | Reader |", "|---|---|", *(f"| {path} | {what} |" for path, what in [*rows, *_REFUSED])])


def _refuse_pickle(path):
    raise CheckpointError(
        f"{path} is a pickle-based PyTorch file, which can run arbitrary code when loaded, so keras_vit does "
        "not open it. Convert it to safetensors where you trust it, e.g. "
        "`safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')` (for "
        "Hugging Face: `model.save_pretrained(dir, safe_serialization=True)`).")


def _safetensors_keys(path):
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as file:
            return tuple(file.keys())
    except Exception as error:  # safetensors raises several error types
        raise CheckpointError(
            f"{path} could not be read as safetensors ({error}). The file may be "
            "truncated: download or save it again."
        ) from error


def _found(path):
    """`path` as a `Found`, refusing what no format reads (pickles, work directories)."""
    if path.suffix in PICKLE_SUFFIXES:
        _refuse_pickle(path)
    if not path.is_dir():
        return Found(path, keys=_safetensors_keys(path) if path.suffix == ".safetensors" else ())
    if (path / "model.keras").exists() or (path / "checkpoints").is_dir():
        raise CheckpointError(
            f"{path} is a keras_vit work directory, not a checkpoint: its trained model is "
            f"{path / 'model.keras'}" + ("" if (path / "model.keras").exists() else
                                        ", written when its run ends") + ".")
    if not (path / "model.safetensors").exists():
        pickled = [p for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES]
        if pickled:
            _refuse_pickle(pickled[0])
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path} is a directory without config.json. Known formats: {known_formats()}.")
    return Found(path, config=read_config_json(path / "config.json"))


def format_of(path):
    """The `Format` of a local checkpoint, decided from its name, its ``config.json`` and (safetensors) its
    key names before any weights are read: the first in `FORMATS` whose ``claims`` it.

    Raises:
        CheckpointError: no such file, a pickle-based file, or an unknown format.
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise CheckpointError(f"No checkpoint at {path}.")
    found = _found(path)
    format = next((f for f in FORMATS.values() if f.claims(found)), None)
    if format is None:
        kind = "a safetensors file but not a known ViT layout" if found.keys else "an unknown checkpoint format"
        first = f" (first keys: {sorted(found.keys)[:5]})" if found.keys else ""
        raise CheckpointError(f"{path}: {kind}{first}. Known formats: {known_formats()}.")
    if format.name == "huggingface" and found.config is None and not (weights_folder(path) / "config.json").exists():
        raise CheckpointError(
            f"{path} holds Hugging Face ViT weights but there is no config.json "
            "beside it; pass the directory saved by `save_pretrained`.")
    return format


def reader_for(path):
    """The reader a local checkpoint needs (`format_of`'s ``read``): ``read(path, num_heads=None)``, a
    :func:`~keras_vit.weights.npz.read_npz`, :func:`~keras_vit.weights.huggingface.read_huggingface`,
    :func:`~keras_vit.weights.timm.read_timm` or :func:`~keras_vit.weights.keras_hub.read_keras_hub`."""
    return format_of(path).read


def read_checkpoint(path, num_heads=None):
    """Reads any supported checkpoint into a :class:`Checkpoint`.

    Args:
        path: a checkpoint file or folder (`format_of`).
        num_heads: the number of attention heads, for files that do not store it (timm's); where the files
            store it, a different count is refused.
    """
    return reader_for(path)(path, num_heads)
