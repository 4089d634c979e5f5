"""NaFlex (SigLIP 2): images of any size as padded patch sequences
(`keras_vit.naflex`), and the ViT that takes them (``naflex=True``,
``with_naflex``), against Hugging Face's Siglip2 functions and the
fixed-size model."""

import keras
import numpy as np
import pytest
from helpers import save_and_reload
from helpers import to_numpy
from test_keras_features import FORMATS
from test_keras_features import UPSTREAM

import keras_vit
from keras_vit import ViT
from keras_vit import ViTConfig
from keras_vit.kernels.attention import attention_reference
from keras_vit.layers import PositionEmbedding
from keras_vit.naflex import antialiased_resize_matrix
from keras_vit.naflex import image_size_for_max_num_patches
from keras_vit.naflex import naflex_example

ARGS = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
            num_classes=5)
KINDS = {  # position embeddings and pooling: each path NaFlex changes
    "learned_token": dict(),
    "learned_gap": dict(pooling="gap"),
    "sincos_map": dict(position_embedding="sincos2d", pooling="map"),
    "rope_registers": dict(position_embedding="rope", num_registers=2, pooling="gap"),
}
SIZES = [(40, 90), (64, 64), (7, 300), (33, 17), (32, 32)]
BACKEND = keras.backend.backend()


def _images(sizes=SIZES, seed=0, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3)).astype(dtype) for h, w in sizes]


def _siglip2():
    return pytest.importorskip("transformers.models.siglip2.image_processing_pil_siglip2")


# -- inputs (NumPy and tf.data): no Keras backend --------------------------------------


@pytest.mark.backend_independent
@pytest.mark.parametrize("size,patch,budget,expected", [
    ((256, 64), 16, 12, (96, 32)), ((63, 241), 16, 16, (32, 128)),
    ((16, 512), 16, 16, (16, 256)), ((112, 109), 7, 225, (105, 105)),
])
def test_known_sizes(size, patch, budget, expected):
    assert image_size_for_max_num_patches(*size, patch, budget) == expected


