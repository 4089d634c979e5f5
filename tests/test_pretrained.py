"""The catalogue of released checkpoints: every entry parses and resolves to
the reader its format needs, without downloading anything."""

import ast
import json
import pathlib

import pytest

import keras_vit
from keras_vit import released
from keras_vit.cli import main
from keras_vit.config import resnet_stride
from keras_vit.io import download
from keras_vit.presets import FAMILY_PRESETS
from keras_vit.presets import PRESETS
from keras_vit.presets import preset_config
from keras_vit.weights import formats
from keras_vit.weights import timm
from keras_vit.weights.huggingface import read_huggingface
from keras_vit.weights.npz import read_npz
from keras_vit.weights.timm import read_timm

pytestmark = pytest.mark.backend_independent

ALL_ENTRIES = list(released.PRETRAINED.values())
# the paper's ViT and its hybrids; the family's entries are checked on their own below
ENTRIES = [e for e in ALL_ENTRIES if e.architecture not in FAMILY_PRESETS]
FAMILY_ENTRIES = [e for e in ALL_ENTRIES if e.architecture in FAMILY_PRESETS]
READERS = {"npz": read_npz, "huggingface": read_huggingface, "timm": read_timm}


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_entry_parses(entry):
    config = preset_config(entry.architecture)
    assert entry.architecture in PRESETS
    assert entry.name == f"{entry.architecture}.{entry.name.split('.', 1)[1]}"
    assert released.PRETRAINED[entry.name] is entry
    stride = resnet_stride(config.resnet_block_units) if config.resnet_block_units is not None else 1
    assert entry.image_size in (224, 384)
    assert entry.image_size % (config.patch_size[0] * stride) == 0
    # 0: released without a head (Hugging Face *-in21k, timm orig_in21k).
    assert entry.num_classes in (0, 1000, 21843)
    assert (entry.class_names == "imagenet1k") == (entry.num_classes == 1000)
    assert entry.top1 is None or (50 < entry.top1 < 95 and entry.num_classes == 1000)
    assert entry.top1 is None or "top-1:" in entry.reference  # the number's source is named
    assert entry.format in READERS and entry.reference and entry.pretraining
    assert entry.pretraining in ("ImageNet-21k", "ImageNet-1k", "ImageNet-21k, fine-tuned on ImageNet-1k")
    assert (entry.pretraining == "ImageNet-21k") == (entry.num_classes != 1000)
    assert entry.sha256 is None and entry.size is None  # no source publishes them
    tag = entry.name.split(".", 1)[1]
    assert tag.startswith({"npz": ("orig_", "augreg_", "bv_"), "huggingface": ("hf_",), "timm": ("timm_",)}[entry.format])
    if entry.format == "npz":
        assert entry.gcs == "gs://" + entry.url.removeprefix("https://storage.googleapis.com/")
        assert entry.gcs.startswith(("gs://vit_models/imagenet21k/", "gs://vit_models/imagenet21k+imagenet2012/",
                                     "gs://vit_models/augreg/", "gs://big_vision/"))
    else:
        assert entry.gcs is None
    if entry.format == "timm":
        assert entry.name.endswith(f"_{entry.image_size}")
        assert entry.url == f"hf://timm/{entry.url.split('/')[-1]}"


