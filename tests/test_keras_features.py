"""What Keras gives any model, on ViT: mixed precision, quantization, LoRA,
export, and layer outputs that are what their names say."""

import gc
import os
import pathlib
import re
import warnings

import keras
import numpy as np
import pytest
from conftest import fit_digits
from helpers import cpu_has_bfloat16_units
from helpers import save_and_reload
from helpers import to_numpy

from keras_vit import ViT
from keras_vit import kernels
from keras_vit import variants
from keras_vit.export import artifact_info
from keras_vit.export import class_names

BACKEND = keras.backend.backend()


def logits_of(model, x):
    """`model.predict` in one batch: one compiled program per model (a last,
    partial batch of the default 32 compiles a second one on JAX and
    TensorFlow)."""
    return to_numpy(model.predict(x, batch_size=len(x), verbose=0))


def copy_of(model):
    clone = ViT.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    return clone


# -- layer outputs -----------------------------------------------------------------

@pytest.mark.parametrize("pooling", ["token", "gap", "map", "none"])
def test_every_block_and_encoder_norm_output_is_the_whole_sequence(pooling):
    model = ViT(image_size=16, patch_size=4, num_layers=3, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=5, pooling=pooling, num_registers=1)
    tokens = 16 + model.num_prefix_tokens
    for name in [f"encoder_block_{i}" for i in range(3)] + ["encoder_norm"]:
        assert tuple(model.get_layer(name).output.shape) == (None, tokens, 16), name
    x = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype("float32")
    features = keras.Model(model.input, model.get_layer("encoder_norm").output)
    record = model.intermediates(x)
    np.testing.assert_allclose(to_numpy(features(x)), to_numpy(record["encoded"]), atol=1e-5)
    last = keras.Model(model.input, model.get_layer("encoder_block_2").output)
    np.testing.assert_allclose(to_numpy(last(x)), to_numpy(record["encoder_block_2"]), atol=1e-5)
    if "head" in [layer.name for layer in model.layers]:
        np.testing.assert_allclose(to_numpy(model(x)), to_numpy(record["logits"]), atol=1e-5)


# -- lower precision -------------------------------------------------------------

@pytest.mark.slow
def test_mixed_bfloat16_predicts_the_same_digits_as_float32(trained_digits):
    """Inference under mixed_bfloat16 gives float32's top-1 on held-out images (but near-ties)."""
    model, _, (x_test, y_test) = trained_digits  # 17 tokens: the odd length of the real models
    low = ViT(**{**model.config.to_dict(), "dtype": "mixed_bfloat16"})
    low.set_weights(model.get_weights())
    full = logits_of(model, x_test).astype("float32")
    half = logits_of(low, x_test).astype("float32")
    accuracy = (full.argmax(-1) == y_test).mean()
    print(f"float32 test accuracy {accuracy:.1%}")
    assert accuracy > 0.85, f"the float32 model must have learned the digits: {accuracy:.1%}"
    # bfloat16 keeps 8 bits: the logits move by a small fraction of their
    # spread, and top-1 changes at most on a near-tie (one digit in a hundred).
    error = np.abs(half - full).mean()
    assert error < 0.02 * full.std(), (error, full.std())
    agree = (half.argmax(-1) == full.argmax(-1)).mean()
    assert agree >= 0.99, f"mixed_bfloat16 agrees with float32 on {agree:.1%} of the digits"


@pytest.mark.slow
@pytest.mark.skipif(not cpu_has_bfloat16_units(), reason="the CPU has no bfloat16 units (avx512_bf16 or amx_bf16 "
                    "in /proc/cpuinfo): mixed_bfloat16 is emulated there, slower than float32")
def test_mixed_bfloat16_training_reaches_float32s_accuracy(trained_digits):
    """The float32 fixture's training (`fit_digits`) again under mixed_bfloat16:
    bfloat16 matmuls, float32 weights and updates, the same held-out accuracy."""
    model, (x, y), (x_test, y_test) = trained_digits
    low = fit_digits(x, y, dtype="mixed_bfloat16")
    assert (low.compute_dtype, low.weights[0].dtype) == ("bfloat16", "float32")
    full = (logits_of(model, x_test).argmax(-1) == y_test).mean()
    half = (logits_of(low, x_test).argmax(-1) == y_test).mean()
    print(f"held-out accuracy: float32 {full:.1%}, mixed_bfloat16 {half:.1%}")
    # Within the spread of float32's own: the same run reached 92.8%, 93.1% and 96.1% on
    # TensorFlow, JAX and PyTorch (mixed_bfloat16 93.3%, 94.4%, 95.6%).
    assert half > 0.85 and half >= full - 0.04, f"mixed_bfloat16 training reached {half:.1%}, float32 {full:.1%}"


