"""keras-hub presets both ways: random small keras-hub ViTs saved with
keras-hub's own `save_to_preset` read with keras-hub's numbers, and
written back to presets that keras-hub loads with the same numbers."""

import json

import numpy as np
import pytest
from helpers import LazyModule
from helpers import to_numpy

from keras_vit import ViT

keras_hub = LazyModule("keras_hub")  # a development dependency: missing, the tests fail

SMALL = dict(image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
             mlp_dim=32)
# (backbone arguments, classifier arguments or None)
CASES = {
    "backbone": ({}, None),
    "backbone-gap-no-mlp-bias": (dict(use_class_token=False, use_mlp_bias=False), None),
    "classifier": ({}, dict(num_classes=5)),
    "classifier-pre-logits-gap": (dict(use_class_token=False), dict(num_classes=5, pooling="gap",
                                                                     intermediate_dim=12)),
}


def randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))


def hub_preset(folder, backbone_args, task_args):
    """A keras-hub model of random weights saved as a preset; its numbers
    on `IMAGES` (features: the [class] token, or the tokens' mean)."""
    backbone = keras_hub.models.ViTBackbone(**SMALL, **backbone_args)
    if task_args is None:
        randomize(backbone)
        backbone.save_to_preset(str(folder))
        tokens = to_numpy(backbone(IMAGES))
        return tokens[:, 0] if backbone_args.get("use_class_token", True) else tokens.mean(1)
    converter = keras_hub.layers.ViTImageConverter(image_size=(32, 32), scale=1 / 127.5, offset=-1)
    task = keras_hub.models.ViTImageClassifier(
        backbone=backbone, **task_args,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter))
    randomize(task)
    task.save_to_preset(str(folder))
    return to_numpy(task(IMAGES))


IMAGES = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow_cases("backbone-gap-no-mlp-bias", "backbone")
def test_a_keras_hub_preset_reads_with_its_numbers_and_writes_back(tmp_path, case):
    backbone_args, task_args = CASES[case]
    expected = hub_preset(tmp_path / "hub", backbone_args, task_args)
    model = ViT.from_checkpoint(tmp_path / "hub")
    assert model.gelu_approximate is False and model.num_classes == (task_args or {}).get("num_classes", 0)
    np.testing.assert_allclose(to_numpy(model(IMAGES)), expected, rtol=0, atol=1e-5)

    out = model.save_checkpoint(tmp_path / "out", checkpoint_format="keras_hub")
    config = json.loads((out / "config.json").read_text())
    assert config["registered_name"] == "keras_hub>ViTBackbone"
    if task_args is None:
        back = keras_hub.models.Backbone.from_preset(str(out))
        tokens = to_numpy(back(IMAGES))
        got = tokens[:, 0] if backbone_args.get("use_class_token", True) else tokens.mean(1)
    else:
        got = to_numpy(keras_hub.models.ImageClassifier.from_preset(str(out))(IMAGES))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert ViT.from_checkpoint(out).config == model.config  # and read once more


@pytest.mark.parametrize("classifier", [False, True], ids=["deit", "deit-classifier"])
@pytest.mark.slow_cases("deit")
def test_a_keras_hub_deit_preset_reads_with_its_numbers(tmp_path, classifier):
    # a distillation token beside the [class] token, whose head alone classifies
    backbone = keras_hub.models.DeiTBackbone(image_shape=(32, 32, 3), patch_size=8, num_layers=2,
                                             num_heads=2, hidden_dim=16, intermediate_dim=32)
    if classifier:
        converter = keras_hub.layers.DeiTImageConverter(image_size=(32, 32), scale=1 / 127.5,
                                                        offset=-1)
        task = keras_hub.models.DeiTImageClassifier(
            backbone=backbone, num_classes=5,
            preprocessor=keras_hub.models.DeiTImageClassifierPreprocessor(image_converter=converter))
        randomize(task)
        task.save_to_preset(str(tmp_path / "deit"))
        expected = to_numpy(task(IMAGES))
    else:
        randomize(backbone)
        backbone.save_to_preset(str(tmp_path / "deit"))
        expected = to_numpy(backbone(IMAGES))[:, 0]
    model = ViT.from_checkpoint(tmp_path / "deit")
    assert (model.distillation, model.distillation_head, model.num_prefix_tokens) == (True, False, 2)
    assert model.parts.head_dist is None and model.parts.distillation_average is None
    np.testing.assert_allclose(to_numpy(model(IMAGES)), expected, rtol=0, atol=1e-5)

    out = model.save_checkpoint(tmp_path / "out", checkpoint_format="keras_hub")
    back = (keras_hub.models.ImageClassifier if classifier else keras_hub.models.Backbone).from_preset(str(out))
    got = to_numpy(back(IMAGES))
    np.testing.assert_allclose(got if classifier else got[:, 0], expected, rtol=0, atol=1e-5)
    distilled = ViT(**{**model.get_config(), "distillation_head": True, "num_classes": 5})
    with pytest.raises(ValueError, match="DeiT's two heads averaged"):
        distilled.save_checkpoint(tmp_path / "distilled", checkpoint_format="keras_hub")


