"""Dense features: `ViT.feature_model`, the patch tokens of chosen blocks as
maps over the patch grid (DINO's ``get_intermediate_layers``, timm's
``forward_intermediates``), read against transformers' hidden states, and
through Keras's features: ``fit`` with the backbone frozen, ``.keras``,
quantization, LoRA and ONNX on every backend."""

import keras
import numpy as np
import pytest
from helpers import LazyModule
from helpers import save_and_reload
from helpers import to_numpy
from test_family import dinov3_source as family_dinov3_source
from test_family import make_family

from keras_vit import ViT
from keras_vit import kernels
from keras_vit import segmentation_probe
from keras_vit.data import digit_segmentation
from keras_vit.dense import SegmentationMeanIoU
from keras_vit.dense import segment_digits
from keras_vit.export import pytorch
from keras_vit.layers import LinearSegmentationHead
from keras_vit.model import default_feature_layers
from keras_vit.model import feature_layers

torch = LazyModule("torch", reason="transformers' models run on PyTorch")
transformers = LazyModule("transformers", reason="the reference models")

BACKEND = keras.backend.backend()

# -- shared fixtures -----------------------------------------------------------------

# DINOv3's options at test size: RoPE, four registers, LayerScale, a key without bias; the
# paper's tanh GELU.
TINY = dict(image_size=32, patch_size=8, num_layers=3, num_heads=2, hidden_dim=16, mlp_dim=32,
            num_classes=0, position_embedding="rope", key_bias=False, num_registers=4,
            layer_scale_init=1.0, layer_norm_epsilon=1e-5)
TINY_INPUT = (32, 32, 3)


@pytest.fixture(scope="module")
def tiny():
    """A 3-block DINOv3-like ViT (32 px, a 4 x 4 grid, hidden 16), every
    weight random, and 4 images."""
    keras.utils.set_random_seed(0)
    model = ViT(**TINY)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    images = rng.uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    return model, images


def maps_of(tokens, num_prefix_tokens, grid_size):
    """``(batch, tokens, D)`` -> the patch tokens as ``(batch, h, w, D)``."""
    tokens = np.asarray(tokens)
    return tokens[:, num_prefix_tokens:].reshape(len(tokens), *grid_size, tokens.shape[-1])


def onnx_outputs(model, input_shape, images, path):
    """`model` exported to the ONNX file `path` from this backend, run by
    onnxruntime on `images`: its outputs in the order Keras flattens an
    output dict (by key)."""
    import onnxruntime

    signature = [keras.InputSpec(shape=(None, *input_shape), dtype="float32", name="images")]
    with kernels.keras_layers_only():
        if BACKEND == "torch":  # Keras's TorchScript route cannot trace LayerNorm (keras_vit.export.pytorch)
            pytorch.torch_onnx(model, path, signature)
        else:
            model.export(path, format="onnx", verbose=False, input_signature=signature)
    runner = onnxruntime.InferenceSession(path)
    return runner.run(None, {runner.get_inputs()[0].name: images})


# -- the feature model -----------------------------------------------------------------

def dinov3_source(folder):
    """A small random DINOv3ViTModel saved under `folder`, and the model."""
    source = family_dinov3_source(folder / "hf")
    return folder / "hf", source, source.norm


def dinov2_registers_source(folder):
    """The suite's small random Dinov2WithRegistersModel (`make_family`)."""
    _, path, _, _, _, _ = make_family("dinov2_registers", folder)
    source = transformers.Dinov2WithRegistersModel.from_pretrained(path).eval()
    return path, source, source.layernorm


@pytest.fixture(scope="module", params=["dinov2_registers", "dinov3"])
def source(request, tmp_path_factory):
    """(keras_vit's model read from the file, transformers' model, its final LayerNorm)."""
    make = {"dinov2_registers": dinov2_registers_source, "dinov3": dinov3_source}[request.param]
    path, model, layernorm = make(tmp_path_factory.mktemp(request.param))
    return ViT.from_checkpoint(path), model, layernorm