@pytest.mark.backend_independent
def test_sizes_are_transformers_sizes():
    reference = _siglip2().get_image_size_for_max_num_patches
    rng = np.random.default_rng(0)
    for _ in range(300):
        height, width = (int(v) for v in rng.integers(1, 1200, 2))
        patch = int(rng.choice([7, 8, 14, 16, 32]))
        budget = int(rng.integers(1, 600))
        got = image_size_for_max_num_patches(height, width, patch, budget)
        assert got == reference(height, width, patch, budget), (height, width, patch, budget)
        assert got[0] % patch == got[1] % patch == 0
        assert (got[0] // patch) * (got[1] // patch) <= budget


@pytest.mark.backend_independent
def test_resize_is_torch_antialiased_bilinear():
    """The resize matrices are PyTorch's ``F.interpolate(bilinear,
    antialias=True)`` to float64 precision; TensorFlow's antialiased resize
    (float32 inside) within 1e-4."""
    torch = pytest.importorskip("torch")
    import tensorflow as tf

    x = np.random.default_rng(0).normal(size=(37, 53, 3))
    for size in ((16, 24), (64, 100), (37, 53), (8, 200), (1, 1)):
        ours = np.einsum("hH,wW,HWc->hwc", antialiased_resize_matrix(37, size[0]),
                         antialiased_resize_matrix(53, size[1]), x)
        theirs = torch.nn.functional.interpolate(
            torch.tensor(x).permute(2, 0, 1)[None], size=size, mode="bilinear",
            align_corners=False, antialias=True)[0].permute(1, 2, 0).numpy()
        np.testing.assert_allclose(ours, theirs, atol=1e-12, rtol=0)
        np.testing.assert_allclose(ours, tf.image.resize(x, size, antialias=True).numpy(),
                                   atol=1e-4, rtol=0)
    np.testing.assert_array_equal(antialiased_resize_matrix(5, 5), np.eye(5))


@pytest.mark.backend_independent
def test_inputs_are_the_siglip2_processors():
    """Grids and masks exactly; pixels within one level of 255 (1/127.5 in
    [-1, 1]): the processor (PIL) rounds the resized image to uint8."""
    module = _siglip2()
    images = _images()
    ours = keras_vit.naflex_inputs(images, 8, 24)
    processor = module.Siglip2ImageProcessorPil(max_num_patches=24, patch_size=8)
    theirs = processor(images, return_tensors="np")
    assert ours["patches"].dtype == np.float32 and ours["patches"].shape == (5, 24, 192)
    assert ours["patch_mask"].dtype == theirs["pixel_attention_mask"].dtype == np.int32
    assert ours["spatial_shapes"].dtype == np.int32
    np.testing.assert_array_equal(ours["patch_mask"], theirs["pixel_attention_mask"])
    np.testing.assert_array_equal(ours["spatial_shapes"], theirs["spatial_shapes"])
    np.testing.assert_allclose(ours["patches"], theirs["pixel_values"], atol=1 / 127.5 + 1e-6, rtol=0)
    assert np.abs(ours["patches"] - theirs["pixel_values"]).mean() < 2e-3


@pytest.mark.backend_independent
def test_patch_order_and_scaling():
    """An image already of its size is cut row-major, each patch in (row,
    column, channel) order, scaled per channel; padding is zeros at the end."""
    image = np.arange(16 * 24 * 2, dtype=np.float32).reshape(16, 24, 2)
    x = keras_vit.naflex_inputs([image], 8, 8, pixel_scale=(1.0, 2.0), pixel_offset=(0.0, 1.0))
    assert x["spatial_shapes"].tolist() == [[2, 3]]
    expected = image * np.array([1.0, 2.0]) + np.array([0.0, 1.0])
    patches = expected.reshape(2, 8, 3, 8, 2).transpose(0, 2, 1, 3, 4).reshape(6, 128)
    np.testing.assert_allclose(x["patches"][0, :6], patches, rtol=1e-6)
    np.testing.assert_array_equal(x["patches"][0, 6:], 0)
    np.testing.assert_array_equal(x["patch_mask"][0], [1] * 6 + [0, 0])


@pytest.mark.backend_independent
@pytest.mark.slow
def test_tf_data_gives_naflex_inputs():
    import tensorflow as tf

    for dtype in (np.uint8, np.float32):
        images = _images(dtype=dtype)
        dataset = tf.data.Dataset.from_generator(
            lambda images=images: iter(images),
            output_signature=tf.TensorSpec((None, None, 3), tf.as_dtype(dtype)))
        batch = next(iter(dataset.map(lambda image: naflex_example(image, 8, 24)).batch(len(images))))
        expected = keras_vit.naflex_inputs(images, 8, 24)
        for key, value in expected.items():
            assert batch[key].dtype.as_numpy_dtype == value.dtype, key
            np.testing.assert_allclose(batch[key].numpy(), value, atol=1e-6, rtol=0, err_msg=key)


@pytest.mark.backend_independent
def test_bad_inputs_say_what_to_do():
    image = np.zeros((16, 16, 3), np.uint8)
    with pytest.raises(ValueError, match="a side of 0 pixels.*Drop it"):
        keras_vit.naflex_inputs([image, np.zeros((0, 16, 3), np.uint8)], 8, 16)
    with pytest.raises(ValueError, match="budget below one patch"):
        keras_vit.naflex_inputs([image], 8, 0)
    with pytest.raises(ValueError, match=r"image\[..., None\]"):
        keras_vit.naflex_inputs([np.zeros((16, 16))], 8, 16)
    with pytest.raises(ValueError, match="different numbers of channels"):
        keras_vit.naflex_inputs([image, np.zeros((16, 16, 1))], 8, 16)
    with pytest.raises(ValueError, match="at least one"):
        keras_vit.naflex_inputs([], 8, 16)
    import tensorflow as tf

    with pytest.raises(ValueError, match="a side of 0 pixels"):  # a static shape
        naflex_example(tf.zeros((0, 16, 3), tf.uint8), 8, 16)
    dataset = tf.data.Dataset.from_generator(  # sizes known as the data comes
        lambda: iter([np.zeros((0, 16, 3), np.uint8)]),
        output_signature=tf.TensorSpec((None, None, 3), tf.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError, match="a side of 0 pixels"):
        next(iter(dataset.map(lambda image: naflex_example(image, 8, 16))))


@pytest.mark.backend_independent
def test_config_fields_are_checked():
    config = ViTConfig(**ARGS, naflex=True, max_num_patches=24)
    assert config.naflex_input_shapes == {"patches": (24, 192), "patch_mask": (24,),
                                          "spatial_shapes": (2,)}
    assert ViTConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="needs `max_num_patches`"):
        ViTConfig(**ARGS, naflex=True)
    with pytest.raises(ValueError, match="Set naflex=True too"):
        ViTConfig(**ARGS, max_num_patches=16)
    with pytest.raises(ValueError, match="hybrid"):
        ViTConfig(**{**ARGS, "patch_size": 1}, resnet_block_units=(1,), naflex=True,
                  max_num_patches=16)


# -- the model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models():
    """kind -> (fixed model, NaFlex 16, NaFlex 24), each with a random head."""
    made = {}
    rng = np.random.default_rng(0)
    for kind, options in KINDS.items():
        keras.utils.set_random_seed(1)
        model = ViT(**ARGS, **options)
        for weight in model.parts.head.weights:
            weight.assign(rng.normal(size=weight.shape).astype("float32"))
        made[kind] = (model, model.with_naflex(16), model.with_naflex(24))
    return made


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow_cases("learned_token")
def test_native_grid_gives_the_fixed_models_logits(models, kind):
    fixed, flex, _ = models[kind]
    images = _images([(32, 32), (32, 32)], seed=1, dtype=np.float32)
    x = keras_vit.naflex_inputs(images, 8, 16)
    assert x["spatial_shapes"].tolist() == [[4, 4], [4, 4]]
    expected = to_numpy(fixed(np.stack(images) / 127.5 - 1))
    np.testing.assert_allclose(to_numpy(flex(x)), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow_cases("learned_token")
def test_padding_does_not_change_an_images_outputs(models, kind):
    _, flex16, flex24 = models[kind]
    x = keras_vit.naflex_inputs(_images([(20, 70), (32, 32), (50, 9)], seed=2), 8, 16)
    padded = {key: value if key == "spatial_shapes" else
              np.pad(value, [(0, 0), (0, 8)] + [(0, 0)] * (value.ndim - 2)) for key, value in x.items()}
    np.testing.assert_allclose(to_numpy(flex24(padded)), to_numpy(flex16(x)), atol=1e-5, rtol=0)
    garbage = dict(padded, patches=np.where(padded["patch_mask"][..., None] == 1, padded["patches"], 7.0))
    np.testing.assert_allclose(to_numpy(flex24(garbage)), to_numpy(flex16(x)), atol=1e-5, rtol=0)


GRID, HIDDEN, LENGTH = (4, 5), 8, 40
SHAPES = np.array([[2, 7], [4, 5], [6, 6], [1, 40], [8, 3], [3, 1]], np.int32)


def _table():
    return np.random.default_rng(0).normal(size=(1, 1 + GRID[0] * GRID[1], HIDDEN)).astype("float32")


def _resized(table, h, w):
    """The table's grid resized to (h, w) by `antialiased_resize_matrix`."""
    grid = table[0, 1:].reshape(*GRID, HIDDEN).astype(np.float64)
    return np.einsum("hH,wW,HWd->hwd", antialiased_resize_matrix(GRID[0], h),
                     antialiased_resize_matrix(GRID[1], w), grid).reshape(h * w, HIDDEN)


@pytest.mark.backend_independent
def test_position_resize_is_transformers():
    """Hugging Face's ``Siglip2VisionEmbeddings.resize_positional_embeddings``
    resizes as `antialiased_resize_matrix`; to one column from more rows,
    TensorFlow's antialiased resize does: PyTorch 2.13's
    ``F.interpolate(antialias=True)`` repeats the first row there (a 4x5
    table to 3x1 gives row 0 three times)."""
    torch = pytest.importorskip("torch")
    modeling = pytest.importorskip("transformers.models.siglip2.modeling_siglip2")
    import tensorflow as tf

    table = _table()
    theirs = modeling.Siglip2VisionEmbeddings.resize_positional_embeddings(
        torch.tensor(table[0, 1:].reshape(*GRID, HIDDEN)), torch.tensor(SHAPES, dtype=torch.long),
        LENGTH).numpy()
    for i, (h, w) in enumerate(SHAPES):
        if w == 1 and h < GRID[0]:
            theirs[i, :h] = tf.image.resize(table[0, 1:].reshape(*GRID, HIDDEN), (h, w),
                                            antialias=True).numpy().reshape(h, HIDDEN)
        np.testing.assert_allclose(_resized(table, h, w), theirs[i, :h * w], atol=1e-5, rtol=0)


def test_position_table_is_resized_per_image():
    """The layer's traceable resize (one row of weights per patch) gives
    `antialiased_resize_matrix`'s table; the padding gets none, the [class]
    row its own."""
    layer = PositionEmbedding(GRID, num_prefix_tokens=1)
    layer.build((None, 1 + GRID[0] * GRID[1], HIDDEN))
    table = _table()
    layer.embeddings.assign(table)
    x = np.zeros((len(SHAPES), 1 + LENGTH, HIDDEN), "float32")
    ours = to_numpy(layer(x, spatial_shapes=SHAPES))
    for i, (h, w) in enumerate(SHAPES):
        np.testing.assert_allclose(ours[i, 1:1 + h * w], _resized(table, h, w), atol=1e-5, rtol=0)
        np.testing.assert_array_equal(ours[i, 1 + h * w:], 0)
    np.testing.assert_allclose(ours[:, 0], np.broadcast_to(table[0, 0], (len(SHAPES), HIDDEN)))


def test_key_mask_leaves_the_masked_keys_out():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, t, 2, 4)).astype("float32") for t in (3, 6, 6))
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], "int32")
    for weights in (False, True):
        out = attention_reference(q, k, v, 0.5, key_mask=mask, return_weights=weights)
        out = to_numpy(out[0] if weights else out)
        first = to_numpy(attention_reference(q[:1], k[:1, :4], v[:1, :4], 0.5))
        np.testing.assert_allclose(out[:1], first, atol=1e-6)
        np.testing.assert_allclose(out[1:], to_numpy(attention_reference(q[1:], k[1:], v[1:], 0.5)),
                                   atol=1e-6)


