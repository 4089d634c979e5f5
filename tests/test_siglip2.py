"""SigLIP 2 NaFlex (Tschannen et al., "SigLIP 2", arXiv:2502.14786): transformers'
``Siglip2VisionModel`` and ``Siglip2Model`` folders read as a NaFlex `ViT` and
`ImageTextModel`, against transformers on the Siglip2 processor's own outputs
(small random models saved here), on every backend; a NaFlex model written
back as a ``Siglip2VisionModel`` folder that transformers loads with the same
numbers; the released names read offline from a Hugging Face cache; the
errors of a folder keras_vit cannot read."""

import json
import shutil

import numpy as np
import pytest
from helpers import LazyModule
from helpers import to_numpy

from keras_vit import ImageTextModel
from keras_vit import ViT
from keras_vit import naflex_inputs
from keras_vit import zero_shot_classifier
from keras_vit.weights import CheckpointError

torch = LazyModule("torch", reason="transformers' models run on PyTorch")
transformers = LazyModule("transformers", reason="the reference Siglip2 models")

TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)
VISION = dict(TOWER, patch_size=8, num_patches=16)  # a 4 x 4 position table: 32 px
BUDGET = 24  # max_num_patches
SIZES = [(40, 90), (64, 64), (7, 300), (33, 17)]  # wide, square, a strip, tall
CONTEXT = 16
TOLERANCE = 1e-4


def _images(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3)).astype(np.uint8) for h, w in SIZES]


