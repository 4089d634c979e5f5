import dataclasses
import math
import pathlib
from unittest import mock

import keras

import numpy as np
import pytest
from helpers import TINY
from helpers import save_and_reload
from helpers import to_numpy

import keras_vit
from keras_vit import ViT
from keras_vit import kernels
from keras_vit.presets import count_params


@pytest.mark.parametrize(
    "name, paper_name, expected",
    [
        ("vit_ti16", "ViT-Ti/16", 5_717_416),
        ("vit_s16", "ViT-S/16", 22_050_664),
        ("vit_b16", "ViT-B/16", 86_567_656),
        ("vit_l16", "ViT-L/16", 304_326_632),
    ],
)
@pytest.mark.backend_independent
@pytest.mark.slow_cases("vit_l16-ViT-L/16-304326632")
def test_paper_parameter_counts(name, paper_name, expected):
    """The full-size builds, in one pass: a built model's variables do not
    depend on the backend (the analytic count is checked against built tiny
    models on every backend below)."""
    assert keras_vit.presets()[name]["params"] == expected
    assert keras_vit.presets()[name]["paper_name"] == paper_name
    assert ViT.from_preset(paper_name).count_params() == expected


@pytest.mark.parametrize("name, published", [
    ("dinov3_s16", 21e6), ("dinov3_s16plus", 29e6), ("dinov3_b16", 86e6), ("dinov3_l16", 300e6),
    ("dinov3_h16plus", 840e6), ("dinov3_7b16", 6_716e6)])
@pytest.mark.backend_independent
def test_dinov3_presets_have_the_published_sizes(name, published):
    """facebookresearch/dinov3's README: 21M, 29M, 86M, 300M, 840M, 6,716M
    (rounded down for S: 21.6M, keras-hub's listing), within 3%; the
    analytic count, checked against built models below (DINOv3's mask
    token, unused on images, is not in the model)."""
    params = keras_vit.presets()[name]["params"]
    assert abs(params - published) / published < 0.03, params


@pytest.mark.parametrize("name, published", [
    ("aimv2_l14", 0.3), ("aimv2_h14", 0.6), ("aimv2_1b14", 1.2), ("aimv2_3b14", 2.7)])
@pytest.mark.backend_independent
def test_aimv2_presets_have_the_published_sizes(name, published):
    """apple/ml-aim's README (at bd9e068): 0.3B, 0.6B, 1.2B, 2.7B parameters, each count
    cut to its first decimal (the huge one's 0.68B is listed as 0.6B)."""
    params = keras_vit.presets()[name]["params"]
    assert math.floor(params / 1e8) / 10 == published, params


@pytest.mark.parametrize("name, published", [("eva02_clip_b16", 86), ("eva02_clip_l14", 304)])
@pytest.mark.backend_independent
def test_eva02_clip_presets_have_the_published_sizes(name, published):
    """EVA-CLIP's paper (Sun et al., 2023, Table 1): the image encoders of EVA02-CLIP-B/16
    and L/14 have 86M and 304M parameters (with the projection, timm's head)."""
    params = keras_vit.presets()[name]["params"]
    assert round(params / 1e6) == published, params


@pytest.mark.parametrize("name, published", [("pe_core_b16", 0.09), ("pe_core_l14", 0.32), ("pe_core_g14", 1.88)])
@pytest.mark.backend_independent
def test_pe_core_presets_have_the_published_sizes(name, published):
    """facebook/PE-Core-B16-224's model card, 'Model Configurations': the vision towers'
    0.09B, 0.32B and 1.88B parameters (with the CLIP projection, timm's head), each count
    rounded to two decimals."""
    params = keras_vit.presets()[name]["params"]
    assert round(params / 1e9, 2) == published, params


