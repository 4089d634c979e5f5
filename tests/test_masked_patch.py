"""Masked patch prediction (Sec. 4.6, Appendix B.1.2): the corruption and its
colour targets, the PatchCorruption layer, the loss, training on the digits
and fine-tuning the result as a ViT."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import MASKED_PATCH_BACKBONE
from helpers import save_and_reload
from helpers import to_numpy
from sklearn.datasets import load_digits

from keras_vit import ViT
from keras_vit import ViTConfig
from keras_vit import layers
from keras_vit.config import FIELDS
from keras_vit.training.masked_patch import BACKBONE_FIELDS
from keras_vit.training.masked_patch import OWN_SETTINGS
from keras_vit.training.masked_patch import MaskedPatchPredictor
from keras_vit.training.masked_patch import masked_patch_dataset
from keras_vit.training.masked_patch import masked_patch_loss
from keras_vit.training.masked_patch import masked_patch_targets
from keras_vit.training.masked_patch import masked_patch_to_vit

RNG = np.random.default_rng(0)


def numpy_colour_classes(images, patch):
    """3-bit mean colour per patch, written out in NumPy (float64)."""
    batch, height, width, channels = images.shape
    x = (images.astype(np.float64) + 1.0) / 2.0
    means = x.reshape(batch, height // patch, patch, width // patch, patch, channels).mean(axis=(2, 4))
    q = np.clip(np.floor(means * 8), 0, 7).astype(int).reshape(batch, -1, 3)
    return q[..., 0] * 64 + q[..., 1] * 8 + q[..., 2]


def identity_replacement(batch, num_patches):
    return np.tile(np.arange(num_patches, dtype="int32"), (batch, 1))


def draw(images, patch, seed=(0, 0), **rates):
    inputs, targets, weights = masked_patch_targets(images, patch, seed, **rates)
    return {k: v.numpy() for k, v in inputs.items()}, targets.numpy(), weights.numpy()


def digits_rgb(size=16):
    """scikit-learn's 8x8 digits, upscaled to size x size, grey RGB in [-1, 1]."""
    digits = load_digits()
    images = digits.images / 16.0
    factor = size // 8
    images = np.repeat(np.repeat(images, factor, axis=1), factor, axis=2)
    images = np.repeat(images[..., None], 3, axis=-1) * 2.0 - 1.0
    return images.astype("float32"), digits.target.astype("int32")


# -- the corruption and the colour targets ------------------------------------

def test_colour_targets_match_numpy_and_the_class_boundaries():
    # Pixels on a 1/64 grid of [0, 1], so every patch mean is exact in float32.
    random = RNG.integers(0, 65, (6, 16, 16, 3)) / 64.0
    # Pure colours on and just below each level boundary k/8 (and 0, 1).
    pure = np.zeros((1, 16, 16, 3))
    values, expected = [], []
    for k in range(9):
        for value, level in ((k / 8, min(k, 7)), (k / 8 - 1 / 64, k - 1)):
            if 0 <= value <= 1:
                values.append(value)
                expected.append(level)
    colours = [(values[i], values[-1 - i], values[(i * 5) % len(values)]) for i in range(16)]
    classes = []
    for n, colour in enumerate(colours):
        row, col = divmod(n, 4)
        pure[0, row * 4:(row + 1) * 4, col * 4:(col + 1) * 4] = colour
        levels = [expected[values.index(c)] for c in colour]
        classes.append(levels[0] * 64 + levels[1] * 8 + levels[2])
    images = (np.concatenate([random, pure]) * 2.0 - 1.0).astype("float32")
    _, targets, _ = draw(images, 4)
    np.testing.assert_array_equal(targets, numpy_colour_classes(images, 4))
    np.testing.assert_array_equal(targets[-1], classes)
    assert targets.dtype == np.int32 and targets.min() >= 0 and targets.max() < 512
    # White is the last class, black the first, pure red r = 7; out of range clips.
    extremes = np.array([[1, 1, 1], [-1, -1, -1], [1, -1, -1], [1.5, -2, 0]], "float32")
    _, targets, _ = draw(np.broadcast_to(extremes[:, None, None], (4, 4, 8, 3)), 4)
    np.testing.assert_array_equal(targets[:, 0], [511, 0, 448, 7 * 64 + 0 * 8 + 4])