def test_feature_maps_are_transformers_hidden_states(source):
    """Block i's map is transformers' ``hidden_states[i + 1]`` without its
    [class] and register rows, laid out on the grid; ``norm=True`` is that
    after the final LayerNorm; the prefix is those rows, in that order."""
    model, reference, layernorm = source
    size = model.image_size[0]
    images = np.random.default_rng(1).normal(size=(2, size, size, 3)).astype("float32")
    with torch.no_grad():
        hidden = reference(torch.from_numpy(images.transpose(0, 3, 1, 2)),
                           output_hidden_states=True).hidden_states
        normed = [layernorm(h).numpy() for h in hidden]
    prefix = model.num_prefix_tokens
    assert prefix == 5  # [class] and four registers
    for norm in (False, True):
        features = model.feature_model(norm=norm, prefix_tokens=True)
        out = {key: to_numpy(value) for key, value in features(images).items()}
        assert sorted(out) == ["encoder_block_0", "encoder_block_0_prefix", "encoder_block_1",
                               "encoder_block_1_prefix"]
        for i in range(2):
            want = (normed if norm else [h.numpy() for h in hidden])[i + 1]
            np.testing.assert_allclose(out[f"encoder_block_{i}"],
                                       maps_of(want, prefix, model.grid_size), rtol=0, atol=1e-4)
            np.testing.assert_allclose(out[f"encoder_block_{i}_prefix"], want[:, :prefix], rtol=0,
                                       atol=1e-4)


def test_every_family_gives_its_blocks_tokens():
    """DeiT (distillation token), CLIP (LayerNorm before the encoder),
    SigLIP (no prefix, MAP pooling) and a hybrid (the grid of its ResNet
    stem): each map and prefix is the sequence `ViT.intermediates` records,
    the last block's with ``norm=True`` its ``encoded`` (LN(z_L))."""
    size = dict(image_size=32, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)
    families = {
        "deit": dict(patch_size=8, distillation=True, num_classes=3),
        "clip": dict(patch_size=8, norm_pre=True, patch_bias=False, mlp_activation="quick_gelu",
                     num_classes=0),
        "siglip": dict(patch_size=8, pooling="map", num_classes=0),
        "hybrid": dict(patch_size=1, resnet_block_units=(1, 1), num_classes=0),
    }
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    for name, options in families.items():
        model = ViT(**size, **options)
        prefix, grid = model.num_prefix_tokens, model.grid_size
        assert (prefix, grid) == {"deit": (2, (4, 4)), "clip": (1, (4, 4)), "siglip": (0, (4, 4)),
                                  "hybrid": (1, (4, 4))}[name], name
        record = {key: to_numpy(value) for key, value in model.intermediates(images).items()}
        raw = model.feature_model(layers=[0], norm=False, prefix_tokens=True)(images)
        np.testing.assert_allclose(to_numpy(raw["encoder_block_0"]),
                                   maps_of(record["encoder_block_0"], prefix, grid), atol=1e-5,
                                   err_msg=name)
        np.testing.assert_allclose(to_numpy(raw["encoder_block_0_prefix"]),
                                   record["encoder_block_0"][:, :prefix], atol=1e-5, err_msg=name)
        normed = model.feature_model(layers=1)(images)
        assert list(normed) == ["encoder_block_1"], name
        np.testing.assert_allclose(to_numpy(normed["encoder_block_1"]),
                                   maps_of(record["encoded"], prefix, grid), atol=1e-5, err_msg=name)


@pytest.mark.slow
def test_channels_first_maps_and_the_blocks_a_feature_model_runs(tiny):
    """A channels-first model gives the channels-last maps transposed; a
    feature model holds the blocks up to the last one asked for, no later
    one, and the ViT's layers themselves."""
    model, images = tiny
    features = model.feature_model(layers=[0, -2])
    names = [layer.name for layer in features.layers]
    assert [n for n in names if n.startswith("encoder_block_")] == [
        "encoder_block_0", "encoder_block_1", "encoder_block_0_map", "encoder_block_1_map"]
    assert features.get_layer("encoder_block_1") is model.get_layer("encoder_block_1")
    assert features.get_layer("encoder_norm") is model.get_layer("encoder_norm")
    assert sorted(model.feature_model(layers=2).output) == ["encoder_block_1", "encoder_block_2"]

    first = model.with_config(data_format="channels_first")
    got = first.feature_model(layers=[0, -2], prefix_tokens=True)(images.transpose(0, 3, 1, 2))
    want = model.feature_model(layers=[0, -2], prefix_tokens=True)(images)
    assert tuple(got["encoder_block_1"].shape) == (4, 16, 4, 4)
    for key, value in want.items():
        value = to_numpy(value)
        if not key.endswith("_prefix"):
            value = value.transpose(0, 3, 1, 2)
        np.testing.assert_allclose(to_numpy(got[key]), value, atol=1e-5, err_msg=key)