@pytest.mark.parametrize(
    "config",
    [
        dict(TINY, pooling="gap", representation_size=12),
        dict(TINY, pooling="map", num_registers=2, qkv_bias=False, layer_scale_init=0.1),
        dict(TINY, pooling="none", num_classes=0, image_size=(32, 16)),
        dict(TINY, position_embedding="sincos2d", pooling="gap"),
        dict(TINY, image_size=64, patch_size=1, resnet_block_units=(1, 2)),
        dict(TINY, pooling="map", mlp_bias=False, mlp_activation="swiglu"),
        dict(TINY, pooling="map", norm_bias=False, qk_norm=True, norm_pre=True),
        dict(TINY, pooling="gap", norm_bias=False, fc_norm=True),
        dict(TINY, pooling="gap", class_token=True, fc_norm=True),
        dict(TINY, distillation=True, distillation_head=False),
        dict(TINY, position_embedding="rope", key_bias=False, num_registers=4, layer_scale_init=1.0),
        dict(TINY, position_embedding="learned_rope", rope_grid="index", pooling="map", pooling_num_heads=1,
             pooling_mlp_dim=20, class_token=True),
        dict(TINY, position_embedding="learned_rope", key_bias=False, mlp_activation="swiglu", mlp_norm=True,
             pooling="gap", fc_norm=True),
        dict(TINY, pooling="gap", final_norm=False),
        dict(TINY, position_embedding="learned_rope", mlp_norm=True, attention_norm=True),
    ],
)
def test_analytic_count_matches_built_model(config):
    assert ViT(**config).count_params() == count_params(**config)


@pytest.mark.parametrize(
    "config",
    [
        dict(TINY, drop_path_rate=0.1, dropout_rate=0.1, attention_dropout_rate=0.1),
        dict(TINY, pooling="map", num_registers=2, layer_scale_init=0.1),
        dict(TINY, image_size=64, patch_size=1, resnet_block_units=(1, 2)),
        dict(TINY, position_embedding="rope", num_registers=4, layer_scale_init=1.0),
    ],
)
def test_every_layer_is_built_at_construction(config):
    # An unbuilt sublayer makes Keras build the model again on the first
    # batch: JAX's predict_on_batch then runs a whole eager forward pass.
    model = ViT(**config)
    assert [layer.name for layer in model._flatten_layers() if not layer.built] == []


@pytest.mark.slow
def test_every_preset_is_listed_and_buildable_by_both_names():
    listed = keras_vit.presets()
    assert {"vit_ti16", "vit_s16", "vit_s32", "vit_b16", "vit_b32", "vit_l16", "vit_l32", "vit_h14",
            "r50_vit_b16"} <= set(listed)
    assert listed["r50_vit_b16"]["paper_name"] == "R50+ViT-B/16"
    small = dict(image_size=32, num_layers=1, hidden_dim=16, num_heads=2, mlp_dim=8, num_classes=3)
    model = ViT.from_preset("R50+ViT-B/16", **small)
    assert model.get_layer("resnet").stride == 16 and model.grid_size == (2, 2)
    with pytest.raises(ValueError, match="Unknown preset 'vit_q16'. Known presets: vit_ti16"):
        ViT.from_preset("vit_q16")


def test_initialization_follows_the_original():
    model = ViT(**dict(TINY, num_classes=10))
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").kernel), 0.0)
    np.testing.assert_array_equal(to_numpy(model.get_layer("class_token").tokens), 0.0)
    posemb = to_numpy(model.get_layer("position_embedding").embeddings)
    assert 0.015 < posemb.std() < 0.025
    fc1 = to_numpy(model.get_layer("encoder_block_0").mlp.fc1.kernel)
    assert np.abs(fc1).max() <= np.sqrt(6 / (16 + 32))
    bias = ViT(**dict(TINY, head_bias_init=-10.0)).get_layer("head").bias
    np.testing.assert_array_equal(to_numpy(bias), -10.0)


@pytest.mark.parametrize("pooling, shape", [("token", (2, 5)), ("gap", (2, 5)), ("map", (2, 5)), ("none", (2, 17, 5))])
def test_pooling_outputs(pooling, shape, images):
    model = ViT(**dict(TINY, pooling=pooling))
    assert tuple(model(images).shape) == shape
    assert tuple(ViT(**dict(TINY, pooling=pooling, num_classes=0))(images).shape) == shape[:-1] + (16,)


def test_channels_first_matches_channels_last(images):
    last = ViT(**TINY)
    first = ViT(**TINY, data_format="channels_first")
    first.set_weights(last.get_weights())
    for v in last.weights:  # break the zero head so the comparison means something
        if v.path.startswith("head/"):
            first.get_layer("head").kernel.assign(np.ones(v.shape))
            last.get_layer("head").kernel.assign(np.ones(v.shape))
            break
    np.testing.assert_allclose(
        to_numpy(first(np.transpose(images, (0, 3, 1, 2)))), to_numpy(last(images)), atol=1e-5
    )