# -- quantization ------------------------------------------------------------------

# Keras 3.15's modes for Dense and EinsumDense without calibration data, and
# the largest logit error, relative to the logits' range, that each may give
# (keras-hub's ViT of the shape of the test: int8 0.007, float8 0.042).
QUANTIZATION = {"int8": 0.05, "float8": 0.1, "int4": 0.3}


@pytest.mark.parametrize("mode", list(QUANTIZATION))
@pytest.mark.slow
def test_quantize_gives_the_float_logits_and_saves(trained_digits, mode, tmp_path):
    model, _, (x_test, y_test) = trained_digits
    full = logits_of(model, x_test)
    quantized = copy_of(model)
    gc.unfreeze()  # conftest's freeze of the collected tests, so that quantize's own shows
    try:
        quantized.quantize(mode)
        assert gc.get_freeze_count() == 0  # ViT.quantize's freeze (Keras's gc.collect per kernel) undone
    finally:
        gc.freeze()
    modes = {layer.quantization_mode for layer in variants.projections(quantized).values()}
    assert modes == {mode}, modes
    low = logits_of(quantized, x_test)
    error = np.abs(low - full).max() / (full.max() - full.min())
    print(f"{mode}: max logit error {error:.4f} of the logits' range; "
          f"top-1 agreement {(low.argmax(-1) == full.argmax(-1)).mean():.2%}")
    assert error < QUANTIZATION[mode], error
    if mode == "int8":
        agree = (low.argmax(-1) == full.argmax(-1)).mean()
        assert agree >= 0.99, f"int8 agrees with float32 on {agree:.1%} of the held-out digits"
    reloaded = save_and_reload(quantized, tmp_path)
    assert {layer.quantization_mode for layer in variants.projections(reloaded).values()} == {mode}
    np.testing.assert_allclose(logits_of(reloaded, x_test), low, atol=1e-5)


@pytest.mark.slow
def test_a_mode_slower_than_float32_on_a_cpu_warns_once_with_its_factor(monkeypatch):
    """int4 and float8 have no fast kernel on a CPU: `ViT.quantize` warns,
    the first time only, with the factor docs/deploy.md's table measures
    for this backend and the int8 routes; int8 (its kernel route) is silent."""
    monkeypatch.setattr(variants, "WARNED_SLOW_MODES", set())

    def warnings_of(mode):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3).quantize(mode)
        return [str(w.message) for w in caught if "float32's speed" in str(w.message)]

    backend = keras.config.backend()
    row = {"torch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX"}[backend]
    table = (pathlib.Path(__file__).parents[1] / "docs" / "deploy.md").read_text()
    cells = re.search(rf"^\| {row} \|(.+)\|$", table, re.M).group(1).split("|")
    documented = dict(zip(("int4", "float8"), (float(re.search(r"\(([\d.]+)×\)", c).group(1))
                                               for c in cells[-2:])))
    assert warnings_of("int8") == []
    for mode in ("int4", "float8"):
        assert variants.SLOW_ON_CPU[(mode, backend)] == documented[mode]
        first, again = warnings_of(mode), warnings_of(mode)
        assert len(first) == 1 and again == [], (first, again)
        assert f"about {documented[mode]:.2f}x float32's speed" in first[0]
        assert "format='onnx', quantize='int8'" in first[0]


# -- LoRA --------------------------------------------------------------------------