def test_names_are_unique_and_the_sources_complete():
    names = [entry.name for entry in released._rows()]
    assert len(names) == len(set(names)) == len(ALL_ENTRIES) == len(ENTRIES) + len(FAMILY_ENTRIES)
    urls = [entry.url for entry in ENTRIES]
    assert len(urls) == len(set(urls))  # one row per released file
    by_format = {f: sum(e.format == f for e in ENTRIES) for f in READERS}
    assert by_format == {"npz": 50, "huggingface": 11, "timm": 36}
    # The vision_transformer README's recommended AugReg checkpoints, as published.
    for name, top1 in [("vit_l16", 85.59), ("vit_b16", 85.49), ("vit_s16", 83.73), ("r50_vit_l32", 85.99),
                       ("r26_vit_s32", 83.85), ("vit_ti16", 78.22), ("vit_b32", 83.59), ("vit_s32", 79.58),
                       ("r_vit_ti16", 75.40)]:
        entry = released.get_pretrained(f"{name}.augreg_in21k_ft_in1k_384")
        assert entry.top1 == top1 and entry.url.endswith("-res_384.npz")
        upstream = released.get_pretrained(f"{name}.augreg_in21k")
        assert entry.url.startswith(upstream.url.removesuffix(".npz") + "--imagenet2012-steps_20k-lr_0.0")
    b16 = released.get_pretrained("vit_b16.augreg_in21k_ft_in1k_384")
    assert b16.gcs == ("gs://vit_models/augreg/B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
                       "--imagenet2012-steps_20k-lr_0.03-res_384.npz")
    assert released.get_pretrained("vit_b16.orig_in21k").url == (
        "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz")
    assert released.get_pretrained("vit_s16.bv_in1k_300ep").gcs == "gs://big_vision/vit_s16_i1k_300ep.npz"
    assert released.get_pretrained("vit_b16.hf_in21k_ft_in1k_224").url == "hf://google/vit-base-patch16-224"
    assert released.get_pretrained("vit_b16.timm_augreg2_in21k_ft_in1k_224").url == (
        "hf://timm/vit_base_patch16_224.augreg2_in21k_ft_in1k")


def hub_folder(entry, tmp_path):
    """(owner, repo, a new folder named as the repo) of an ``hf://`` entry,
    which names a whole repository."""
    repo_id, revision, subpath = download.parse_hf_url(entry.url.removeprefix("hf://"))
    assert revision is None and subpath is None
    owner, repo = repo_id.split("/")
    path = tmp_path / repo
    path.mkdir()
    return owner, repo, path


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
        owner, repo, path = hub_folder(entry, tmp_path)
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


FAMILY_NUMBERS = {  # (preset, tag) -> (reported number, what it measures)
    ("deit_ti16_distilled", "fb_in1k_224"): (74.5, "top-1"),
    ("deit_s16_distilled", "fb_in1k_224"): (81.2, "top-1"),
    ("deit_b16_distilled", "fb_in1k_224"): (83.4, "top-1"),
    ("deit_b16_distilled", "fb_in1k_384"): (85.2, "top-1"),
    ("dinov2_s14", "lvd142m_518"): (81.1, "linear-probe top-1"),
    ("dinov2_b14", "lvd142m_518"): (84.5, "linear-probe top-1"),
    ("dinov2_l14", "lvd142m_518"): (86.3, "linear-probe top-1"),
    ("dinov2_g14", "lvd142m_518"): (86.5, "linear-probe top-1"),
    ("dinov2_s14_reg4", "lvd142m_518"): (80.9, "linear-probe top-1"),
    ("dinov2_b14_reg4", "lvd142m_518"): (84.6, "linear-probe top-1"),
    ("dinov2_l14_reg4", "lvd142m_518"): (86.7, "linear-probe top-1"),
    ("dinov2_g14_reg4", "lvd142m_518"): (87.1, "linear-probe top-1"),
    ("clip_b32", "openai_224"): (63.2, "zero-shot top-1"),
    ("clip_b16", "openai_224"): (68.6, "zero-shot top-1"),
    ("clip_l14", "openai_224"): (75.3, "zero-shot top-1"),
    ("clip_l14_336", "openai_336"): (76.2, "zero-shot top-1"),
    ("siglip_b16", "webli_224"): (76.04, "zero-shot top-1"),
    ("siglip_so400m14", "webli_384"): (83.08, "zero-shot top-1"),
    **{(f"dinov3_{size}", "lvd1689m"): (number, "linear-probe top-1 (ImageNet-ReaL)") for size, number in (
        ("s16", 87.0), ("s16plus", 88.0), ("b16", 89.3), ("l16", 90.2), ("h16plus", 90.3), ("7b16", 90.4))},
    # apple/ml-aim's README at bd9e068, IN-1k with a frozen trunk
    **{(f"aimv2_{size}", f"apple_pt_{resolution}"): (number, "attentive-probe top-1")
       for size, numbers in (("l14", (86.6, 87.6, 87.9)), ("h14", (87.5, 88.2, 88.6)),
                             ("1b14", (88.1, 88.7, 89.0)), ("3b14", (88.5, 89.2, 89.5)))
       for resolution, number in zip((224, 336, 448), numbers)},
}