def test_intermediates_equal_the_call_and_hold_attention(images):
    model = ViT(**dict(TINY, num_registers=1))
    model.get_layer("head").kernel.assign(np.random.default_rng(0).normal(size=(16, 5)))
    record = model.intermediates(images)
    np.testing.assert_allclose(to_numpy(record["logits"]), to_numpy(model(images)), atol=1e-5)
    assert tuple(record["attention_1"].shape) == (2, 2, 18, 18)
    np.testing.assert_allclose(to_numpy(record["attention_1"]).sum(-1), 1.0, atol=1e-5)
    assert tuple(record["embeddings"].shape) == (2, 18, 16)


def test_norm_bias_false_leaves_every_layernorm_without_beta(images, tmp_path):
    # ViT-22B's LayerNorms: y = (x - mean) / std * gamma, no beta anywhere
    model = ViT(**dict(TINY, pooling="map", norm_bias=False, qk_norm=True, norm_pre=True))
    norms = [v.path for v in model.weights if v.path.endswith("/gamma")]
    assert len(norms) == 2 * 4 + 3 and not [v.path for v in model.weights if "beta" in v.path]
    rng = np.random.default_rng(0)
    gamma = model.get_layer("encoder_norm").gamma
    gamma.assign(rng.normal(1.0, 0.5, gamma.shape))
    record = model.intermediates(images)
    x = to_numpy(record[f"encoder_block_{model.num_layers - 1}"]).astype("float64")
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6) * to_numpy(gamma)
    np.testing.assert_allclose(to_numpy(record["encoded"]), expected, atol=1e-5)
    np.testing.assert_allclose(to_numpy(save_and_reload(model, tmp_path)(images)), to_numpy(model(images)),
                               atol=1e-6)


@pytest.mark.parametrize("pooling", ["token", "gap", "map", "none"])
def test_last_block_computes_only_the_tokens_the_pooling_reads(images, pooling):
    # Running the model, token pooling's last block updates the [class] token
    # alone (num_queries=1); the functional graph keeps every token.
    from unittest import mock

    model = ViT(**dict(TINY, pooling=pooling, num_classes=0 if pooling == "none" else 5))
    if pooling != "none":
        model.get_layer("head").kernel.assign(np.random.default_rng(0).normal(size=(16, 5)))
    last = model.get_layer(f"encoder_block_{model.num_layers - 1}")
    tokens = model.get_layer("encoder_block_0").output.shape[1]
    assert last.output.shape[1] == tokens
    record = model.intermediates(images)
    assert record[f"encoder_block_{model.num_layers - 1}"].shape[1] == tokens
    expected = record["logits"] if "logits" in record else record["features"]
    with mock.patch.object(type(last), "call", autospec=True, side_effect=type(last).call) as spy:
        got = model(images)
    queries = [c.kwargs.get("num_queries") for c in spy.call_args_list if c.args[0] is last]
    assert queries == [1 if pooling == "token" else None], queries
    np.testing.assert_allclose(to_numpy(got), to_numpy(expected), atol=1e-5)
    # class_only=False runs every token, as the functional graph does.
    graph = keras.Model(model.input, model.output)
    with mock.patch.object(type(last), "call", autospec=True, side_effect=type(last).call) as spy:
        full = model(images, class_only=False)
    assert [c.kwargs.get("num_queries") for c in spy.call_args_list if c.args[0] is last] == [None]
    np.testing.assert_allclose(to_numpy(full), to_numpy(graph(images)), atol=1e-5)
    np.testing.assert_allclose(to_numpy(full), to_numpy(got), atol=1e-5)
    if pooling != "token":
        with pytest.raises(ValueError, match=f"class_only=True needs token pooling.*'{pooling}'"):
            model(images, class_only=True)