def test_saves_loads_and_records(models, tmp_path):
    _, flex, _ = models["rope_registers"]
    assert flex.get_config()["naflex"] is True and flex.get_config()["max_num_patches"] == 16
    x = keras_vit.naflex_inputs(_images([(20, 70), (64, 64)], seed=3), 8, 16)
    loaded = save_and_reload(flex, tmp_path)
    assert loaded.config == flex.config
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(flex(x)), atol=1e-6)
    record = flex.intermediates(x)
    np.testing.assert_allclose(to_numpy(record["logits"]), to_numpy(flex(x)), atol=1e-5)
    weights = to_numpy(record["attention_1"])  # (batch, heads, 2 registers + 16, same)
    assert weights.shape == (2, 2, 18, 18)
    np.testing.assert_array_equal(weights[0, :, :, 2 + 14:], 0)   # a 2x7 grid: 14 patches
    np.testing.assert_allclose(weights.sum(-1), 1, rtol=1e-5)


@pytest.mark.slow
def test_fit_on_images_of_mixed_sizes(models):
    fixed, _, _ = models["learned_gap"]
    model = fixed.with_naflex(16)
    sizes = [(20, 70), (64, 64), (50, 9), (33, 17), (90, 40), (16, 16), (48, 120), (30, 30)]
    x = keras_vit.naflex_inputs(_images(sizes, seed=4), 8, 16)
    y = np.arange(len(sizes)) % ARGS["num_classes"]
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(x, y, batch_size=4, epochs=4, verbose=0, shuffle=False).history["loss"]
    assert losses[-1] < losses[0], losses
    assert to_numpy(model.predict(x, verbose=0)).shape == (len(sizes), ARGS["num_classes"])