@pytest.mark.parametrize("swiglu", [False, True], ids=["dinov2", "dinov2-swiglu"])
@pytest.mark.slow
def test_a_keras_hub_dinov2_preset_reads_with_its_numbers(tmp_path, swiglu):
    # registers, LayerScale and (giant) SwiGLU; its position table stored at
    # 64 px and interpolated by keras-hub to the 32 px it runs at
    backbone = keras_hub.models.DINOV2Backbone(
        patch_size=8, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
        num_register_tokens=2, use_swiglu_ffn=swiglu, image_shape=(32, 32, 3),
        position_embedding_shape=(64, 64, 3))
    randomize(backbone)
    backbone.save_to_preset(str(tmp_path / "dinov2"))
    expected = to_numpy(backbone.predict(IMAGES, verbose=0))[:, 0]  # LN(z_L), the [class] token
    model = ViT.from_checkpoint(tmp_path / "dinov2")
    assert (model.num_registers, model.mlp_activation) == (2, "swiglu" if swiglu else "gelu")
    assert model.layer_scale_init == 1.0 and model.gelu_approximate is False
    np.testing.assert_allclose(to_numpy(model(IMAGES)), expected, rtol=0, atol=1e-5)

    out = model.save_checkpoint(tmp_path / "out", checkpoint_format="keras_hub")  # at 32 px, written back
    back = keras_hub.models.Backbone.from_preset(str(out))
    assert type(back).__name__ == "DINOV2Backbone"
    np.testing.assert_allclose(to_numpy(back.predict(IMAGES, verbose=0))[:, 0], expected, rtol=0,
                               atol=1e-5)


@pytest.mark.parametrize("gated", [False, True], ids=["dinov3", "dinov3-gated"])
@pytest.mark.slow
def test_a_keras_hub_dinov3_preset_reads_with_its_numbers_at_any_size(tmp_path, gated):
    # rotary position embeddings, four registers, LayerScale; the gated one
    # (SwiGLU, as the largest) with a key bias and no MLP biases
    backbone = keras_hub.models.DINOV3Backbone(
        patch_size=8, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
        num_register_tokens=4, use_gated_mlp=gated, hidden_activation="silu" if gated else "gelu",
        use_key_bias=gated, use_mlp_bias=not gated, image_shape=(32, 32, 3))
    randomize(backbone)
    backbone.save_to_preset(str(tmp_path / "dinov3"))
    expected = to_numpy(backbone.predict(IMAGES, verbose=0))[:, 0]  # LN(z_L), the [class] token
    model = ViT.from_checkpoint(tmp_path / "dinov3")
    assert (model.position_embedding, model.num_registers, model.key_bias, model.mlp_bias) == (
        "rope", 4, gated, not gated)
    assert model.mlp_activation == ("swiglu" if gated else "gelu")
    np.testing.assert_allclose(to_numpy(model(IMAGES)), expected, rtol=0, atol=1e-5)
    # another resolution: the same weights, keras-hub's numbers at 48 px
    larger = np.random.default_rng(2).uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    at_48 = keras_hub.models.Backbone.from_preset(str(tmp_path / "dinov3"), image_shape=(48, 48, 3))
    np.testing.assert_allclose(to_numpy(ViT.from_checkpoint(tmp_path / "dinov3", image_size=48)(larger)),
                               to_numpy(at_48.predict(larger, verbose=0))[:, 0], rtol=0, atol=1e-5)

    out = model.save_checkpoint(tmp_path / "out", checkpoint_format="keras_hub")  # written back
    back = keras_hub.models.Backbone.from_preset(str(out))
    assert type(back).__name__ == "DINOV3Backbone"
    spec = json.loads((out / "config.json").read_text())  # what keras_vit's DINOv3 lacks is named
    for change, message in ((dict(use_proj_bias=False), "use_proj_bias=False; keras_vit's DINOv3 has "
                             "an output bias"),
                            (dict(hidden_activation="relu"),
                             f"hidden_activation 'relu' with use_gated_mlp={gated}")):
        (out / "config.json").write_text(json.dumps({**spec, "config": {**spec["config"], **change}}))
        with pytest.raises(ValueError, match=message):
            ViT.from_checkpoint(out)
    np.testing.assert_allclose(to_numpy(back.predict(IMAGES, verbose=0))[:, 0], expected, rtol=0,
                               atol=1e-5)