def test_average_pooling_beside_a_class_token(images):
    # timm's global_pool="avg" with class_token=True: the token is in the
    # sequence (its attention shapes the patches') but the mean leaves it out.
    model = ViT(**dict(TINY, pooling="gap", class_token=True, num_classes=0))
    assert model.num_prefix_tokens == 1 and model.parts.class_token is not None
    record = model.intermediates(images)
    assert tuple(record["encoded"].shape) == (2, 17, 16)
    np.testing.assert_allclose(to_numpy(model(images)), to_numpy(record["encoded"])[:, 1:].mean(1),
                               atol=1e-5)
    assert ViT(**dict(TINY, class_token=True)).config.class_token is None  # the default, one way
    assert ViT.from_config(model.get_config()).config == model.config


def test_the_model_is_its_named_parts():
    model = ViT(**dict(TINY, num_registers=2, representation_size=8, norm_pre=True))
    parts = model.parts
    assert parts.blocks == tuple(model.get_layer(f"encoder_block_{i}") for i in range(2))
    for field in ("patch_embedding", "registers", "class_token", "position_embedding",
                  "norm_pre", "encoder_norm", "pooling", "pre_logits", "head"):
        assert getattr(parts, field) is model.get_layer(field), field
    assert parts.prefix_tokens == (parts.registers, parts.class_token)
    # the options this model has off are None, and the graph holds exactly the parts
    absent = ("resnet", "patch_corruption", "distillation_token", "fc_norm",
              "distillation_pooling", "head_dist", "distillation_average")
    assert all(getattr(parts, field) is None for field in absent)
    present = [layer for layer in vars(parts).values() if isinstance(layer, keras.layers.Layer)]
    assert {layer.name for layer in model.layers} == {
        "images", *(layer.name for layer in present + list(parts.blocks))}
    with pytest.raises(dataclasses.FrozenInstanceError):
        parts.head = None


def test_keras_round_trip_and_config(images, tmp_path):
    model = ViT(**dict(TINY, pooling="map", dropout_rate=0.1, drop_path_rate=0.1, name="tiny"))
    model.get_layer("head").kernel.assign(np.random.default_rng(0).normal(size=(16, 5)))
    config = model.get_config()
    assert ViT.from_config(config).get_config() == config
    reloaded = save_and_reload(model, tmp_path)
    assert isinstance(reloaded, ViT) and reloaded.get_config() == config
    np.testing.assert_allclose(to_numpy(reloaded(images)), to_numpy(model(images)), atol=1e-6)
    # Stochastic depth rises linearly to the last block.
    assert model.get_layer("encoder_block_1").drop_path_rate == pytest.approx(0.1)
    assert model.get_layer("encoder_block_0").drop_path_rate == 0.0


def test_the_recorded_pixel_scaling_and_rope_survive_config_and_keras_files(images, tmp_path):
    model = ViT(**TINY, position_embedding="rope", key_bias=False, rope_theta=50.0,
                pixel_scale=(0.017, 0.0175, 0.0174), pixel_offset=-2.0)
    reloaded = save_and_reload(model, tmp_path)
    assert (reloaded.pixel_scale, reloaded.pixel_offset) == ((0.017, 0.0175, 0.0174), -2.0)
    assert reloaded.get_layer("encoder_block_1").attention.options.rope == dict(
        grid_size=(4, 4), num_prefix_tokens=1, theta=50.0)
    np.testing.assert_allclose(to_numpy(reloaded(images)), to_numpy(model(images)), atol=1e-6)
    bigger = model.with_image_size(48)  # the rotary embeddings follow the grid: nothing to resample
    assert bigger.get_layer("encoder_block_0").attention.options.rope["grid_size"] == (6, 6)
    assert bigger.pixel_scale == model.pixel_scale