@pytest.mark.slow
def test_lora_trains_only_the_adapters_and_the_head_and_merges(trained_digits, tmp_path):
    model, (x, y), (x_test, _) = trained_digits
    adapted = copy_of(model)
    adapted.enable_lora(4)
    lora = [v for v in adapted.trainable_weights if "lora_kernel" in v.path]
    assert len(lora) == 2 * 6 * 4  # A and B of q, k, v, out, fc1, fc2 in 4 blocks
    assert {v.path.split("/")[0] for v in adapted.trainable_weights if "lora" not in v.path} == {"head"}
    frozen = {v.path: to_numpy(v).copy() for v in adapted.weights if "lora" not in v.path}
    adapted.compile(optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    adapted.fit(x[:256], (y[:256] + 1) % 10, batch_size=64, epochs=2, verbose=0)  # a new task
    for v in adapted.weights:
        if v.path in frozen and not v.path.startswith("head/"):
            np.testing.assert_array_equal(to_numpy(v), frozen[v.path], err_msg=v.path)
    assert all(np.abs(to_numpy(v)).max() > 0 for v in lora if "lora_kernel_b" in v.path)
    logits = logits_of(adapted, x_test)
    assert np.abs(logits - logits_of(model, x_test)).max() > 1e-2

    merged = adapted.merge_lora()
    assert not any("lora" in v.path for v in merged.weights)
    np.testing.assert_allclose(logits_of(merged, x_test), logits, rtol=1e-4, atol=1e-4)
    reloaded = save_and_reload(adapted, tmp_path)  # Keras saves the merged kernels
    np.testing.assert_allclose(logits_of(reloaded, x_test), logits, rtol=1e-4, atol=1e-4)


def test_lora_errors_name_the_problem():
    model = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3)
    with pytest.raises(ValueError, match=r"LoRA targets must be among \('query', 'key', 'value', "
                                         r"'out', 'fc1', 'fc2'\), got \('qkv',\)"):
        model.enable_lora(2, target=("qkv",))
    with pytest.raises(ValueError, match=r"`rank` must be an int >= 1, got 0"):
        model.enable_lora(0)
    model.enable_lora(2, target="query")
    assert [path for path, layer in variants.projections(model).items() if layer.lora_enabled] == [
        "encoder_block_0/attention/query"]


# -- export ------------------------------------------------------------------------

FORMATS = {  # format -> the backends Keras 3.15 exports it from
    "tf_saved_model": ("tensorflow", "jax"),
    "onnx": ("tensorflow", "jax", "torch"),
    "openvino": ("tensorflow", "jax", "torch"),
    "litert": ("tensorflow", "torch"),
    "torch": ("torch",),
}
# (format, backend) pairs an upstream tool cannot export today, with why (docs/deploy.md).
UPSTREAM = {
    ("openvino", "jax"): "Keras 3.15 converts a JAX model for OpenVINO through jax2tf with "
    "native_serialization=False, which JAX 0.10 no longer has: the graph holds an XlaCallModule "
    "op that OpenVINO cannot convert (export from TensorFlow or PyTorch instead)",
}
try:
    import litert_torch  # noqa: F401
except ImportError:
    UPSTREAM["litert", "torch"] = (
        "Keras exports LiteRT from PyTorch through litert-torch, which is not in the dev set: its "
        "pins (typing_extensions 4.12, pydantic 2.11, torchao) would move the pinned packages; "
        "export LiteRT from TensorFlow")