def test_wrong_inputs_say_what_to_do(models):
    fixed, flex, _ = models["learned_token"]
    x = keras_vit.naflex_inputs(_images([(20, 70)]), 8, 16)
    with pytest.raises(ValueError, match="missing.*spatial_shapes"):
        flex({"patches": x["patches"], "patch_mask": x["patch_mask"]})
    with pytest.raises(ValueError, match=r"unknown \['pixel_values'\]"):
        flex({"pixel_values": x["patches"], "patch_mask": x["patch_mask"],
              "spatial_shapes": x["spatial_shapes"]})
    with pytest.raises(ValueError, match=r"max_num_patches=16.*with_naflex"):
        flex(keras_vit.naflex_inputs(_images([(20, 70)]), 8, 24))
    with pytest.raises(ValueError, match="batch size"):
        flex(dict(x, spatial_shapes=np.concatenate([x["spatial_shapes"]] * 2)))
    with pytest.raises(ValueError, match="disagree"):
        flex(dict(x, spatial_shapes=x["spatial_shapes"] + 1))
    gray = keras_vit.naflex_inputs([np.zeros((20, 70, 1), np.uint8)], 8, 16)
    with pytest.raises(ValueError, match="3-channel images, got patches of 1 channels"):
        flex(gray)
    with pytest.raises(ValueError, match=r"got a dict.*with_naflex"):
        fixed(x)
    with pytest.raises(ValueError, match="NaFlex model.*naflex_inputs"):
        flex(np.zeros((1, 32, 32, 3), "float32"))
    with pytest.raises(ValueError, match="NaFlex model.*naflex_inputs"):
        flex.predict(np.zeros((1, 32, 32, 3), "float32"), verbose=0)
    with pytest.raises(ValueError, match="not yet available"):
        flex.feature_model()
    with pytest.raises(ValueError, match="NaFlex model: the int8 export.*drop `quantize`"):
        flex.export("flex.onnx", format="onnx", quantize="int8")