@pytest.mark.parametrize("height, width, corrupt_rate", [(16, 20, 0.5), (12, 20, 0.5), (32, 32, 0.15)])
def test_exact_corruption_count_and_the_80_10_10_split(height, width, corrupt_rate):
    num_patches = (height // 4) * (width // 4)
    inputs, _, weights = draw(np.zeros((2000, height, width, 3), "float32"), 4, (3, 4),
                              corrupt_rate=corrupt_rate)
    codes, replacement = inputs["corruption"], inputs["replacement"]
    assert codes.dtype == replacement.dtype == np.int32
    per_image = (codes > 0).sum(axis=1)
    np.testing.assert_array_equal(per_image, round(corrupt_rate * num_patches))
    np.testing.assert_array_equal(weights, (codes > 0).astype("float32"))
    total = per_image.sum()
    for code, rate in ((1, 0.8), (2, 0.1), (3, 0.1)):
        count = (codes == code).sum()
        assert abs(count - rate * total) < 5 * np.sqrt(total * rate * (1 - rate)), (code, count / total)
    # Every position is chosen about equally often.
    per_position = (codes > 0).mean(axis=0)
    assert np.all(np.abs(per_position - corrupt_rate) < 0.06)
    # A replacement is another patch of the same image; elsewhere the index is the patch's own.
    index = identity_replacement(len(codes), num_patches)
    replaced = codes == 2
    assert np.all(replacement[replaced] != index[replaced])
    assert np.all((replacement >= 0) & (replacement < num_patches))
    np.testing.assert_array_equal(replacement[~replaced], index[~replaced])
    assert len(np.unique(replacement[replaced])) == num_patches


def test_same_seed_same_draw_and_another_seed_another():
    images = RNG.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    seeds = ((5, 1), tf.constant([5, 1], tf.int64), (5, 2))
    first, second, other = (draw(images, 4, seed) for seed in seeds)
    for key in ("corruption", "replacement"):
        np.testing.assert_array_equal(first[0][key], second[0][key])
    np.testing.assert_array_equal(first[0]["images"], images)
    assert np.mean(first[0]["corruption"] != other[0]["corruption"]) > 0.3
    np.testing.assert_array_equal(first[1], other[1])  # the targets do not depend on the draw


@pytest.mark.slow
def test_dataset_folds_the_batch_index_into_the_seed_and_resumes():
    images = RNG.uniform(-1, 1, (12, 8, 8, 3)).astype("float32")
    source = tf.data.Dataset.from_tensor_slices((images, np.arange(12))).batch(4)
    batches = list(masked_patch_dataset(source, 4, seed=7))
    assert len(batches) == 3 and all(len(batch) == 3 for batch in batches)
    for i, (inputs, targets, weights) in enumerate(batches):
        expected = draw(images[4 * i:4 * (i + 1)], 4, (7, i))
        for key in ("images", "corruption", "replacement"):
            np.testing.assert_array_equal(inputs[key].numpy(), expected[0][key])
        np.testing.assert_array_equal(targets.numpy(), expected[1])
        np.testing.assert_array_equal(weights.numpy(), expected[2])
    resumed = next(iter(masked_patch_dataset(source.skip(1), 4, seed=7, start_batch=1)))
    np.testing.assert_array_equal(resumed[0]["corruption"].numpy(), batches[1][0]["corruption"].numpy())
    again = next(iter(masked_patch_dataset(source, 4, seed=7)))
    np.testing.assert_array_equal(again[0]["replacement"].numpy(), batches[0][0]["replacement"].numpy())


@pytest.mark.parametrize(
    "shape, kwargs, message",
    [
        ((2, 16, 16, 1), {}, r"RGB images of shape \(batch, H, W, 3\).*got shape \(2, 16, 16, 1\)"),
        ((2, 18, 16, 3), {}, "18x16 do not divide into 4x4 patches"),
        ((2, 4, 4, 3), {}, "make one patch"),
        ((2, 16, 16, 3), dict(corrupt_rate=0.01), "corrupts 0 of 16 patches"),
        ((2, 16, 16, 3), dict(mask_rate=0.8, random_rate=0.3), "sum to at most 1"),
    ],
)
def test_bad_target_arguments_fail_clearly(shape, kwargs, message):
    with pytest.raises(ValueError, match=message):
        masked_patch_targets(np.zeros(shape, "float32"), 4, (0, 0), **kwargs)


# -- PatchCorruption ----------------------------------------------------------

def run_multi_input_layer_test(layer_cls, init_kwargs, inputs, expected_output_shape, tmp_path):
    """helpers.run_layer_test for a layer called on several tensors."""
    layer = layer_cls(**init_kwargs)
    output = layer(*inputs)
    assert tuple(output.shape) == tuple(expected_output_shape)
    assert tuple(layer.compute_output_shape(inputs[0].shape)) == tuple(expected_output_shape)
    config = layer.get_config()
    assert layer_cls.from_config(config).get_config() == config
    assert type(keras.layers.deserialize(keras.layers.serialize(layer))) is layer_cls
    symbolic = [keras.Input(shape=x.shape[1:], dtype=str(x.dtype)) for x in inputs]
    reloaded = save_and_reload(keras.Model(symbolic, layer(*symbolic)), tmp_path)
    np.testing.assert_allclose(to_numpy(reloaded(list(inputs))), to_numpy(output), atol=1e-6)
    return layer, to_numpy(output)


def test_patch_corruption_matches_numpy(tmp_path):
    patches = RNG.normal(size=(3, 6, 5)).astype("float32")
    codes = np.array([[0, 1, 2, 3, 2, 0], [1, 1, 0, 0, 3, 2], [2, 2, 2, 3, 1, 0]], "int32")
    replacement = RNG.integers(0, 6, (3, 6)).astype("int32")
    layer, out = run_multi_input_layer_test(
        layers.PatchCorruption, {}, [patches, codes, replacement], (3, 6, 5), tmp_path
    )
    mask = to_numpy(layer.mask_embedding)
    assert mask.shape == (5,)
    expected = patches.copy()
    for b in range(3):
        for n in range(6):
            if codes[b, n] == 1:
                expected[b, n] = mask
            elif codes[b, n] == 2:
                expected[b, n] = patches[b, replacement[b, n]]
    np.testing.assert_allclose(out, expected, atol=1e-6)
    big = layers.PatchCorruption()
    big(np.zeros((1, 2, 4096), "float32"), np.zeros((1, 2), "int32"), np.zeros((1, 2), "int32"))
    assert 0.015 < to_numpy(big.mask_embedding).std() < 0.025  # normal(0.02)


# -- the loss -----------------------------------------------------------------

def test_loss_is_the_mean_over_corrupted_patches_and_accuracy_weights_too():
    logits = RNG.normal(size=(3, 8, 512)).astype("float32") * 3
    targets = RNG.integers(0, 512, (3, 8)).astype("int32")
    targets[:, :4] = logits[:, :4].argmax(-1)  # some right answers
    weights = (RNG.uniform(size=(3, 8)) < 0.5).astype("float32")
    log_probs = logits - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
    per_patch = -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    expected = per_patch[weights == 1].mean()
    loss = float(to_numpy(masked_patch_loss()(targets, logits, weights)))
    assert loss == pytest.approx(expected, rel=1e-5)
    # Keras's default reduction divides by every patch, not by the corrupted ones.
    default = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    assert float(to_numpy(default(targets, logits, weights))) == pytest.approx(
        per_patch[weights == 1].sum() / weights.size, rel=1e-5
    )
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state(targets, logits, sample_weight=weights)
    right = logits.argmax(-1) == targets
    assert float(to_numpy(accuracy.result())) == pytest.approx(right[weights == 1].mean())


# -- the model ----------------------------------------------------------------

def corrupted_batch(batch=2, seed=(1, 1)):
    images = RNG.uniform(-1, 1, (batch, 16, 16, 3)).astype("float32")
    return draw(images, 4, seed)


def randomize_head(model):
    head = model.get_layer("mpp_head")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape) * 0.1)