def run_exported(fmt, path, images):
    """The exported artifact, loaded by its own runtime, run on `images`."""
    if fmt == "onnx":
        import onnxruntime
        session = onnxruntime.InferenceSession(path)
        return session.run(None, {session.get_inputs()[0].name: images})[0]
    if fmt == "tf_saved_model":
        import tensorflow as tf
        loaded = tf.saved_model.load(path)  # kept: its variables die with it
        return loaded.serve(images).numpy()
    if fmt == "openvino":
        import openvino
        # float32, as Keras computes: on a CPU with bfloat16 units (AVX-512 BF16, AMX)
        # the CPU plugin's default inference precision is bfloat16 (docs/deploy.md).
        return openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(images)[0]
    if fmt == "litert":
        import tensorflow as tf
        interpreter = tf.lite.Interpreter(model_path=path)
        index = interpreter.get_input_details()[0]["index"]
        interpreter.resize_tensor_input(index, images.shape)
        interpreter.allocate_tensors()
        interpreter.set_tensor(index, images)
        interpreter.invoke()
        return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    import torch
    return torch.export.load(path).module()(torch.from_numpy(images)).detach().numpy()


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.slow_cases("litert", "onnx", "tf_saved_model", "torch")  # OpenVINO's is the fast tier's export
def test_export_reloads_in_its_runtime_with_a_dynamic_batch(fmt, tmp_path):
    if BACKEND not in FORMATS[fmt]:
        pytest.skip(f"Keras 3.15 exports {fmt} from {', '.join(FORMATS[fmt])}, not from {BACKEND}")
    if (fmt, BACKEND) in UPSTREAM:
        pytest.skip(UPSTREAM[fmt, BACKEND])
    model = ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                num_classes=10, class_names=[f"class {i}" for i in range(10)])
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    path = str(tmp_path / ARTIFACT[fmt])
    model.export(path, format=fmt, verbose=False)
    assert os.path.exists(path)
    assert kernels.fast_paths_enabled()  # export's switch is off again afterwards
    # the class names travel inside, and the record says what goes in
    assert class_names(path) == list(model.class_names)
    assert artifact_info(path)["keras_vit"]["preprocessing"] is False
    for batch in (3, 5):  # one artifact, two batch sizes
        images = np.random.default_rng(batch).normal(size=(batch, 32, 32, 3)).astype("float32")
        got = np.asarray(run_exported(fmt, path, images))
        want = to_numpy(model.predict(images, verbose=0))
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


ARTIFACT = {"tf_saved_model": "saved", "onnx": "vit.onnx", "openvino": "vit.xml", "litert": "vit.tflite",
            "torch": "vit.pt2"}


def run_serving(fmt, path, pixels):
    """An artifact exported with ``preprocessing=True``, loaded by its own
    runtime and run on uint8 `pixels`, by its outputs' names: (logits,
    probabilities)."""
    if fmt == "onnx":
        import onnxruntime
        session = onnxruntime.InferenceSession(path)
        assert [i.name for i in session.get_inputs()] == ["images"]
        return session.run(["logits", "probabilities"], {"images": pixels})
    if fmt == "tf_saved_model":
        import tensorflow as tf
        loaded = tf.saved_model.load(path)
        out = loaded.signatures["serve"](images=tf.constant(pixels))
        return out["logits"].numpy(), out["probabilities"].numpy()
    if fmt == "openvino":
        import openvino
        compiled = openvino.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        out = compiled(pixels)
        return out[compiled.output("logits")], out[compiled.output("probabilities")]
    if fmt == "litert":
        import tensorflow as tf
        out = tf.lite.Interpreter(model_path=path).get_signature_runner()(images=pixels)
        return out["logits"], out["probabilities"]
    import torch
    out = torch.export.load(path).module()(torch.from_numpy(pixels))
    return out["logits"].detach().numpy(), out["probabilities"].detach().numpy()


# Wrong input to an artifact with preprocessing, and what each runtime does with it
# (docs/deploy.md#images-in-classes-out): the (input, format, backend) triples that return
# logits; every other one raises the runtime's own error.
BAD_INPUTS = {"float32 batch": np.zeros((2, 32, 32, 3), "float32"), "empty batch": np.zeros((0, 32, 32, 3), "uint8"),
              "1 channel": np.zeros((2, 32, 32, 1), "uint8"), "4 channels": np.zeros((2, 32, 32, 4), "uint8")}
