"""keras-hub's backbone checks and Keras's layer checks, run on keras_vit
through their own test cases (`keras_hub.src.tests.test_case.TestCase`,
`keras.src.testing.TestCase`), not a copy, so that their next release checks
us too.

- `ViT` in five families (plain, DINOv2 with registers, DINOv3 with RoPE,
  MAP pooling, the ResNet hybrid), and both towers of `ImageTextModel`: the
  steps of keras-hub's ``run_vision_backbone_test`` (serialization, eager and
  compiled ``predict`` on NumPy and on ``tf.data``, mixed precision with
  ``compute_output_spec`` on every sublayer, quantization through a
  ``DTypePolicyMap``, the ``.keras`` round trip), in channels_last; in
  channels_first every check on the families whose layers read the layout
  (`CHANNELS_FIRST_CHECKED`), and the same numbers on all.
- Every public layer of `keras_vit.layers` through Keras's ``run_layer_test``
  (build, symbolic and eager call, a training step, mixed precision,
  serialization).

Mixed precision runs on PyTorch's CPU too: both harnesses skip it there
unless ``torch.cuda.is_available()``, and `mixed_precision_on_every_device`
makes that gate true for the check alone. A check that cannot apply is
skipped with its reason printed (`skip`).
"""

import contextlib
import unittest.mock

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import TINY
from keras.src.testing import TestCase as KerasTestCase
from keras_hub.src.tests.test_case import TestCase as HubTestCase

from keras_vit import ImageTextModel
from keras_vit import ViT
from keras_vit import layers
from keras_vit.config import BlockOptions
from keras_vit.image_text import TextTransformer

BACKEND = keras.backend.backend()

# keras-hub's ``run_backbone_test`` as a whole asserts two conventions of
# keras-hub's own `Backbone` class that are not about the model: a
# ``token_embedding`` attribute, and a model name made from the class name
# (``ViT`` -> ``vi_t``). The checks it runs are called one by one below.
FAMILIES = {
    "plain": TINY,
    "dinov2_registers": dict(TINY, num_registers=2, layer_scale_init=0.1, mlp_activation="swiglu",
                             mlp_dim=24),
    "dinov3_rope": dict(TINY, position_embedding="rope", key_bias=False, num_registers=4,
                        layer_scale_init=1.0),
    "map_pooling": dict(TINY, pooling="map"),
    "hybrid": dict(TINY, image_size=32, patch_size=1, resnet_block_units=(1, 1)),
    # The image tower of CLIP (pre-norm, no patch bias, projection, normalized features).
    "clip_image_tower": dict(TINY, num_classes=0, norm_pre=True, patch_bias=False,
                             mlp_activation="quick_gelu", projection_dim=8),
}
# The layers that read the layout are the patch embedding and the ResNet
# stem: every check runs on these two in channels_first too; the other
# families are checked there for the same numbers as in channels_last.
CHANNELS_FIRST_CHECKED = ("plain", "hybrid")
TEXT_TOWER = dict(vocab_size=50, context_length=8, hidden_dim=16, num_layers=2, num_heads=2,
                  mlp_dim=32, projection_dim=8, eos_token_id=49)