def test_backbone_is_a_vit_and_corruption_reaches_it():
    model = MaskedPatchPredictor(**MASKED_PATCH_BACKBONE)
    randomize_head(model)
    vit = masked_patch_to_vit(model, num_classes=0)
    assert {v.path for v in vit.weights} == {
        v.path for v in model.weights if not v.path.startswith(("patch_corruption/", "mpp_head/"))
    }
    inputs, _, _ = corrupted_batch()
    clean = dict(inputs, corruption=np.zeros((2, 16), "int32"), replacement=identity_replacement(2, 16))
    encoded = to_numpy(vit.intermediates(inputs["images"])["encoded"])[:, 1:]
    head = model.get_layer("mpp_head")
    expected = encoded @ to_numpy(head.kernel) + to_numpy(head.bias)
    np.testing.assert_allclose(to_numpy(model(clean)), expected, atol=1e-4)
    assert not np.allclose(to_numpy(model(inputs)), expected, atol=1e-3)
    # With every patch masked, the logits no longer depend on the image.
    masked = dict(clean, corruption=np.ones((2, 16), "int32"))
    other = dict(masked, images=inputs["images"][::-1])
    np.testing.assert_allclose(to_numpy(model(masked)), to_numpy(model(other)), atol=1e-5)


def test_config_and_keras_round_trip(tmp_path):
    model = MaskedPatchPredictor(**MASKED_PATCH_BACKBONE, num_registers=1, dropout_rate=0.1, name="mpp")
    randomize_head(model)
    assert model.num_prefix_tokens == 2 and model.grid_size == (4, 4)
    config = model.get_config()
    assert MaskedPatchPredictor.from_config(config).get_config() == config
    reloaded = save_and_reload(model, tmp_path)
    assert isinstance(reloaded, MaskedPatchPredictor) and reloaded.get_config() == config
    inputs, _, _ = corrupted_batch()
    out = to_numpy(model(inputs))
    assert out.shape == (2, 16, 512) and out.dtype == np.float32
    np.testing.assert_allclose(to_numpy(reloaded(inputs)), out, atol=1e-6)