def _randomize(model):
    """Every weight random, LayerNorms too; a two-tower model's logit bias set."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if not name.startswith("logit_"):
                parameter.normal_(0.0, 0.2)
        if hasattr(model, "logit_bias"):
            model.logit_bias.fill_(-1.5)
    return model.eval()


def _processor():
    return transformers.Siglip2ImageProcessor(max_num_patches=BUDGET, patch_size=8)


def as_naflex(processed):
    """The Siglip2 processor's ``pixel_values``, ``pixel_attention_mask`` and
    ``spatial_shapes`` as a NaFlex `ViT`'s ``patches``, ``patch_mask`` and
    ``spatial_shapes``."""
    return {"patches": np.asarray(processed["pixel_values"], np.float32),
            "patch_mask": np.asarray(processed["pixel_attention_mask"], np.int32),
            "spatial_shapes": np.asarray(processed["spatial_shapes"], np.int32)}


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    """A random ``Siglip2VisionModel`` saved with its image processor
    (preprocessor_config.json, as the Hub's folders have it); the processor's
    inputs and transformers' outputs on `SIZES`."""
    folder = tmp_path_factory.mktemp("siglip2_vision")
    model = _randomize(transformers.Siglip2VisionModel(transformers.Siglip2VisionConfig(**VISION)))
    model.save_pretrained(folder)
    processor = _processor()
    processor.save_pretrained(folder)
    processed = processor(_images(), return_tensors="pt")
    with torch.no_grad():
        out = model(**processed)
    return folder, as_naflex(processed), {"last_hidden_state": out.last_hidden_state.numpy(),
                                          "pooler_output": out.pooler_output.numpy()}


@pytest.fixture(scope="module")
def two_towers(tmp_path_factory):
    """A random ``Siglip2Model`` saved with a Gemma-style tokenizer and its
    processor (processor_config.json, as transformers 5 saves one); the ids,
    the images' inputs and transformers' outputs."""
    from test_image_text import TEXTS
    from test_image_text import siglip2_tokenizer

    folder = tmp_path_factory.mktemp("siglip2")
    tokenizer = siglip2_tokenizer(folder)
    text = dict(TOWER, vocab_size=len(tokenizer), max_position_embeddings=CONTEXT)
    config = transformers.Siglip2Config(text_config=text, vision_config=VISION)
    model = _randomize(transformers.Siglip2Model(config))
    model.save_pretrained(folder)
    processor = transformers.Siglip2Processor(image_processor=_processor(), tokenizer=tokenizer)
    processor.save_pretrained(folder)
    processed = _processor()(_images(1), return_tensors="pt")
    ids = tokenizer(TEXTS, padding="max_length", max_length=CONTEXT, truncation=True,
                    return_tensors="pt")["input_ids"]
    # The text tower attends to every position, as big_vision's (and open_clip's): the
    # ids alone, without the tokenizer's attention_mask, which transformers would apply
    with torch.no_grad():
        out = model(input_ids=ids, **processed)
    expected = {"logits_per_image": out.logits_per_image.numpy(),
                "pooler_output": out.vision_model_output.pooler_output.numpy()}
    return folder, ids.numpy(), as_naflex(processed), expected


def _max_difference(ours, theirs, mask=None):
    difference = np.abs(to_numpy(ours) - theirs)
    return float((difference[mask.astype(bool)] if mask is not None else difference).max())


def test_vision_folder_gives_transformers_numbers(vision):
    folder, x, expected = vision
    model = ViT.from_checkpoint(folder)
    c = model.config
    assert (c.naflex, c.max_num_patches) == (True, BUDGET)
    assert (c.image_size, c.patch_size) == ((32, 32), (8, 8))
    assert (c.pooling, c.num_classes, c.class_token) == ("map", 0, None)
    # the valid patches' tokens (transformers leaves the padding's in the output)
    tokens = model.intermediates(x)["encoded"]
    hidden = _max_difference(tokens, expected["last_hidden_state"], x["patch_mask"])
    pooled = _max_difference(model(x), expected["pooler_output"])
    print(f"last_hidden_state {hidden:.2e}, pooler_output {pooled:.2e}")
    assert hidden < TOLERANCE and pooled < TOLERANCE


@pytest.mark.slow
def test_two_tower_folder_gives_transformers_numbers(two_towers):
    from test_image_text import TEXTS

    folder, ids, x, expected = two_towers
    model = ImageTextModel.from_checkpoint(folder)
    assert model.name == "siglip2" and model.image_model.config.naflex
    assert model.logit_bias is not None
    np.testing.assert_array_equal(model.tokenize(TEXTS), ids)
    logits = _max_difference(model.similarity(x, ids), expected["logits_per_image"])
    called = _max_difference(model({"images": x, "token_ids": ids}), expected["logits_per_image"])
    pooled = _max_difference(model.image_model(x), expected["pooler_output"])
    print(f"logits_per_image {logits:.2e}, pooler_output {pooled:.2e}")
    assert max(logits, called, pooled) < TOLERANCE
    # the image tower alone, from the same folder
    tower = ViT.from_checkpoint(folder)
    assert _max_difference(tower(x), expected["pooler_output"]) < TOLERANCE
    # zero-shot: a NaFlex ViT whose logits are the two towers'
    classifier = zero_shot_classifier(model, ["cat", "dog", "bird"], templates=["a photo of a {}."])
    assert isinstance(classifier, ViT) and classifier.config.naflex
    texts = model.encode_text(model.tokenize([f"a photo of a {n}." for n in ("cat", "dog", "bird")]))
    expected_logits = model.logits(model.encode_images(x), texts)
    np.testing.assert_allclose(to_numpy(classifier(x)), to_numpy(expected_logits), rtol=0, atol=1e-4)


@pytest.mark.backend_independent
def test_naflex_model_writes_a_folder_transformers_loads(vision, tmp_path):
    folder, _, _ = vision
    model = ViT.from_checkpoint(folder).with_config(pixel_scale=(1 / 60, 1 / 70, 1 / 80),
                                                    pixel_offset=(-2.0, -1.9, -1.8))
    model.save_checkpoint(tmp_path / "out", checkpoint_format="huggingface")
    processor_config = json.loads((tmp_path / "out" / "preprocessor_config.json").read_text())
    assert (processor_config["max_num_patches"], processor_config["patch_size"]) == (BUDGET, 8)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["model_type"], config["num_patches"]) == ("siglip2_vision_model", 16)
    hf = transformers.Siglip2VisionModel.from_pretrained(tmp_path / "out").eval()
    processed = transformers.Siglip2ImageProcessor.from_pretrained(tmp_path / "out")(
        _images(2), return_tensors="pt")
    x = as_naflex(processed)
    with torch.no_grad():
        expected = hf(**processed).pooler_output.numpy()
    assert _max_difference(model(x), expected) < TOLERANCE
    # the processor's grids and masks are naflex_inputs' with the model's scaling
    ours = naflex_inputs(_images(2), 8, BUDGET, model.config.pixel_scale, model.config.pixel_offset)
    np.testing.assert_array_equal(ours["spatial_shapes"], x["spatial_shapes"])
    np.testing.assert_array_equal(ours["patch_mask"], x["patch_mask"])
    back = ViT.from_checkpoint(tmp_path / "out")
    assert back.config.replace(pixel_scale=model.config.pixel_scale) == model.config
    np.testing.assert_allclose(back.config.pixel_scale, model.config.pixel_scale, rtol=1e-12)
    with pytest.raises(ValueError, match="pooling 'token': Hugging Face's Siglip2VisionModel pools "
                                         "with its attention head"):
        ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
            num_classes=0, naflex=True, max_num_patches=4).save_checkpoint(tmp_path / "token",
                                                                           format="huggingface")