@pytest.mark.parametrize("entry", FAMILY_ENTRIES, ids=lambda e: e.name)
def test_family_entry_parses_and_resolves_to_its_reader(entry, tmp_path):
    config = preset_config(entry.architecture, image_size=entry.image_size)  # the size fits the preset
    source, tag = entry.name.split(".")[1].split("_", 1)
    assert source == {"huggingface": "hf", "timm": "timm"}[entry.format]
    assert released.PRETRAINED[entry.name] is entry
    assert entry.num_classes == config.num_classes  # the preset's head (CLIP: its projection)
    assert (entry.class_names == "imagenet1k") == (entry.num_classes == 1000)
    # SigLIP 2's NaFlex rows, PE's and EVA-02's cite the folder alone: no ImageNet number of them
    # was at hand
    assert (entry.top1 is not None and "top-1: " in entry.reference) or (
        entry.architecture.startswith(("siglip2", "pe_", "eva02", "radio")) and entry.top1 is None
        and "top-1" not in entry.reference)
    number = FAMILY_NUMBERS.get((entry.architecture, tag))
    assert number is None or (entry.top1, entry.metric) == number
    assert entry.metric in ("top-1", "linear-probe top-1", "linear-probe top-1 (ImageNet-ReaL)",
                            "zero-shot top-1", "attentive-probe top-1", "fine-tuned top-1")
    assert (entry.metric == "attentive-probe top-1") == entry.architecture.startswith("aimv2")
    assert (entry.metric == "top-1") == entry.architecture.startswith("deit")
    owner, repo, path = hub_folder(entry, tmp_path)
    if entry.format == "huggingface":
        assert owner in ("facebook", "openai", "google")
        model_type = {"deit": "deit", "dinov2": "dinov2", "dinov3": "dinov3_vit", "clip": "clip",
                      "siglip": "siglip", "siglip2": "siglip2"}[
            entry.architecture.split("_")[0]]
        config_json = {"model_type": model_type}
    else:
        assert owner == "timm" and "." in repo
        config_json = {"architecture": repo.split(".")[0]}
    (path / "config.json").write_text(json.dumps(config_json))
    (path / "model.safetensors").write_bytes(b"")
    assert formats.reader_for(path) is READERS[entry.format]
    # the released file and its twin on the other hub are the same weights (DINOv3 and SigLIP 2's
    # NaFlex: on Hugging Face's alone, timm's files of them are not read; AIMv2 and PE: on timm's
    # alone, Apple's Hugging Face folders need their own remote code, Meta's and EVA-02's are their
    # code's own .pt files)
    twin = "timm" if source == "hf" else "hf"
    if not entry.architecture.startswith(("dinov3", "siglip2", "aimv2", "pe_", "eva02", "radio")):
        assert released.PRETRAINED[f"{entry.architecture}.{twin}_{tag}"].top1 == entry.top1
    else:
        assert f"{entry.architecture}.{twin}_{tag}" not in released.PRETRAINED