def test_architecture_is_every_vit_field_but_the_models_own():
    assert set(BACKBONE_FIELDS) | set(OWN_SETTINGS) == set(FIELDS)
    assert not set(BACKBONE_FIELDS) & set(OWN_SETTINGS)
    config = ViTConfig(**MASKED_PATCH_BACKBONE, qk_norm=True, layer_scale_init=0.5, num_classes=7,
                       pooling="gap", fc_norm=True)
    model = MaskedPatchPredictor(config)
    assert model.config == config.replace(**OWN_SETTINGS)
    assert model.qk_norm and model.layer_scale_init == 0.5  # every field of BACKBONE_FIELDS kept
    assert model.parts.pooling is None and model.parts.head is None
    assert model.parts.patch_corruption is model.get_layer("patch_corruption")
    assert MaskedPatchPredictor.from_config(model.get_config()).config == model.config


def test_presets_and_refusals():
    model = MaskedPatchPredictor.from_preset("ViT-Ti/16", image_size=32, num_layers=1, hidden_dim=24, mlp_dim=48)
    assert (model.num_heads, model.patch_size, model.hidden_dim) == (3, (16, 16), 24)
    with pytest.raises(ValueError, match="hybrid with a ResNet stem"):
        MaskedPatchPredictor.from_preset("r50_vit_b16")
    with pytest.raises(ValueError, match="pooling 'gap' has no \\[class\\] token"):
        masked_patch_to_vit(MaskedPatchPredictor(**MASKED_PATCH_BACKBONE), 10, pooling="gap")
    with pytest.raises(ValueError, match=r"Unknown MaskedPatchPredictor argument\(s\) 'num_layrs', "
                       r"'pooling'. Valid ones: image_size, patch_size, num_layers"):
        MaskedPatchPredictor(**MASKED_PATCH_BACKBONE, num_layrs=2, pooling="gap")