HANDLED = {("float32 batch", "openvino", backend) for backend in ("tensorflow", "torch")} | {
    ("empty batch", fmt, backend) for fmt, backend in (("tf_saved_model", "tensorflow"), ("openvino", "tensorflow"),
                                                       ("onnx", "torch"), ("torch", "torch"), ("openvino", "torch"),
                                                       ("onnx", "jax"))} | {
    # TensorFlow's SavedModel does not check the channels against its signature: one channel
    # times this model's per-channel pixel scale broadcasts to three (a grey image as RGB).
    ("1 channel", "tf_saved_model", "tensorflow")}


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.slow
def test_an_artifact_with_preprocessing_takes_images_of_any_size(fmt, tmp_path):
    """``export(..., preprocessing=True)``: uint8 images of three sizes, larger
    and smaller than the model's, square, wide and tall, in the runtime give
    the Keras model's logits and probabilities (its softmax; ONNX's model has
    a sigmoid head) on `read_images` of the same PNG files, within 1e-4
    (LiteRT 1e-3); the class names and the activation read back. A
    SavedModel's ``serving_encoded`` signature takes the PNG files' bytes,
    the three sizes in one batch, and gives the same within 1e-4;
    ``serving_default`` is ``serve``."""
    import tensorflow as tf

    from keras_vit.data import read_images

    if BACKEND not in FORMATS[fmt]:
        pytest.skip(f"Keras 3.15 exports {fmt} from {', '.join(FORMATS[fmt])}, not from {BACKEND}")
    if (fmt, BACKEND) in UPSTREAM:
        pytest.skip(UPSTREAM[fmt, BACKEND])
    activation = "sigmoid" if fmt == "onnx" else "softmax"  # SigLIP's head: each class on its own
    model = ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=5, class_names=list("abcde"), pixel_scale=(0.017, 0.0175, 0.0174),
                pixel_offset=-2.0, head_activation=activation)
    probabilities_of = getattr(keras.ops, activation)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    path = str(tmp_path / ARTIFACT[fmt])
    model.export(path, format=fmt, verbose=False, preprocessing=True)
    tolerance = 1e-3 if fmt == "litert" else 1e-4
    rng = np.random.default_rng(0)
    every_path, every_want = [], []
    for size in [(32, 32), (57, 41), (19, 24)]:
        pixels = rng.integers(0, 256, (2, *size, 3), dtype=np.uint8)
        paths = []
        for i, image in enumerate(pixels):
            paths.append(str(tmp_path / f"{size[0]}x{size[1]}_{i}.png"))
            tf.io.write_file(paths[-1], tf.io.encode_png(image))
        want = to_numpy(model.predict(read_images(paths, model=model), verbose=0))
        logits, probabilities = (np.asarray(x) for x in run_serving(fmt, path, pixels))
        np.testing.assert_allclose(logits, want, atol=tolerance, rtol=tolerance, err_msg=str(size))
        np.testing.assert_allclose(probabilities, keras.ops.convert_to_numpy(probabilities_of(want)),
                                   atol=tolerance, rtol=tolerance, err_msg=str(size))
        every_path += paths
        every_want.append(want)
    if fmt == "tf_saved_model":  # encoded files in, the sizes mixed in one batch
        loaded = tf.saved_model.load(path)
        pixels = tf.constant(pixels)
        np.testing.assert_array_equal(loaded.signatures["serving_default"](images=pixels)["logits"],
                                      loaded.signatures["serve"](images=pixels)["logits"])
        order = [0, 2, 4, 1, 5, 3]  # each size beside the others
        contents = [pathlib.Path(every_path[i]).read_bytes() for i in order]
        out = loaded.signatures["serving_encoded"](images=tf.constant(contents))
        want = np.concatenate(every_want)[order]
        np.testing.assert_allclose(out["logits"].numpy(), want, atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(out["probabilities"].numpy(),
                                   keras.ops.convert_to_numpy(keras.ops.softmax(want)), atol=1e-4, rtol=1e-4)
        assert loaded.signatures["serving_encoded"](images=tf.constant([], tf.string))["logits"].shape == (0, 5)
    assert class_names(path) == list("abcde")
    assert artifact_info(path)["keras_vit"]["preprocessing"] is True
    assert artifact_info(path)["keras_vit"]["activation"] == activation
    for name, x in BAD_INPUTS.items():  # handled (logits of the batch's length), or the runtime's error
        try:
            logits = np.asarray(run_serving(fmt, path, x)[0])
        except Exception:  # noqa: BLE001 (each runtime raises its own type)
            assert (name, fmt, BACKEND) not in HANDLED, name
        else:
            assert (name, fmt, BACKEND) in HANDLED and logits.shape == (len(x), 5), (name, logits.shape)


# Variants whose position embeddings `dynamic_image_size` handles differently: a learned table with
# registers (three prefix rows), channels-first images; fixed sin-cos without a [class] token, MAP
# pooling; DINOv3's rotary embeddings, turned on the grid in every block.
ANY_SIZE_VARIANTS = (dict(num_registers=2, data_format="channels_first"),
                     dict(position_embedding="sincos2d", pooling="map"),
                     dict(position_embedding="rope", key_bias=False, num_registers=1))
# The first variant's sizes by resampling method; DINOv2's at the model's own size too.
ANY_SIZE_CASES = {"bilinear": ((16, 40),), "bicubic": ((48, 24),), "dinov2": ((48, 24), (32, 32)),
                  "cpe": ((48, 24),)}


@pytest.mark.slow
def test_the_any_size_model_is_with_image_size_at_each_size():
    """`keras_vit.export.serving.dynamic_model` (what ``dynamic_image_size=True``
    traces) on float images of sizes other than the model's gives
    ``with_image_size((h, w), method)``'s logits within 1e-5 (each
    resampling method on the first variant, wide and tall; RADIO's crop of
    a square grid too), and with DINOv2's the model's own at its own size (where its offset would
    otherwise move the table)."""
    from keras_vit.export.serving import dynamic_model

    rng = np.random.default_rng(0)
    for variant in ANY_SIZE_VARIANTS:
        model = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=5, **variant)
        model.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in model.get_weights()])
        first = variant.get("data_format") == "channels_first"
        cases = ANY_SIZE_CASES if variant is ANY_SIZE_VARIANTS[0] else {"bilinear": ((48, 24),)}
        for method, sizes in cases.items():
            any_size = dynamic_model(model, method)
            for size in sizes:
                x = rng.normal(size=(2, 3, *size) if first else (2, *size, 3)).astype("float32")
                want = logits_of(model.with_image_size(size, method=method), x)
                np.testing.assert_allclose(to_numpy(any_size(x)), want, atol=1e-5, rtol=1e-5,
                                           err_msg=f"{variant} {method} {size}")


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.slow
def test_an_artifact_with_dynamic_image_size_is_with_image_size_at_each_size(fmt, tmp_path):
    """``export(..., dynamic_image_size=True)``: one artifact takes float images
    of three sizes (wide, tall, larger; multiples of the patch size) and gives
    ``with_image_size``'s logits within 1e-4 in its runtime (a SavedModel and
    a ``.pt2`` of a model with DINOv3's rotary embeddings, the others of a
    learned table); its record says so, and a height of no multiple of the
    patch size is refused by the runtime (the graph's reshape, or the
    program's guard)."""
    from keras_vit.export import runtime

    if BACKEND not in FORMATS[fmt]:
        pytest.skip(f"Keras 3.15 exports {fmt} from {', '.join(FORMATS[fmt])}, not from {BACKEND}")
    if (fmt, BACKEND) in UPSTREAM:
        pytest.skip(UPSTREAM[fmt, BACKEND])
    # DINOv3's rotary embeddings where the format is the backend's own, a learned table elsewhere
    rope = dict(position_embedding="rope", key_bias=False, num_registers=2) if fmt in (
        "tf_saved_model", "torch") else {}
    model = ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=5, class_names=list("abcde"), **rope)
    rng = np.random.default_rng(1)
    model.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in model.get_weights()])
    path = str(tmp_path / ARTIFACT[fmt])
    if (fmt, BACKEND) == ("onnx", "jax"):
        with pytest.raises(ValueError, match=r"cannot be exported to onnx from jax: jax2onnx gives the wrong "
                           r"length .* Export onnx from tensorflow or torch"):
            model.export(path, format=fmt, dynamic_image_size=True)
        pytest.skip("jax2onnx 0.17 cannot trace a sequence of free length (refused, as checked)")
    model.export(path, format=fmt, verbose=False, dynamic_image_size=True)
    record = artifact_info(path)
    assert record["class_names"] == list("abcde")
    assert record["keras_vit"]["dynamic_image_size"] is True and record["keras_vit"]["preprocessing"] is False
    run = runtime.load(path)
    for size in ((16, 40), (48, 24), (64, 64)):
        x = rng.normal(size=(3, *size, 3)).astype("float32")
        np.testing.assert_allclose(run(x)["logits"], logits_of(model.with_image_size(size), x),
                                   atol=1e-4, rtol=1e-4, err_msg=str(size))
    with pytest.raises(Exception):  # noqa: B017 (each runtime raises its own type)
        run(np.zeros((2, 20, 32, 3), "float32"))


