"""Token merging (ToMe; `ViT(token_merging=r)`, `ViT.with_token_merging`)
against ToMe's own code, on every backend: the logits of `tome.patch.timm`
on three small timm models (a [class] token; DeiT's [class] and
distillation tokens; average pooling and neither) at r = 4, 8, 16 and a
per-block list, and its source tracking; then what a merging model must
keep: training, `.keras` files, exports with a free batch, quantization and
the int8 export, and the digits' accuracy. The fixtures are made by
tests/data/make_tome_fixtures.py (timm 1.0.31, ToMe); no test imports them."""

import os

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import ViT

BACKEND = keras.backend.backend()
DATA = os.path.join(os.path.dirname(__file__), "data", "tome")
SCHEDULES = {"4": 4, "8": 8, "16": 16, "list": [12, 0, 6]}  # as the fixtures were made
EXPORTS = {"onnx": ("tensorflow", "jax", "torch"), "openvino": ("tensorflow", "torch"),
           "tf_saved_model": ("tensorflow", "jax"), "torch": ("torch",)}  # and Keras 3.15 exports them


@pytest.fixture(scope="module")
def tome():
    return dict(np.load(os.path.join(DATA, "tome.npz")))


MODELS = ("vit", "deit", "gap")


@pytest.fixture(scope="module")
def tome_models():
    """The three timm models, each read once for the file."""
    return {name: ViT.from_checkpoint(os.path.join(DATA, name)) for name in MODELS}


# One merging model (a [class] token, r = 8) in the fast tier; the rest in `make test-slow`.
@pytest.mark.slow_cases(*(f"{name}-{label}" for name in MODELS for label in SCHEDULES if (name, label) != ("vit", "8")))
@pytest.mark.parametrize("name, label", [(name, label) for name in MODELS for label in SCHEDULES],
                         ids=[f"{name}-{label}" for name in MODELS for label in SCHEDULES])
def test_the_logits_are_tomes(name, label, tome, tome_models):
    """``with_token_merging(r)`` gives ToMe's logits within 1e-4 through the
    compiled ``predict``, and called eagerly at r = 16."""
    r = SCHEDULES[label]
    merging = tome_models[name].with_token_merging(r)
    want = tome[f"{name}/r{label}"]
    assert np.abs(want - tome[f"{name}/r0"]).max() > 1e-2, "merging must change these logits"
    np.testing.assert_allclose(merging.predict(tome["images"], verbose=0), want, atol=1e-4, err_msg=label)
    if r == 16:
        np.testing.assert_allclose(to_numpy(merging(tome["images"])), want, atol=1e-4, err_msg=label)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_r0_is_the_model_itself_and_timms_logits(name, tome, tome_models):
    """The model with r = 0 is the model itself; a merging model given
    r = 0 again is unmerged, with timm's logits."""
    model = tome_models[name]
    assert model.with_token_merging(0) is model
    unmerged = model.with_token_merging(SCHEDULES["list"]).with_token_merging(0)
    assert unmerged.config.token_merging == 0
    np.testing.assert_allclose(unmerged.predict(tome["images"], verbose=0), tome[f"{name}/r0"], atol=1e-4)


@pytest.mark.slow
def test_source_tracking_is_tomes(tome):
    """The sources recorded at r = 8 are ToMe's ``trace_source`` exactly, and
    `token_merging_groups` reads each patch's token off them as ToMe's
    picture does."""
    from keras_vit import explain

    model = ViT.from_checkpoint(os.path.join(DATA, "vit")).with_token_merging(8)
    sources = to_numpy(model.intermediates(tome["images"])["token_sources"])
    np.testing.assert_array_equal(sources, tome["vit/r8/source"])
    groups = explain.token_merging_groups(model, tome["images"])  # the same batch: JAX's eager ops compiled once
    assert groups.shape == (4, 7, 7)
    np.testing.assert_array_equal(groups.reshape(4, -1), tome["vit/r8/source"][:, 1:, 1:].argmax(1))


def small_merging_model(drawn=True, **options):
    """65 tokens merged to 57, then 53, in timm's blocks (the exact GELU);
    its weights drawn from N(0, 0.5), or the initial ones."""
    model = ViT(image_size=32, patch_size=4, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=5, class_names=list("abcde"), token_merging=[8, 4], gelu_approximate=False,
                **options)
    if drawn:
        rng = np.random.default_rng(1)
        model.set_weights([rng.normal(size=w.shape).astype("float32") * 0.5 for w in model.get_weights()])
    return model


@pytest.mark.slow
def test_a_merging_model_trains_through_the_merging_and_reloads(tmp_path):
    """``fit`` on 16 images of 5 patterns: the loss falls by half, and every
    kernel moves, the blocks' before and after their merging; the `.keras`
    file reloads after ``import keras_vit`` with its token merging and its
    logits."""
    model = small_merging_model(drawn=False, proportional_attention=False)
    rng = np.random.default_rng(0)
    y = np.arange(16) % 5
    x = (rng.normal(size=(5, 32, 32, 3))[y] + 0.3 * rng.normal(size=(16, 32, 32, 3))).astype("float32")
    before = {w.path: to_numpy(w.value) for w in model.trainable_weights}
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    losses = model.fit(x, y, epochs=8, batch_size=8, verbose=0).history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    still = [w.path for w in model.trainable_weights
             if w.path.endswith("kernel") and np.array_equal(before[w.path], to_numpy(w.value))]
    assert not still, f"no gradient reached {still}"
    path = tmp_path / "merging.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.config.token_merging == (8, 4) and reloaded.config.proportional_attention is False
    np.testing.assert_allclose(to_numpy(reloaded(x)), to_numpy(model(x)), atol=1e-6)