DATA = pathlib.Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["map_qk_norm_norm_pre", "gap_fc_norm"])
@pytest.mark.slow_cases("map_qk_norm_norm_pre")
def test_keras_files_saved_before_the_layer_norm_layer_load_with_their_logits(name):
    # Saved on 2026-11-25 (torch) while LayerNorms were Keras's own layers
    # and attention weights were computed in the layer: MAP pooling, qk-norm,
    # CLIP's norm_pre, timm's fc_norm; every LayerNorm of today's model is a
    # keras_vit.layers.LayerNormalization, and the file gives the logits it was saved with.
    expected = np.load(DATA / "saved_2026_11_25_logits.npz")
    model = keras.saving.load_model(DATA / f"saved_2026_11_25_{name}.keras")
    assert isinstance(model, ViT)
    np.testing.assert_allclose(to_numpy(model(expected["images"])), expected[name], rtol=1e-5, atol=1e-5)
    gammas = [w for w in model.weights if w.path.endswith("/gamma")]
    norms = [w.path.rsplit("/", 1)[0] for w in gammas]
    assert len(norms) == (2 * 2 + 2 + 1 + 2 * 2 if name.startswith("map") else 2 + 1), norms
    calls, layer_norm = [], kernels.layer_norm
    with mock.patch.object(kernels, "layer_norm",
                           side_effect=lambda layer, x: calls.append(layer.path) or layer_norm(layer, x)):
        model(expected["images"])
    assert sorted(calls) == sorted(norms)  # every LayerNorm through the kernel's route


@pytest.mark.parametrize("name", ["run", "compiled", "convert"])
@pytest.mark.slow_cases("convert")
def test_keras_files_saved_by_the_2026_11_28_version_load_with_their_logits(name):
    # Saved on 2026-11-28 (JAX; tests/data/README.md): a training run's model.keras, a
    # model compiled with the package's optimizer, schedule and loss after one update, and
    # a `keras-vit convert` output of a timm folder (registers, qk-norm).
    expected = np.load(DATA / "saved_2026_11_28_logits.npz")
    model = keras.saving.load_model(DATA / f"saved_2026_11_28_{name}.keras")
    assert isinstance(model, ViT)
    np.testing.assert_allclose(to_numpy(model(expected["images"])), expected[name], rtol=1e-5, atol=1e-5)
    if name == "compiled":
        assert type(model.optimizer).__name__ == "AdamWeightDecay"
        assert type(model.optimizer._learning_rate).__name__ == "WarmupDecaySchedule"
        assert type(model.loss).__name__ == "SoftmaxCrossEntropy"


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_dtype_policy_survives_config_save_and_resize(policy, tmp_path):
    model = ViT(**TINY, dtype=policy)
    assert model.get_config()["dtype"]["config"]["name"] == policy
    for copy in (ViT.from_config(model.get_config()), save_and_reload(model, tmp_path), model.with_image_size(48)):
        assert copy.get_layer("encoder_block_1").dtype_policy.name == policy
        assert copy.get_layer("head").compute_dtype == policy.replace("mixed_", "")


@pytest.mark.slow
def test_with_image_size_resamples_position_embeddings(images, tmp_path):
    model = save_and_reload(ViT(**TINY), tmp_path)  # also from a reloaded model
    bigger = model.with_image_size(48)
    assert bigger.image_size == (48, 48) and bigger.grid_size == (6, 6)
    expected = model.get_layer("position_embedding").resampled((6, 6))
    np.testing.assert_allclose(to_numpy(bigger.get_layer("position_embedding").embeddings), expected, atol=1e-6)
    kernel = bigger.get_layer("encoder_block_1").attention.query.kernel
    np.testing.assert_array_equal(to_numpy(kernel), to_numpy(model.get_layer("encoder_block_1").attention.query.kernel))
    assert tuple(bigger(np.zeros((1, 48, 48, 3), "float32")).shape) == (1, 5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image_size=30), "image height 30 is not divisible by the patch size 8"),
        (dict(image_size=56, patch_size=1, resnet_block_units=(1, 1, 1)),
         r"image height 56 is not divisible by the patch size 16 \(patch 1 x ResNet stride 16\)"),
        (dict(pooling="cls"), "Unknown pooling 'cls'"),
        (dict(num_heads=3), "hidden_dim 16 is not divisible by num_heads 3"),
        (dict(class_token=False), "pooling='token' reads the \\[class\\] token, and class_token=False"),
        (dict(class_token="yes"), "`class_token` must be True, False or None, got 'yes'"),
        (dict(distillation_head=False), "distillation_head=False leaves out the head of DeiT's"),
    ],
)
def test_bad_configs_fail_at_once(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ViT(**{**TINY, **kwargs})


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 32, 32, 4), r"expects 3 channels on axis 3 \(channels_last\), got shape \(2, 32, 32, 4\)"),
        ((32, 32, 3), r"got shape \(32, 32, 3\) \(rank 3\). Add a batch axis"),
        ((2, 48, 48, 3), r"built for 32x32 images, got 48x48 .* `model.with_image_size\(\(48, 48\)\)"),
    ],
)
def test_wrong_inputs_fail_with_a_clear_message(shape, message):
    model = ViT(**TINY)
    with pytest.raises(ValueError, match=message):
        model(np.zeros(shape, "float32"))
    with pytest.raises(ValueError, match=message):
        model.predict(np.zeros(shape, "float32"), verbose=0)