@pytest.mark.skipif(BACKEND != "tensorflow", reason="LiteRT's converter runs on TensorFlow")
def test_a_litert_model_with_its_weights_after_the_flatbuffer_keeps_them_and_its_record(tmp_path):
    """A LiteRT model over 2 GB keeps its weights after the flatbuffer, at
    offsets from the file's start (the converter's buffer offsets, forced
    here on a small model): the record written into the flatbuffer moves
    them with it, and the model gives the same logits; written again, the
    record replaces its entries."""
    from tensorflow.lite.python import schema_py_generated as schema_fb

    from keras_vit.export import metadata

    model = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=3, class_names=["x", "y", "z"])
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape).astype("float32"))
    path = str(tmp_path / "vit.tflite")
    model.export(path, format="litert", verbose=False, _experimental_use_buffer_offset=True)
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    want = to_numpy(model.predict(images, verbose=0))
    for _ in range(2):
        flatbuffer = schema_fb.Model.GetRootAs(pathlib.Path(path).read_bytes(), 0)
        assert any(flatbuffer.Buffers(i).Offset() > 1 for i in range(flatbuffer.BuffersLength()))
        names = [flatbuffer.Metadata(i).Name() for i in range(flatbuffer.MetadataLength())]
        assert b"buffer_location" in names and names.count(b"class_names") == names.count(b"keras_vit") == 1
        assert class_names(path) == ["x", "y", "z"]
        np.testing.assert_allclose(run_exported("litert", path, images), want, atol=1e-4, rtol=1e-4)
        metadata.write(path, "litert", model, preprocessing=False)