def skip(reason):
    """Skips the running test with `reason`, printed in the log too."""
    print(f"SKIPPED: {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def mixed_precision_on_every_device():
    """Both harnesses run their mixed-precision checks on PyTorch only when
    ``torch.cuda.is_available()``; PyTorch computes float16 and bfloat16 on
    its CPU as well, so within this block that gate says yes. Keras chose
    the device when it was imported, so nothing moves to a GPU."""
    if BACKEND != "torch":
        yield
        return
    with unittest.mock.patch("torch.cuda.is_available", return_value=True):
        yield


def images(config, batch=2, seed=0, channels_first=False):
    size = config["image_size"]
    x = np.random.default_rng(seed).uniform(-1, 1, (batch, size, size, 3)).astype("float32")
    return x.transpose(0, 3, 1, 2) if channels_first else x


def token_ids(batch=2, seed=0):
    ids = np.random.default_rng(seed).integers(1, TEXT_TOWER["eos_token_id"],
                                               (batch, TEXT_TOWER["context_length"]))
    ids[:, -3:] = TEXT_TOWER["eos_token_id"]
    return ids.astype("int32")


class BackboneTest(HubTestCase):
    """keras-hub's checks of a backbone, on each family of `ViT` and on the text tower."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        print("SKIPPED (part): keras-hub's run_backbone_test as a whole asserts two conventions "
              "of keras-hub's own Backbone class (a token_embedding attribute; a model name made "
              "from the class name); the checks it runs are called one by one instead.")
        if BACKEND == "torch":
            print("SKIPPED (part): keras-hub's run_quantization_test returns at once on PyTorch "
                  "(a Keras 3.7 workaround); test_a_dtype_policy_map_model_saves_and_reloads "
                  "quantizes on PyTorch too.")

    def check_backbone(self, cls, init_kwargs, input_data, expected_shape):
        """The steps of keras-hub's ``run_backbone_test``, one by one."""
        model = cls(**init_kwargs)
        self.run_serialization_test(model)
        output = model(input_data)
        self.assertEqual(tuple(output.shape), expected_shape)
        spec = model.compute_output_spec(input_data)
        self.assertEqual(tuple(spec.shape), expected_shape)
        self.assertAllClose(model.predict(input_data, verbose=0), output, atol=1e-5, rtol=1e-5)
        dataset = tf.data.Dataset.from_tensor_slices(input_data).batch(2)
        self.assertAllClose(model.predict(dataset, verbose=0), output, atol=1e-5, rtol=1e-5)
        with mixed_precision_on_every_device():
            self.run_precision_test(cls, dict(init_kwargs), input_data)
        self.run_quantization_test(model, cls, dict(init_kwargs), input_data)
        self.run_model_saving_test(cls, dict(init_kwargs), input_data, atol=1e-5, rtol=1e-5)
        return model, output

    @pytest.mark.slow
    def test_vit_families_in_both_data_formats(self):
        for family, config in FAMILIES.items():
            with self.subTest(family=family):
                model, output = self.check_backbone(
                    ViT, dict(config), images(config), (2, *ViT(**config).output.shape[1:]))
                first = dict(config, data_format="channels_first")
                if family in CHANNELS_FIRST_CHECKED:
                    self.check_backbone(ViT, first, images(config, channels_first=True),
                                        tuple(output.shape))
                # The same weights give the same numbers in either layout.
                twin = ViT(**first)
                twin.set_weights(model.get_weights())
                self.assertAllClose(twin(images(config, channels_first=True)), output,
                                    atol=1e-5, rtol=1e-5)

    @pytest.mark.slow
    def test_text_tower(self):
        self.check_backbone(TextTransformer, dict(TEXT_TOWER), token_ids(),
                            (2, TEXT_TOWER["projection_dim"]))


def test_image_text_model_compute_output_spec_on_arrays_and_keras_tensors():
    image_tower = ViT(**FAMILIES["clip_image_tower"])
    model = ImageTextModel(image_tower, TextTransformer(**TEXT_TOWER))
    x, ids = images(FAMILIES["clip_image_tower"]), token_ids()
    expected = tuple(model({"images": x, "token_ids": ids}).shape)
    assert tuple(model.compute_output_spec({"images": x, "token_ids": ids}).shape) == expected
    symbolic = {"images": keras.KerasTensor(x.shape),
                "token_ids": keras.KerasTensor(ids.shape, dtype="int32")}
    assert tuple(model.compute_output_spec(symbolic).shape) == expected


@pytest.mark.parametrize("mode", ["int8", "float8", "int4", "mixed"])
@pytest.mark.slow_cases("int4")
def test_a_dtype_policy_map_model_saves_and_reloads(mode, tmp_path):
    """keras-hub's way to build a quantized model without computing: a
    ``DTypePolicyMap`` of quantized policies by layer path. It gives its
    config, saves, loads, and gives the same numbers (after the weights are
    set, since the map quantizes at construction)."""
    config = FAMILIES["dinov2_registers"]
    float_model = ViT(**config)
    quantized = {"int8": "int8_from_float32", "float8": "float8_from_float32",
                 "int4": "int4_from_float32"}
    policy_map = keras.dtype_policies.DTypePolicyMap("float32")
    for i, path in enumerate(sorted(layer.path for layer in float_model._flatten_layers()
                                    if type(layer) is keras.layers.Dense
                                    or type(layer) is keras.layers.EinsumDense)):
        policy = quantized["int8" if i % 2 else "float8"] if mode == "mixed" else quantized[mode]
        policy_map[path] = keras.dtype_policies.get(policy)
    model = ViT(**config, dtype=policy_map)
    assert {layer.quantization_mode for layer in model._flatten_layers()
            if layer.path in policy_map} == ({"int8", "float8"} if mode == "mixed" else {mode})
    x = images(config)
    logits = keras.ops.convert_to_numpy(model(x))
    assert model.from_config(model.get_config()).get_config() == model.get_config()
    path = tmp_path / "quantized.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.get_config() == model.get_config()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(reloaded(x)), logits, atol=1e-5)


# -- Keras's run_layer_test on every public layer --------------------------------

def _rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


# name: (init_kwargs, input_data, call_kwargs, expected_output_shape)
LAYER_CASES = {
    "PatchEmbedding": (dict(hidden_dim=8, patch_size=4), _rand(2, 8, 12, 3), None, (2, 6, 8)),
    "ClassToken": (dict(num_tokens=2), _rand(2, 5, 8), None, (2, 7, 8)),
    "DropPath": (dict(rate=0.5, seed=1), _rand(2, 5, 8), None, (2, 5, 8)),
    "LayerNormalization": (dict(epsilon=1e-6), _rand(2, 5, 8), None, (2, 5, 8)),
    "MlpBlock": (dict(options=BlockOptions(mlp_dim=16)), _rand(2, 5, 8), None, (2, 5, 8)),
    "MultiHeadDotProductAttention": (dict(options=BlockOptions(num_heads=2)), _rand(2, 5, 8), None, (2, 5, 8)),
    "MultiHeadAttentionPooling": (dict(num_heads=2, mlp_dim=16), _rand(2, 5, 8), None, (2, 8)),
    "PositionEmbedding": (dict(grid_size=(2, 2), num_prefix_tokens=1), _rand(2, 5, 8), None,
                          (2, 5, 8)),
    "RotaryPositionEmbedding": (dict(grid_size=(2, 2), num_prefix_tokens=1),
                                _rand(2, 5, 2, 8), None, (2, 5, 2, 8)),
    "TokenPooling": (dict(mode="gap", num_prefix_tokens=1), _rand(2, 5, 8), None, (2, 8)),
    "VisualPrompts": (dict(num_tokens=3, depth=2, num_prefix_tokens=1, dropout_rate=0.1, seed=1),
                      _rand(2, 5, 8), None, (2, 8, 8)),
    "LinearSegmentationHead": (dict(num_classes=3, image_size=(8, 12)), _rand(2, 2, 3, 8), None,
                               (2, 8, 12, 3)),
    "TokenMap": (dict(num_prefix_tokens=1, grid_size=(2, 2), data_format="channels_first"),
                 _rand(2, 5, 8), None, (2, 8, 2, 2)),
    "TransformerEncoder": (dict(options=BlockOptions(num_heads=2, mlp_dim=16)), _rand(2, 5, 8), None, (2, 5, 8)),
    "StandardizedConv2D": (dict(filters=4, kernel_size=3, padding="same"), _rand(2, 8, 8, 3),
                           None, (2, 8, 8, 4)),
    "BottleneckUnit": (dict(width=32, strides=2), _rand(2, 8, 8, 16), None, (2, 4, 4, 128)),
    "ResNetStem": (dict(block_units=(1, 1)), _rand(2, 32, 32, 3), None, (2, 4, 4, 512)),
    "TextEmbedding": (dict(vocab_size=20, context_length=6, hidden_dim=8),
                      np.arange(12, dtype="int32").reshape(2, 6), None, (2, 6, 8)),
    # Layers of several inputs are given shapes named after `call`'s
    # arguments (Keras makes the int inputs 0, 1 or 2: valid ids and indices).
    "TextPooling": (dict(mode="eos", eos_token_id=2),
                    ({"tokens_shape": (2, 6, 8), "token_ids_shape": (2, 6)},
                     {"tokens_shape": "float32", "token_ids_shape": "int32"}), None, (2, 8)),
    "PatchCorruption": (dict(), ({"patches_shape": (2, 4, 8), "corruption_shape": (2, 4),
                                  "replacement_shape": (2, 4)},
                                 {"patches_shape": "float32", "corruption_shape": "int32",
                                  "replacement_shape": "int32"}), None, (2, 4, 8)),
}


def test_every_public_layer_has_a_case():
    public = {name for name in layers.__all__ if isinstance(getattr(layers, name), type)}
    assert public == set(LAYER_CASES), public ^ set(LAYER_CASES)


class LayerTest(KerasTestCase):
    """Keras's ``run_layer_test`` on each public layer of `keras_vit.layers`."""

    @pytest.mark.slow
    def test_every_public_layer(self):
        for name, (init_kwargs, inputs, call_kwargs, shape) in LAYER_CASES.items():
            # Given as (shapes, dtypes) by argument: Keras's training check
            # wraps a layer in a model of one input, so it runs for the others.
            if isinstance(inputs, tuple):
                print(f"SKIPPED (part): {name}'s training step: Keras's run_layer_test trains "
                      "layers of one input only.")
                given = dict(input_shape=inputs[0], input_dtype=inputs[1], run_training_check=False)
            else:
                given = dict(input_data=inputs)
            with self.subTest(layer=name), mixed_precision_on_every_device():
                self.run_layer_test(getattr(layers, name), init_kwargs, call_kwargs=call_kwargs,
                                    expected_output_shape=shape, **given)