def test_what_keras_hub_cannot_express_is_refused(tmp_path):
    tiny = dict(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=5)
    paper = ViT(**tiny)  # tanh GELU, as the paper
    with pytest.raises(ValueError, match="cannot be written as a keras-hub ViT preset: it uses "
                       "tanh GELU.*Nothing was written"):
        paper.save_checkpoint(tmp_path / "tanh", checkpoint_format="keras_hub")
    assert not (tmp_path / "tanh").exists()
    # registers are DINOv2's, which keras-hub keeps headless and with LayerScale
    registers = ViT(**tiny, gelu_approximate=False, num_registers=2, layer_scale_init=1.0)
    with pytest.raises(ValueError, match="keras-hub's DINOV2Backbone is a headless DINOv2"):
        registers.save_checkpoint(tmp_path / "registers", checkpoint_format="keras_hub")
    headless = ViT(**{**tiny, "num_classes": 0}, gelu_approximate=False, num_registers=2)
    with pytest.raises(ValueError, match="registers without LayerScale"):
        headless.save_checkpoint(tmp_path / "registers", checkpoint_format="keras_hub")
    assert not (tmp_path / "registers").exists()
    rope = dict(tiny, gelu_approximate=False, position_embedding="rope", key_bias=False)
    with pytest.raises(ValueError, match="keras-hub's DINOV3Backbone is a headless DINOv3"):
        ViT(**rope, layer_scale_init=1.0).save_checkpoint(tmp_path / "rope", checkpoint_format="keras_hub")
    with pytest.raises(ValueError, match="rotary position embeddings without LayerScale"):
        ViT(**{**rope, "num_classes": 0}).save_checkpoint(tmp_path / "rope", checkpoint_format="keras_hub")
    with pytest.raises(ValueError, match=r"key_bias=False\), which keras-hub has for DINOv3"):
        ViT(**{**tiny, "key_bias": False}, gelu_approximate=False).save_checkpoint(
            tmp_path / "rope", checkpoint_format="keras_hub")
    assert not (tmp_path / "rope").exists()



# ImageNet's mean and standard deviation, as keras-hub's DeiT, DINOv2 and DINOv3 presets scale pixels
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


@pytest.mark.slow
def test_an_image_converters_scaling_is_recorded_and_written_back(tmp_path):
    # pixels in [0, 255] through keras-hub's preprocessor, and through the
    # scaling keras_vit records (read_images applies it to files)
    from keras_vit.data import read_images

    backbone = keras_hub.models.ViTBackbone(**SMALL)
    converter = keras_hub.layers.ViTImageConverter(
        image_size=(32, 32), scale=list(1 / (255 * STD)), offset=list(-MEAN / STD))
    task = keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=3,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter))
    randomize(task)
    task.save_to_preset(str(tmp_path / "imagenet"))
    pixels = np.random.default_rng(3).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    expected = to_numpy(task.predict(pixels, verbose=0))
    model = ViT.from_checkpoint(tmp_path / "imagenet")
    np.testing.assert_allclose(model.pixel_scale, 1 / (255 * STD), rtol=1e-6)
    np.testing.assert_allclose(model.pixel_offset, -MEAN / STD, rtol=1e-6)
    scaled = pixels * np.float32(model.pixel_scale) + np.float32(model.pixel_offset)
    np.testing.assert_allclose(to_numpy(model(scaled)), expected, rtol=0, atol=1e-5)
    import tensorflow as tf

    tf.io.write_file(str(tmp_path / "0.png"), tf.io.encode_png(pixels[0].astype("uint8")))
    np.testing.assert_allclose(read_images(tmp_path / "0.png", model=model)[0], scaled[0], atol=1e-5)

    out = model.save_checkpoint(tmp_path / "out", checkpoint_format="keras_hub")  # the scaling goes with it
    back = keras_hub.models.ImageClassifier.from_preset(str(out))
    np.testing.assert_allclose(to_numpy(back.predict(pixels, verbose=0)), expected, rtol=0, atol=1e-5)
    features = ViT.from_checkpoint(tmp_path / "imagenet", num_classes=0)  # a backbone keeps it too
    again = ViT.from_checkpoint(features.save_checkpoint(tmp_path / "backbone", checkpoint_format="keras_hub"))
    assert (again.pixel_scale, again.pixel_offset) == (model.pixel_scale, model.pixel_offset)