def test_what_an_artifact_with_preprocessing_cannot_be_is_refused(tmp_path, capsys):
    from keras_vit.cli import main

    tiny = dict(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16)
    model = ViT(**tiny, num_classes=3)
    out = str(tmp_path / "vit.onnx")
    for call, error, message in (
            (dict(preprocessing="yes"), TypeError, r"`preprocessing` must be True or False, got 'yes'"),
            (dict(dynamic_image_size=1), TypeError, r"`dynamic_image_size` must be True or False, got 1"),
            (dict(dynamic_image_size=True, resample_method="nearest"), ValueError,
             r"resample_method='nearest' is not one of \('bilinear', 'bicubic', 'dinov2', 'cpe'\)"),
            (dict(resample_method="bicubic"), ValueError,
             r"resample_method='bicubic' is used by dynamic_image_size=True without preprocessing"),
            (dict(dynamic_image_size=True, input_signature=model.export_signature()), ValueError,
             r"dynamic_image_size=True fixes the artifact's input .* leave input_signature out"),
            (dict(preprocessing=True, input_signature=model.export_signature()), ValueError,
             r"preprocessing=True fixes the artifact's input .* leave input_signature out"),
            # An argument the route would drop without a word is named.
            (dict(strict=False, opset_version=18), TypeError,
             rf"An export to onnx from {BACKEND} does not use strict: it takes opset_version besides "
             r"ViT.export's own argument. Nothing was exported."),
    ):
        with pytest.raises(error, match=message):
            model.export(out, format="onnx", **call)
    for other, message in ((ViT(**tiny, num_classes=0), r"has no classification head"),
                           (model.with_naflex(16), r"is a NaFlex model: it takes patch sequences")):
        with pytest.raises(ValueError, match=message):
            other.export(out, format="onnx", preprocessing=True)
    for other, message in ((model.with_naflex(16), r"is a NaFlex model: it takes images of any size already"),
                           (ViT(**{**tiny, "patch_size": 1}, resnet_block_units=(1,)), r"is a hybrid")):
        with pytest.raises(ValueError, match=message):
            other.export(out, format="onnx", dynamic_image_size=True)
    with pytest.raises(ValueError, match=r"has rotary position embeddings, which LiteRT's converter turns"):
        ViT(**tiny, position_embedding="rope").export(str(tmp_path / "vit.tflite"), format="litert",
                                                      dynamic_image_size=True)
    with pytest.raises(ValueError, match=r"calibration_images are float32 of shape \(4, 16, 16, 3\)\. With "
                       r"preprocessing=True the calibration images are raw pixels .* uint8"):
        model.export(out, format="onnx", quantize="int8", preprocessing=True,
                     calibration_images=np.zeros((4, 16, 16, 3), "float32"))
    assert not os.path.exists(out)
    model.with_naflex(16).save(tmp_path / "m.keras")
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path / "m.keras"), out, "--format", "onnx", "--dynamic-image-size"])
    assert exit_info.value.code == 2
    assert re.search(r"keras-vit export: error: \w+ is a NaFlex model: it takes images of any size already",
                     capsys.readouterr().err)