@pytest.mark.backend_independent
def test_released_names_read_offline_from_the_hugging_face_cache(two_towers, vision, tmp_path,
                                                                  monkeypatch):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from test_download import write_hf_cache

    folder, ids, x, expected = two_towers
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    write_hf_cache(tmp_path / "hub", "google/siglip2-base-patch16-naflex", files,
                   "0123456789abcdef0123456789abcdef01234567")
    model = ImageTextModel.from_checkpoint("siglip2_b16.hf_webli_naflex")
    assert _max_difference(model.similarity(x, ids), expected["logits_per_image"]) < TOLERANCE
    tower = ViT.from_checkpoint("siglip2_b16.hf_webli_naflex")
    assert tower.config.naflex and _max_difference(tower(x), expected["pooler_output"]) < TOLERANCE


def _copy(vision, tmp_path, name="bad"):
    target = tmp_path / name
    shutil.copytree(vision[0], target)
    return target


def _edit_json(path, **changes):
    config = json.loads(path.read_text())
    config.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del config[key]
    path.write_text(json.dumps(config))


@pytest.mark.backend_independent
def test_folders_keras_vit_cannot_read_say_what_to_do(vision, tmp_path):
    from safetensors.numpy import load_file
    from safetensors.numpy import save_file

    folder = _copy(vision, tmp_path, "extra")
    tensors = load_file(folder / "model.safetensors")
    save_file({**tensors, "embeddings.mystery.weight": np.zeros(3, np.float32)},
              folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"extra has keys keras_vit does not know.*"
                                              r"embeddings\.mystery\.weight"):
        ViT.from_checkpoint(folder)
    folder = _copy(vision, tmp_path, "no_patches")
    _edit_json(folder / "config.json", num_patches=None)
    with pytest.raises(CheckpointError, match=r"no_patches/config\.json lacks 'num_patches'.*save or "
                                              r"download it again"):
        ViT.from_checkpoint(folder)
    _edit_json(folder / "config.json", num_patches=12)
    with pytest.raises(CheckpointError, match=r"config\.json: num_patches 12 is not a square"):
        ViT.from_checkpoint(folder)
    folder = _copy(vision, tmp_path, "processor")
    _edit_json(folder / "preprocessor_config.json", patch_size=16)
    with pytest.raises(CheckpointError, match=r"the image processor's patch_size is 16 and config\.json's "
                                              r"8.*processor\.save_pretrained"):
        ViT.from_checkpoint(folder)
    folder = _copy(vision, tmp_path, "missing")
    save_file({k: v for k, v in tensors.items() if not k.startswith("head.")},
              folder / "model.safetensors")
    with pytest.raises(CheckpointError, match="a SigLIP 2 tower without its attention-pooling head"):
        ViT.from_checkpoint(folder)
    save_file({k: v for k, v in tensors.items() if k != "embeddings.position_embedding.weight"},
              folder / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"expected key 'embeddings\.position_embedding\.weight' "
                                              r"is missing"):
        ViT.from_checkpoint(folder)
    with pytest.raises(CheckpointError, match=r"holds SigLIP 2's image tower alone \(Siglip2VisionModel\)"):
        ImageTextModel.from_checkpoint(vision[0])
