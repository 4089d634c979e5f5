"""The catalogue of released checkpoints: every entry parses and resolves to
the reader its format needs, without downloading anything."""

import ast
import json
import pathlib

import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.presets import PRESETS
from keras_vit.presets import preset_config
from keras_vit.weights import download
from keras_vit.weights import formats
from keras_vit.weights import pretrained
from keras_vit.weights.huggingface import read_huggingface
from keras_vit.weights.npz import read_npz
from keras_vit.weights.timm import read_timm

ENTRIES = list(pretrained.PRETRAINED.values())
READERS = {"npz": read_npz, "huggingface": read_huggingface, "timm": read_timm}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_parses(entry):
    config = preset_config(entry.architecture)
    assert entry.name == f"{entry.architecture}.{entry.name.split('.', 1)[1]}"
    assert pretrained.PRETRAINED[entry.name] is entry
    stride = 4 * 2 ** max(len(config["resnet_block_units"]) - 1, 0) if "resnet_block_units" in config else 1
    assert entry.image_size % (config["patch_size"] * stride) == 0
    assert entry.num_classes in (0, 1000, 21843)
    assert (entry.class_names == "imagenet1k") == (entry.num_classes == 1000)
    assert entry.top1 is None or 50 < entry.top1 < 95
    assert entry.format in READERS and entry.reference and entry.pretraining


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_resolves_to_its_reader(entry, tmp_path):
    """What the URL downloads to, laid out as the source lays it out, goes
    to the reader of the entry's format."""
    if entry.format == "npz":
        assert entry.url.startswith("https://storage.googleapis.com/") and entry.url.endswith(".npz")
        local = download.cache_path(entry.url)
        assert local.suffix == ".npz"
        path = tmp_path / local.name
        path.write_bytes(b"")
    else:
        repo_id, revision, subpath = download.parse_hf_url(entry.url.removeprefix("hf://"))
        assert revision is None and subpath is None
        owner, repo = repo_id.split("/")
        path = tmp_path / repo
        path.mkdir()
        if entry.format == "huggingface":
            assert owner == "google" and repo.startswith("vit-")
            config = {"model_type": "vit"}
        else:
            assert owner == "timm" and repo.startswith("vit_") and "." in repo
            assert f"_{entry.image_size}." in repo  # timm names carry the resolution
            config = {"architecture": repo.split(".")[0]}
        (path / "config.json").write_text(json.dumps(config))
        (path / "model.safetensors").write_bytes(b"")
    assert formats.reader_for(path) is READERS[entry.format]


def test_listing_by_our_name_or_the_papers():
    for paper_name in ("ViT-B/16", "ViT-L/16", "ViT-B/32", "ViT-L/32", "ViT-H/14", "R50+ViT-B/16"):
        entries = keras_vit.pretrained(paper_name)
        assert entries and entries == keras_vit.pretrained(entries[0].architecture)
    assert len(keras_vit.pretrained()) == len(ENTRIES)
    with pytest.raises(ValueError, match="Unknown preset 'ViT-X/9'"):
        keras_vit.pretrained("ViT-X/9")


def test_default_and_unknown_names():
    assert pretrained.default_pretrained("ViT-B/32").name == "vit_b32.augreg_in21k_ft_in1k_384"
    default = pretrained.default_pretrained("vit_b16")
    assert default.image_size == 224 and default.top1 == max(
        e.top1 for e in keras_vit.pretrained("vit_b16")
        if e.image_size == 224 and e.top1 and e.pretraining == default.pretraining)
    for name in PRESETS:
        assert pretrained.default_pretrained(name).architecture == name
    with pytest.raises(ValueError, match="Closest: vit_b16.augreg_in21k_ft_in1k_224"):
        pretrained.get_pretrained("vit_b16.augreg_in21k_ft_in1k_244")


def test_imagenet_class_names_are_the_standard_list():
    names = pretrained.imagenet1k_class_names()
    assert len(names) == 1000 and len(set(names)) == 1000
    assert names[0] == "tench, Tinca tinca" and names[1] == "goldfish, Carassius auratus"
    assert names[281] == "tabby, tabby cat" and names[999] == "toilet tissue, toilet paper, bathroom tissue"
    tfds = pytest.importorskip("tensorflow_datasets")
    source = pathlib.Path(tfds.__file__).parent / "datasets" / "siscore" / "labels.py"
    tree = ast.parse(source.read_text())
    listed = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "IMAGENET_LABELS_LIST")
    assert names == listed


def test_cli_lists_the_released_checkpoints(capsys):
    assert main(["pretrained", "ViT-B/16"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(keras_vit.pretrained("vit_b16"))
    assert any(line.startswith("vit_b16.augreg_in21k_ft_in1k_384 ") and "85.49" in line for line in lines)