# -- export -----------------------------------------------------------------------------


def run_naflex_export(fmt, path, inputs):
    """The exported NaFlex model, loaded by its own runtime, run on the dict
    `inputs`: each array fed to the artifact's input of its name."""
    if fmt == "tf_saved_model":
        import tensorflow as tf
        loaded = tf.saved_model.load(path)  # kept: its variables die with it
        return loaded.serve(inputs).numpy()
    if fmt == "onnx":
        import onnxruntime
        session = onnxruntime.InferenceSession(path)
        return session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})[0]
    if fmt == "openvino":
        import openvino
        compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return compiled({i.get_any_name(): inputs[i.get_any_name()] for i in compiled.inputs})[0]
    if fmt == "litert":
        import tensorflow as tf
        runner = tf.lite.Interpreter(model_path=path).get_signature_runner()
        return next(iter(runner(**inputs).values()))
    import torch
    program = torch.export.load(path).module()
    return program({key: torch.from_numpy(value) for key, value in inputs.items()}).detach().numpy()


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.slow
def test_export_runs_in_its_runtime_with_a_dynamic_batch(models, fmt, tmp_path):
    """One artifact, two batch sizes of images of mixed aspect ratios, each
    grid its own: the Keras model's logits within 1e-4 (the position table is
    resized per image inside the exported graph)."""
    if BACKEND not in FORMATS[fmt]:
        pytest.skip(f"Keras 3.15 exports {fmt} from {', '.join(FORMATS[fmt])}, not from {BACKEND}")
    if (fmt, BACKEND) in UPSTREAM:
        pytest.skip(UPSTREAM[fmt, BACKEND])
    _, flex, _ = models["learned_token"]
    path = str(tmp_path / {"tf_saved_model": "saved", "onnx": "flex.onnx", "openvino": "flex.xml",
                           "litert": "flex.tflite", "torch": "flex.pt2"}[fmt])
    flex.export(path, format=fmt, verbose=False)
    x = keras_vit.naflex_inputs(_images(SIZES + [(90, 20), (16, 160)], seed=5), 8, 16)
    assert x["spatial_shapes"].tolist() == [[3, 5], [4, 4], [1, 16], [5, 3], [4, 4], [8, 2], [1, 10]]
    for batch in (7, 2):
        inputs = {key: value[:batch] for key, value in x.items()}
        got = np.asarray(run_naflex_export(fmt, path, inputs))
        np.testing.assert_allclose(got, to_numpy(flex(inputs)), atol=1e-4, rtol=1e-4)