@pytest.mark.slow
def test_a_head_trains_on_frozen_features_which_save_and_export(tiny, tmp_path):
    """A 1x1 convolution and global pooling trained by ``fit`` on the
    frozen feature model: the backbone's weights stay, the head's move. The
    feature model reloads from ``.keras`` (safe mode) and runs in
    onnxruntime with its numbers."""
    model, images = tiny
    features = model.feature_model()
    want = {key: to_numpy(value) for key, value in features(images).items()}
    backbone = [to_numpy(w) for w in model.weights]

    features.trainable = False
    inputs = keras.Input(model.config.input_shape)
    maps = features(inputs)["encoder_block_2"]
    logits = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(3, 1, name="probe")(maps))
    classifier = keras.Model(inputs, logits)
    probe = [to_numpy(w) for w in classifier.get_layer("probe").weights]
    classifier.compile(optimizer=keras.optimizers.Adam(1e-2),
                       loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    classifier.fit(images, np.arange(4) % 3, batch_size=4, epochs=2, verbose=0)
    model.trainable = True  # the ViT's layers, which the feature model shares
    for before, after in zip(backbone, model.weights):
        np.testing.assert_array_equal(to_numpy(after), before, err_msg=after.path)
    for before, after in zip(probe, classifier.get_layer("probe").weights):
        assert np.abs(to_numpy(after) - before).max() > 1e-4, after.path

    reloaded = save_and_reload(model.feature_model(), tmp_path)
    got = reloaded(images)
    for key in want:
        np.testing.assert_allclose(to_numpy(got[key]), want[key], rtol=0, atol=1e-6)

    exported = onnx_outputs(features, model.config.input_shape, images[:3],
                            str(tmp_path / "features.onnx"))
    for got, key in zip(exported, sorted(want)):
        np.testing.assert_allclose(got, want[key][:3], rtol=1e-4, atol=1e-4, err_msg=key)


def test_quantizing_and_lora_on_the_vit_carry_over(tiny):
    """The feature model runs the ViT's layers: int8 quantization of the ViT
    moves its features a little, LoRA on it gives the feature model the
    adapters as trainable weights."""
    model, images = tiny
    copy = ViT.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    features = copy.feature_model(layers=1)
    full = to_numpy(features(images)["encoder_block_2"])
    copy.quantize("int8")
    quantized = to_numpy(features(images)["encoder_block_2"])
    error = np.abs(quantized - full).max() / (full.max() - full.min())
    assert 0 < error < 0.05, error

    adapted = ViT.from_config(model.get_config())
    adapted.enable_lora(2, target="query")
    lora = [w.path for w in adapted.feature_model(layers=[0]).trainable_weights if "lora" in w.path]
    assert lora == ["encoder_block_0/attention/query/lora_kernel_a",
                    "encoder_block_0/attention/query/lora_kernel_b"]


# -- which blocks, and wrong arguments -------------------------------------------------

@pytest.mark.backend_independent
def test_the_default_blocks_are_dinov3s_and_an_int_takes_the_last_blocks_as_timm():
    # DINOv3's FOUR_EVEN_INTERVALS: ViT-S/B, ViT-L (the paper's), ViT-H+, ViT-7B
    assert default_feature_layers(12) == (2, 5, 8, 11)
    assert default_feature_layers(24) == (4, 11, 17, 23)
    assert default_feature_layers(32) == (7, 15, 23, 31)
    assert default_feature_layers(40) == (9, 19, 29, 39)
    assert [default_feature_layers(n) for n in (1, 2, 3, 4, 6)] == [
        (0,), (0, 1), (0, 1, 2), (0, 1, 2, 3), (0, 2, 3, 5)]
    for n in range(1, 41):  # four blocks (or every one), ascending, the last among them
        layers = default_feature_layers(n)
        assert len(layers) == min(n, 4) and list(layers) == sorted(set(layers)) and layers[-1] == n - 1
        assert feature_layers(None, n) == layers
    for num_layers in (2, 12):  # timm's feature_take_indices: an int n is the last n blocks
        for n in range(1, num_layers + 1):
            assert feature_layers(n, num_layers) == tuple(num_layers - n + i for i in range(n))
    assert feature_layers([-1, 0, 11, 5], 12) == (0, 5, 11)
    assert feature_layers(np.array([1, -2]), 12) == (1, 10)


@pytest.mark.backend_independent
def test_wrong_blocks_and_norm_without_encoder_norm_name_the_fix():
    for layers, error, message in (
            (12, ValueError, r"layers=12 asks for the last 12 blocks of a model of 3: give a "
                             r"number from 1 to 3"),
            (0, ValueError, r"layers=0 .* give a number from 1 to 3"),
            ([], ValueError, r"layers=\[\] asks for no block: give at least one block index"),
            ([0, 3], ValueError, r"layers holds block 3, but the model has 3 blocks: give indices "
                                 r"from 0 to 2, or from -3 to -1"),
            ([-4], ValueError, r"layers holds block -4"),
            ([1.0], TypeError, r"layers holds 1.0, which is not a block index: give ints from -3 "
                               r"to 2"),
            ([True], TypeError, r"layers holds True"),
            (2.5, TypeError, r"layers must be None, an int .* or a list of block indices; got 2.5"),
            ("2", TypeError, r"got '2'"),
    ):
        with pytest.raises(error, match=message):
            feature_layers(layers, 3)
    model = ViT(image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3, pooling="gap", fc_norm=True)
    with pytest.raises(ValueError, match=r"this model has none: its final LayerNorm \(fc_norm\) "
                                         r"normalizes the pooled features. Pass norm=False"):
        model.feature_model()
    with pytest.raises(ValueError, match="layers holds block 2"):
        model.feature_model(layers=[2], norm=False)
    assert sorted(model.feature_model(norm=False).output) == ["encoder_block_0", "encoder_block_1"]


# == The linear segmentation probe ====================================================
# `keras_vit.segmentation_probe` (DINOv3's linear head, `LinearSegmentationHead`, on the
# feature model), `keras_vit.data.digit_segmentation` and `keras-vit segment`.

@pytest.mark.slow
def test_the_probe_trains_its_head_alone_reloads_and_exports(tmp_path):
    """``fit`` on a frozen backbone moves the head's weights (BatchNorm's
    moving statistics too) and none of the ViT's; the logits are per pixel,
    channels last whatever the model's layout, the same from a
    channels-first twin with the same weights; the probe reloads from
    ``.keras`` (safe mode) and runs in onnxruntime with its numbers."""
    keras.utils.set_random_seed(0)
    model = ViT(**TINY)
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    masks = rng.integers(0, 3, (8, 32, 32)).astype("int32")
    probe = segmentation_probe(model, num_classes=3)
    head = probe.get_layer("segmentation_head")
    assert [w.path for w in probe.trainable_weights] == [
        "segmentation_head/batch_norm/gamma", "segmentation_head/batch_norm/beta",
        "segmentation_head/classifier/kernel", "segmentation_head/classifier/bias"]
    backbone = [to_numpy(w) for w in model.weights]
    before = [to_numpy(w) for w in head.weights]
    history = probe.fit(images, masks, batch_size=4, epochs=2, verbose=0)
    assert sorted(history.history) == ["loss", "mean_iou"]
    for value, variable in zip(backbone, model.weights):
        np.testing.assert_array_equal(to_numpy(variable), value, err_msg=variable.path)
    for value, variable in zip(before, head.weights):
        assert np.abs(to_numpy(variable) - value).max() > 1e-5, variable.path

    logits = to_numpy(probe.predict(images, verbose=0))
    assert logits.shape == (8, 32, 32, 3)
    reloaded = save_and_reload(probe, tmp_path)
    np.testing.assert_allclose(to_numpy(reloaded.predict(images, verbose=0)), logits, rtol=0,
                               atol=1e-5)
    # Keras restores the frozen feature model's weights trainable; on TensorFlow setting
    # `trainable` to the value it has is a no-op (AutoTrackable), hence True first.
    features = reloaded.get_layer("vit_features")
    features.trainable = True
    features.trainable = False
    assert len(reloaded.trainable_weights) == 4
    [exported] = onnx_outputs(probe, TINY_INPUT, images[:3], str(tmp_path / "probe.onnx"))
    np.testing.assert_allclose(exported, logits[:3], rtol=1e-4, atol=1e-4)
    first = segmentation_probe(model.with_config(data_format="channels_first"), num_classes=3)
    first.set_weights(probe.get_weights())
    np.testing.assert_allclose(to_numpy(first.predict(images.transpose(0, 3, 1, 2), verbose=0)),
                               logits, rtol=0, atol=1e-5)


def test_the_heads_upsampling_is_keras_bilinear_resize():
    """The head's per-axis interpolation matrices give
    ``keras.ops.image.resize`` (bilinear, no antialias) of its 1x1
    convolution's logits, up and down, square and not."""
    maps = np.random.default_rng(0).normal(size=(2, 4, 3, 8)).astype("float32")
    for image_size in [(32, 32), (8, 12), (5, 7), (2, 2)]:
        head = LinearSegmentationHead(3, image_size)
        got = to_numpy(head(maps))
        logits = head.classifier(head.batch_norm(maps))
        want = keras.ops.image.resize(logits, image_size, interpolation="bilinear",
                                      antialias=False)
        np.testing.assert_allclose(got, to_numpy(want), rtol=0, atol=1e-5, err_msg=image_size)


@pytest.mark.slow
def test_the_mean_iou_counts_as_keras_mean_iou():
    """`SegmentationMeanIoU` (a matmul of one-hot labels) has the confusion
    matrix and result of Keras's ``MeanIoU`` (a scatter), with labels out of
    range, an ignored class and sample weights."""
    rng = np.random.default_rng(0)
    labels = rng.integers(-1, 6, (3, 8, 8))
    logits = rng.normal(size=(3, 8, 8, 5)).astype("float32")
    weights = rng.uniform(0, 3, (3, 8, 8)).astype("float32")
    for options in (dict(), dict(ignore_class=2), dict(dtype="float32")):
        ours = SegmentationMeanIoU(5, sparse_y_true=True, sparse_y_pred=False, **options)
        keras_own = keras.metrics.MeanIoU(5, sparse_y_true=True, sparse_y_pred=False, **options)
        for metric in (ours, keras_own):
            metric.update_state(labels, logits)
            metric.update_state(labels, logits, sample_weight=weights)
        np.testing.assert_allclose(to_numpy(ours.total_cm), to_numpy(keras_own.total_cm), rtol=1e-6)
        assert abs(float(ours.result()) - float(keras_own.result())) < 1e-6, options


@pytest.mark.slow
def test_the_probe_learns_to_segment_held_out_digits(trained_digits, tmp_path):
    """The probe of the suite's trained digits model (at 32 px: its 16-pixel
    digits, four to a canvas's cell grid, are the size it learned) reaches a
    held-out mean IoU that the background-only baseline cannot: with all 11
    classes in the masks, that baseline's is at most 1/11."""
    model = trained_digits[0].with_image_size(32)
    results, paths = segment_digits(model, tmp_path, epochs=3, train_canvases=300,
                                    test_canvases=60, batch_size=32, verbose=0)
    assert all(iou is not None for iou in results["class_iou"].values()), results
    assert results["baseline_mean_iou"] <= 1 / 11, results
    assert results["mean_iou"] > 0.15, results
    assert paths["picture"].stat().st_size > 0


@pytest.mark.backend_independent
def test_digit_canvases_label_exactly_the_digit_pixels():
    """Every pixel whose brightness reaches the ink threshold is its digit's
    (d + 1), every other one the background's (0); the same seed gives the
    same canvases."""
    images, masks = digit_segmentation("test", num_canvases=20, canvas_size=32, seed=3)
    assert images.shape == (20, 32, 32, 3) and images.dtype == np.float32
    assert masks.shape == (20, 32, 32) and masks.dtype == np.int32
    pixels = np.round((images + 1.0) * 127.5).astype(int)
    np.testing.assert_array_equal(masks > 0, pixels[..., 0] >= 96)
    assert masks.max() <= 10 and len(np.unique(masks)) == 11
    again, same = digit_segmentation("test", num_canvases=20, canvas_size=32, seed=3)
    np.testing.assert_array_equal(again, images)
    np.testing.assert_array_equal(same, masks)
    assert not np.array_equal(digit_segmentation("test", num_canvases=20, seed=4)[1], masks)


@pytest.mark.backend_independent
def test_held_out_canvases_hold_held_out_digits_only(monkeypatch):
    """Each digit replaced by a square whose brightness says its class and
    split (a dark border, below the ink threshold, around it): canvases of
    the test split show only test digits, each labelled with its class, and
    those of the train split only training digits; smaller digits sit at
    random offsets in their cells."""
    from keras_vit.data import sources

    def squares(count, brightness):
        images = np.full((count, 32, 32, 3), 40, np.uint8)  # the border: background
        labels = np.arange(count) % 10
        images[:, 2:-2, 2:-2] = (brightness + 10 * labels)[:, None, None, None]
        return images, labels.astype("int64")

    monkeypatch.setattr(sources, "_digits_arrays",
                        lambda: {"train": squares(50, 100), "test": squares(20, 105)})
    for split, brightness in (("train", 100), ("test", 105)):
        images, masks = digit_segmentation(split, num_canvases=8, canvas_size=32, seed=1)
        pixels = np.round((images[..., 0] + 1.0) * 127.5).astype(int)
        inked = pixels[masks > 0]
        assert set(np.unique(inked)) <= set(brightness + 10 * np.arange(10)), (split, np.unique(inked))
        np.testing.assert_array_equal(masks[masks > 0], (pixels[masks > 0] - brightness) // 10 + 1)
        assert np.count_nonzero(masks, axis=(1, 2)).min() >= 3 * 12 * 12  # three digits each
    _, masks = digit_segmentation("test", num_canvases=30, canvas_size=32, digit_size=12, seed=1)
    tops = {int(np.argmax(mask.any(axis=1))) for mask in masks}
    assert len(tops) > 2, tops  # the first inked row varies: the offsets are random


@pytest.mark.backend_independent
def test_wrong_probe_and_canvas_arguments_name_the_fix():
    for call, message in (
            (lambda: LinearSegmentationHead(0, 32), r"`num_classes` must be a positive int .* got 0"),
            (lambda: segmentation_probe(ViT(**TINY), 1), r"`num_classes` must be an int of at "
             r"least 2, the background and at least one class, got 1: with one class each pixel's "
             r"softmax is 1 .* num_classes=2 for one kind of object on a background"),
            (lambda: segmentation_probe(ViT(**TINY), 2.5), r"must be an int of at least 2, .* got 2.5"),
            (lambda: LinearSegmentationHead(3, 32, dropout=1.0), r"`dropout` must be a rate in "
                                                                 r"\[0, 1\), got 1.0"),
            (lambda: LinearSegmentationHead(3, 32)(np.zeros((2, 4, 8), "float32")),
             r"takes feature maps of rank 4, .* got shapes \[\(2, 4, 8\)\]. Pass the maps of "
             r"`ViT.feature_model`"),
            (lambda: digit_segmentation(digits_per_canvas=3, canvas_size=32, digit_size=20),
             r"3 digits on a 32-pixel canvas take a grid of 2x2 cells of 16 pixels, so a digit's "
             r"`digit_size` must be an int in \[1, 16\], got 20"),
            (lambda: digit_segmentation(num_canvases=0), r"`num_canvases` must be an int >= 1, got 0"),
            (lambda: digit_segmentation(ink_threshold=0), r"`ink_threshold` must be an int in "
                                                          r"\[1, 255\]"),
    ):
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.backend_independent
def test_the_segment_recipe_writes_its_results_and_picture(tmp_path, monkeypatch, capsys):
    """``recipes/segment.py`` (``keras-vit segment``) on a one-block ViT read
    from ``.keras``: results.json with the mean IoU, its baseline and each
    class's IoU, and segmentation.png; a --workdir that is a file is refused
    before the model is read."""
    import json
    import pathlib
    import runpy

    model = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=0)
    model.save(tmp_path / "tiny.keras")
    script = str(pathlib.Path(__file__).resolve().parents[1] / "recipes" / "segment.py")

    def recipe(*flags):
        monkeypatch.setattr("sys.argv", [script, "--init", str(tmp_path / "tiny.keras"), *flags])
        with pytest.raises(SystemExit) as exit_info:
            runpy.run_path(script, run_name="__main__")
        return exit_info.value.code, capsys.readouterr()

    code, out = recipe("--workdir", str(tmp_path / "run"), "--epochs", "1", "--train-canvases",
                       "8", "--test-canvases", "4", "--batch-size", "8", "--verbose", "0")
    assert code == 0, out
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert {"mean_iou", "baseline_mean_iou", "class_iou", "pixel_accuracy", "blocks"} <= set(results)
    assert results["blocks"] == [0] and len(results["class_iou"]) == 11
    picture = tmp_path / "run" / "segmentation.png"
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.out.splitlines()[-2:] == [f"results: {tmp_path / 'run' / 'results.json'}",
                                         f"picture: {picture}"]
    (tmp_path / "file").write_text("")
    code, out = recipe("--workdir", str(tmp_path / "file"))
    assert code == 2 and "keras-vit segment: error: --workdir" in out.err and "is a file" in out.err