@pytest.mark.parametrize("fmt", list(EXPORTS))
@pytest.mark.slow_cases("onnx", "openvino", "torch")  # the SavedModel: the fast tier's export on JAX
def test_an_export_keeps_the_merging_with_a_free_batch(fmt, tmp_path):
    """Exported from each backend that Keras exports the format from, the
    artifact gives the model's logits at batches of 3 and 1 in its runtime
    (its exact GELU too: ONNX from TensorFlow writes it with Erf)."""
    from keras_vit.export import runtime

    if BACKEND not in EXPORTS[fmt]:
        pytest.skip(f"Keras 3.15 exports {fmt} from {', '.join(EXPORTS[fmt])}"
                    + (" (JAX's goes through jax2tf, which OpenVINO cannot read: tests/test_keras_features.py)"
                       if fmt == "openvino" else ""))
    model = small_merging_model()
    path = str(tmp_path / {"onnx": "vit.onnx", "openvino": "vit.xml", "tf_saved_model": "saved",
                           "torch": "vit.pt2"}[fmt])
    model.export(path, format=fmt, verbose=False)
    run = runtime.load(path)
    images = np.random.default_rng(2).normal(size=(3, 32, 32, 3)).astype("float32")
    want = to_numpy(model(images))
    for batch in (images, images[:1]):
        np.testing.assert_allclose(run(batch)["logits"], want[:len(batch)], atol=1e-5)


@pytest.mark.slow
def test_merging_keeps_the_digits_quantized_and_exported_in_int8(trained_digits, tmp_path):
    """The demo's digits model (16 px, 16 patches and a [class] token), with
    2 tokens merged in each of its 4 blocks (17 -> 9 tokens), stays within 1
    point of its held-out accuracy; quantized to int8 by Keras, and exported
    as onnxruntime's dynamic int8, it gives the merging float32 model's
    class on at least 98% of the 360 held-out digits."""
    from keras_vit.export import runtime

    model, _, (x_test, y_test) = trained_digits
    full = to_numpy(model.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1)
    merging = model.with_token_merging(2)
    assert (model.block_tokens(), merging.block_tokens()) == ([17] * 4, [15, 13, 11, 9])
    merged = to_numpy(merging.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1)
    accuracy, merged_accuracy = (full == y_test).mean(), (merged == y_test).mean()
    print(f"{BACKEND} digits: held-out accuracy {accuracy:.3f}, with r=2 {merged_accuracy:.3f}")
    assert merged_accuracy >= accuracy - 0.01
    path = str(tmp_path / "vit_int8.onnx")
    merging.export(path, format="onnx", quantize="int8")
    exported = np.asarray(runtime.load(path)(x_test)["logits"]).argmax(-1)
    merging.quantize("int8")
    quantized = to_numpy(merging.predict(x_test, batch_size=len(x_test), verbose=0)).argmax(-1)
    for route, classes in (("quantize('int8')", quantized), ("onnx dynamic int8", exported)):
        agreement = (classes == merged).mean()
        print(f"{BACKEND} r=2, {route}: top-1 agreement {agreement:.2%}")
        assert agreement >= 0.98, (route, agreement)


@pytest.mark.backend_independent
def test_where_merging_cannot_work_it_says_why_and_what_to_use(tmp_path):
    """Bad counts, NaFlex, rotary embeddings, a free image size, dense maps
    and the attention pictures are refused, each naming what to use."""
    from keras_vit import explain

    small = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)
    for bad, message in ((-1, "an int >= 0"), ([1, 2, 3], "at most 2"), (1.5, "an int >= 0"),
                         (True, "an int >= 0")):
        with pytest.raises(ValueError, match=message):
            ViT(**small, token_merging=bad)
    with pytest.raises(ValueError, match=r"NaFlex inputs .* padding .* Use token_merging=0"):
        ViT(**small, naflex=True, max_num_patches=16, token_merging=2)
    with pytest.raises(ValueError, match=r"rotary position embeddings .* Use token_merging=0"):
        ViT(**small, position_embedding="rope", token_merging=2)
    model = ViT(**small, token_merging=2)
    with pytest.raises(ValueError, match=r"dynamic_image_size=True .* Export `model.with_image_size"):
        model.export(str(tmp_path / "vit.onnx"), format="onnx", dynamic_image_size=True)
    assert not os.listdir(tmp_path)
    with pytest.raises(ValueError, match=r"feature_model .* `model.with_token_merging\(0\)`"):
        model.feature_model()
    images = np.zeros((1, 32, 32, 3), "float32")
    with pytest.raises(ValueError, match=r"attention_weights .* `model.with_token_merging\(0\)`"):
        explain.attention_rollout(model, images)
    with pytest.raises(ValueError, match=r"merges no tokens .* `model.with_token_merging\(r\)`"):
        explain.token_merging_groups(model.with_token_merging(0), images)