@pytest.mark.backend_independent
def test_family_presets_have_their_timm_architectures_shapes():
    """Each family preset released on timm's Hub has the shape that timm's own
    entry point builds (timm_architectures.json): width, depth, heads, patch,
    registers, LayerScale or none, a final norm or none."""
    table = timm.architectures()["architectures"]
    checked = set()
    for entry in FAMILY_ENTRIES:
        if entry.format != "timm":
            continue
        args = table[entry.url.split("/")[-1].split(".")[0]]["args"]
        c = preset_config(entry.architecture, image_size=entry.image_size)
        ours = {"embed_dim": c.hidden_dim, "depth": c.num_layers, "num_heads": c.num_heads,
                "patch_size": c.patch_size[0], "reg_tokens": c.num_registers, "final_norm": c.final_norm,
                "init_values": c.layer_scale_init is not None}  # its value is an initializer alone
        theirs = {**args, "init_values": bool(args.get("init_values"))}
        assert {k: v for k, v in ours.items() if k in args} == {k: theirs[k] for k in ours if k in args}, entry.name
        checked.add(entry.architecture.split("_")[0])
    assert checked == {"deit", "dinov2", "clip", "siglip", "aimv2", "eva02", "pe", "radio"}


def test_family_presets_default_to_their_release():
    assert released.default_pretrained("dinov2_b14").name == "dinov2_b14.hf_lvd142m_518"
    assert released.default_pretrained("deit_b16_distilled").name == "deit_b16_distilled.hf_fb_in1k_224"
    assert released.default_pretrained("CLIP ViT-L/14").name == "clip_l14.hf_openai_224"
    for name in FAMILY_PRESETS:
        assert released.default_pretrained(name).architecture == name


def test_listing_by_our_name_or_the_papers():
    for paper_name in ("ViT-B/16", "ViT-L/16", "ViT-B/32", "ViT-L/32", "ViT-H/14", "R50+ViT-B/16"):
        entries = keras_vit.pretrained(paper_name)
        assert entries and entries == keras_vit.pretrained(entries[0].architecture)
    assert len(keras_vit.pretrained()) == len(ALL_ENTRIES)
    with pytest.raises(ValueError, match="Unknown preset 'ViT-X/9'"):
        keras_vit.pretrained("ViT-X/9")


def test_default_and_unknown_names():
    assert released.default_pretrained("ViT-B/16").name == "vit_b16.augreg_in21k_ft_in1k_224"
    assert released.default_pretrained("ViT-B/32").name == "vit_b32.augreg_in21k_ft_in1k_224"
    assert released.default_pretrained("ViT-L/32").name == "vit_l32.orig_in21k_ft_in1k_384"  # no AugReg
    assert released.default_pretrained("ViT-H/14").name == "vit_h14.orig_in21k"  # no ImageNet-1k head
    assert released.default_pretrained("R50+ViT-B/16").name == "r50_vit_b16.orig_in21k_ft_in1k_384"
    for name in set(PRESETS) - set(FAMILY_PRESETS):
        default = released.default_pretrained(name)
        assert default.architecture == name and default.format == "npz"
        augreg_224 = [e for e in keras_vit.pretrained(name) if e.format == "npz" and e.image_size == 224
                      and e.name.split(".")[1].startswith("augreg_in21k_ft_in1k")]
        if augreg_224:
            assert default.top1 == max(e.top1 for e in augreg_224)
    with pytest.raises(ValueError, match="Closest: vit_b16.augreg_in21k_ft_in1k_224"):
        released.get_pretrained("vit_b16.augreg_in21k_ft_in1k_244")
    with pytest.raises(ValueError, match=r"'vit_b16\.nope' is not a released checkpoint.*keras-vit pretrained"):
        released.get_pretrained("vit_b16.nope")


def test_imagenet_class_names_are_the_standard_list():
    names = released.imagenet1k_class_names()
    assert len(names) == 1000 and len(set(names)) == 1000
    assert names[0] == "tench, Tinca tinca" and names[1] == "goldfish, Carassius auratus"
    assert names[281] == "tabby, tabby cat" and names[999] == "toilet tissue, toilet paper, bathroom tissue"
    assert names[134] == "crane (bird)" and names[517] == "crane (machine)"
    assert all(name and name == name.strip() for name in names)
    assert names is not released.imagenet1k_class_names()  # callers may change their copy
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