@pytest.mark.slow
def test_mixed_bfloat16_trains_with_float32_logits():
    model = MaskedPatchPredictor(**MASKED_PATCH_BACKBONE, dtype="mixed_bfloat16")
    assert model.get_layer("encoder_block_0").compute_dtype == "bfloat16"
    assert model.get_config()["dtype"]["config"]["name"] == "mixed_bfloat16"
    inputs, targets, weights = corrupted_batch(4)
    assert to_numpy(model(inputs)).dtype == np.float32
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=masked_patch_loss())
    first = model.train_on_batch(inputs, targets, sample_weight=weights)
    assert np.isfinite(first) and first == pytest.approx(np.log(512), rel=1e-2)
    vit = masked_patch_to_vit(model, 10)
    assert vit.get_layer("encoder_block_0").dtype_policy.name == "mixed_bfloat16"


# -- training on the digits and fine-tuning -----------------------------------

@pytest.mark.slow
def test_loss_falls_on_digits_below_the_colour_prior_and_fine_tunes():
    images, labels = digits_rgb(16)
    train, held_out = slice(0, 1536), slice(1536, None)
    source = tf.data.Dataset.from_tensor_slices((images[train], labels[train]))
    dataset = masked_patch_dataset(source.shuffle(1536, seed=0).repeat().batch(64), 4, seed=0)
    evaluation = masked_patch_dataset(
        tf.data.Dataset.from_tensor_slices((images[held_out], labels[held_out])).batch(261), 4, seed=1
    )

    # The colour prior: the loss of predicting the training colour frequencies.
    _, train_targets, train_weights = draw(images[train], 4, (2, 2))
    counts = np.bincount(train_targets[train_weights == 1], minlength=512) + 1e-3
    prior = counts / counts.sum()
    (_, eval_targets, eval_weights), = [tuple(np.asarray(t) for t in batch) for batch in evaluation]
    prior_loss = -np.log(prior[eval_targets[eval_weights == 1]]).mean()

    model = MaskedPatchPredictor(**MASKED_PATCH_BACKBONE)
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss=masked_patch_loss(),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    before = model.evaluate(evaluation, verbose=0, return_dict=True)
    assert before["loss"] == pytest.approx(np.log(512), rel=1e-4)  # zero-initialised head
    history = model.fit(dataset, epochs=4, steps_per_epoch=50, shuffle=False, verbose=0).history
    after = model.evaluate(evaluation, verbose=0, return_dict=True)
    print(f"\ndigits MPP: held-out loss {before['loss']:.3f} -> {after['loss']:.3f} "
          f"(colour prior {prior_loss:.3f}), accuracy {after['accuracy']:.3f}; "
          f"epoch losses {np.round(history['loss'], 3).tolist()}")
    assert history["loss"][-1] < 0.8 * history["loss"][0]
    assert after["loss"] < 0.9 * prior_loss

    # Fine-tuning at a larger size: same backbone, resampled E_pos, zero head.
    vit = masked_patch_to_vit(model, num_classes=10, image_size=24, dropout_rate=0.1)
    assert isinstance(vit, ViT) and vit.grid_size == (6, 6) and vit.dropout_rate == 0.1
    pretrained = {v.path: to_numpy(v) for v in model.weights}
    for variable in vit.weights:
        if variable.path.startswith("head/"):
            np.testing.assert_array_equal(to_numpy(variable), 0)
        elif variable.path == "position_embedding/embeddings":
            expected = model.get_layer("position_embedding").resampled((6, 6))
            np.testing.assert_allclose(to_numpy(variable), expected, atol=1e-6)
        else:
            np.testing.assert_array_equal(to_numpy(variable), pretrained[variable.path])
    big, _ = digits_rgb(24)
    vit.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    tuned = vit.fit(big[:256], labels[:256], batch_size=64, epochs=1, verbose=0).history["loss"]
    assert np.all(np.isfinite(tuned))