# DINOv3's options: rotary position embeddings, four registers, LayerScale, a key without bias.
DINOV3_TINY = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                   num_classes=5, position_embedding="rope", key_bias=False, num_registers=4,
                   layer_scale_init=1.0, layer_norm_epsilon=1e-5, gelu_approximate=False)
EXPORT_FORMAT = {"tensorflow": "tf_saved_model", "jax": "tf_saved_model", "torch": "onnx"}


@pytest.mark.slow
def test_dinov3_options_quantize_adapt_export_and_save(tmp_path):
    """DINOv3's options go through Keras's features as every other option:
    a `.keras` round trip, int8 quantization, LoRA, and export in the
    backend's format, each with the float model's numbers."""
    model = ViT(**DINOV3_TINY)
    rng = np.random.default_rng(0)
    for variable in model.weights:  # every weight random, the head's too
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    x = rng.uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    full = logits_of(model, x)
    np.testing.assert_allclose(logits_of(save_and_reload(model, tmp_path), x), full, atol=1e-6)

    quantized = copy_of(model)
    quantized.quantize("int8")
    error = np.abs(logits_of(quantized, x) - full).max() / (full.max() - full.min())
    assert error < QUANTIZATION["int8"], error

    adapted = copy_of(model)
    adapted.enable_lora(2)
    assert len([v for v in adapted.trainable_weights if "lora_kernel" in v.path]) == 2 * 6 * 2
    adapted.compile(optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    adapted.fit(x, np.arange(8) % 5, batch_size=8, epochs=1, verbose=0)
    tuned = logits_of(adapted, x)
    assert np.abs(tuned - full).max() > 1e-3
    np.testing.assert_allclose(logits_of(adapted.merge_lora(), x), tuned, rtol=1e-4, atol=1e-4)

    fmt = EXPORT_FORMAT[BACKEND]
    path = str(tmp_path / ("saved" if fmt == "tf_saved_model" else "vit.onnx"))
    model.export(path, format=fmt, verbose=False)
    np.testing.assert_allclose(np.asarray(run_exported(fmt, path, x[:3])), full[:3], atol=1e-4,
                               rtol=1e-4)


@pytest.mark.backend_independent
def test_openvino_default_precision_follows_the_cpu():
    """What docs/deploy.md says: OpenVINO's CPU plugin infers in bfloat16 by
    default exactly where the CPU has bfloat16 units (AVX-512 BF16, AMX)."""
    import openvino

    core = openvino.Core()
    has_bf16 = cpu_has_bfloat16_units()
    default = str(core.get_property("CPU", "INFERENCE_PRECISION_HINT"))
    print(f"CPU bfloat16 units: {has_bf16}; OpenVINO's default precision: {default}")
    assert ("bf16" in default or "bfloat16" in default) == has_bf16, default
    assert ("BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")) == has_bf16


@pytest.mark.slow
def test_export_command_writes_an_artifact_or_names_the_backend(tmp_path, capsys):
    from keras_vit.cli import main

    model = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                num_classes=3)
    model.save(tmp_path / "m.keras")
    images = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype("float32")
    assert main(["export", str(tmp_path / "m.keras"), str(tmp_path / "m.onnx"), "--format", "onnx"]) == 0
    assert f"wrote {tmp_path / 'm.onnx'}: onnx from {BACKEND}" in capsys.readouterr().out
    np.testing.assert_allclose(run_exported("onnx", str(tmp_path / "m.onnx"), images),
                               to_numpy(model.predict(images, verbose=0)), atol=1e-4, rtol=1e-4)
    refused = next(f for f, backends in FORMATS.items() if BACKEND not in backends)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(tmp_path / "m.keras"), str(tmp_path / "x"), "--format", refused])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(f"keras-vit export: error: Keras exports {refused} from the ") and \
        f"not from {BACKEND}: run with KERAS_BACKEND=" in error, error