def test_an_empty_batch_and_an_export_path_of_another_format_are_named(tmp_path):
    model = ViT(**TINY)
    empty = np.zeros((0, 32, 32, 3), "float32")
    for run in (model.predict, model.evaluate):
        with pytest.raises(ValueError, match=r"got an empty batch of images \(shape \(0, 32, 32, 3\)\)"
                           ".*Pass at least one image"):
            run(empty, verbose=0)
    with pytest.raises(ValueError, match=r"export path .*vit.txt must end in .onnx, the format "
                       r"written there, e.g. vit.onnx"):
        model.export(str(tmp_path / "vit.txt"), format="onnx")
    assert not list(tmp_path.iterdir())


def test_integer_images_are_refused_with_the_scaling(tmp_path):
    """uint8 pixels (0-255) would silently give wrong predictions."""
    import keras

    model = ViT(**TINY)
    pixels = np.full((2, 32, 32, 3), 200, "uint8")
    with pytest.raises(ValueError, match=r"got uint8 images.*images / 127.5 - 1"):
        model(pixels)
    with pytest.raises(ValueError, match="got uint8 images"):
        model.predict(pixels, verbose=0)
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(ValueError, match="got uint8 images"):
        model.fit(pixels, np.zeros(2), verbose=0)
    import tensorflow as tf
    dataset = tf.data.Dataset.from_tensor_slices((pixels, np.zeros(2))).batch(2)
    with pytest.raises(ValueError, match="got uint8 images"):
        model.fit(dataset, verbose=0)
    with pytest.raises(ValueError, match="got uint8 images"):
        model.evaluate(dataset, verbose=0)
    assert model.predict(pixels.astype("float32") / 127.5 - 1, verbose=0).shape == (2, 5)


def test_class_names_travel_with_the_model(tmp_path):
    names = ["cat", "dog", "fish", "bird", "frog"]
    model = ViT(**TINY, class_names=names)
    assert save_and_reload(model, tmp_path).class_names == names
    assert model.with_image_size(64).class_names == names
    with pytest.raises(ValueError, match="2 class_names for 5 classes"):
        ViT(**TINY, class_names=["a", "b"])


def test_vit_config_is_the_architecture_as_data(images, tmp_path):
    from keras_vit import ViTConfig

    config = ViTConfig(**TINY)
    assert config.grid_size == (4, 4) and config.num_prefix_tokens == 1
    assert config.input_shape == (32, 32, 3) and config.image_size == (32, 32)
    assert ViTConfig.from_dict(config.to_dict()) == config
    assert config.replace(image_size=64).grid_size == (8, 8) and config.image_size == (32, 32)
    model = ViT(config)
    assert model.config == config and model.num_classes == 5 and model.grid_size == (4, 4)
    assert ViT(config, num_classes=3).config == config.replace(num_classes=3)
    assert model.get_config() == {"name": "vit", "trainable": True, "dtype": model.get_config()["dtype"],
                                  **config.to_dict()}
    reloaded = save_and_reload(model, tmp_path)
    assert reloaded.config == config
    with pytest.raises(ValueError, match=r"Unknown ViT argument\(s\) 'hidden_size'\. Valid ones: "
                                         r"image_size, patch_size, num_layers"):
        ViTConfig.from_dict({"hidden_size": 64})
    with pytest.raises(ValueError, match=r"Unknown ViT argument\(s\) 'hidden_size'\. Valid ones: .*"
                                         r"and config, dtype, name, trainable"):
        ViT(**TINY, hidden_size=64)
    with pytest.raises(ValueError, match=r"`config` must be a keras_vit.ViTConfig or None"):
        ViT({"image_size": 32})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.num_layers = 3
