"""Checks that every keras_vit layer and model must pass, done one way."""

import importlib

import keras
import numpy as np
import pytest


def cpu_has_bfloat16_units():
    """Whether the CPU multiplies bfloat16 in hardware (`avx512_bf16` or
    `amx_bf16` in /proc/cpuinfo; on other CPUs bfloat16 is emulated)."""
    try:
        with open("/proc/cpuinfo") as file:
            flags = file.read().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


# The tiny ViT most tests build: 2 blocks of D 16 over a 4x4 grid of 8-px patches.
TINY = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=5)
# The demo's architecture (the `digits` config: ViT-Ti/16's code, 4 blocks of
# D 64, patch 4) at 16 px, the size the demo pre-trains at: 16 patches and the
# [class] token, 17 tokens, the odd length of the real models.
DIGITS_MODEL = dict(image_size=16, patch_size=4, num_layers=4, num_heads=4, hidden_dim=64, mlp_dim=128,
                    num_classes=10)
# Keras core augmentations, and the digits stream of test_data and test_cross_backend: 100
# digits in batches of 32, so batch 3 holds the last 4 of epoch 0 and the first 28 of epoch 1.
AUGMENT = dict(randaugment=(1, 10), mixup=0.5, cutmix=1.0)
AUGMENTED = dict(source="digits", split="train[:100]", image_size=16, batch_size=32, training=True, **AUGMENT)
# The `digits` recipe's model shrunk to one block, for the runs of test_recipes and
# test_failures: as `model_args`, and as the command line's --model-args.
TINY_RUN_MODEL = dict(num_layers=1, hidden_dim=16, num_heads=2, mlp_dim=32, patch_size=4)
# Their run: 4 updates of 16 images, checkpointed every 2 (`tiny_run_config`, `run_flags`).
TINY_RUN = dict(steps=4, warmup_steps=1, batch_size=16, checkpoint_every=2)
# The one-block ViT of test_evaluation's features and few-shot probes: D 8 over 4x4 patches.
TINY_FEATURES = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                     num_classes=3)
# The backbone test_masked_patch pre-trains (no head: the task adds its own).
MASKED_PATCH_BACKBONE = dict(image_size=16, patch_size=4, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)


class LazyModule:
    """A module imported at its first attribute read; missing, the test that
    reads it is skipped with `reason` (``pytest.importorskip``), or fails
    where there is none. Test files that compare with PyTorch,
    transformers and keras-hub name them at the top; with this only the
    worker that runs those tests imports them, not every worker that
    collects the file (10-12 s of each TensorFlow and JAX worker's
    collection went to torch, sympy and transformers, 1.7 s to keras-hub)."""

    def __init__(self, name, reason=None):
        self._name, self._reason = name, reason

    def __getattr__(self, attr):
        if attr.startswith("_"):  # introspection (pytest's __test__, mock's _mock_name) imports nothing
            raise AttributeError(attr)
        if self._reason is None:
            return getattr(importlib.import_module(self._name), attr)
        return getattr(pytest.importorskip(self._name, reason=self._reason), attr)


def tiny_run_config(**overrides):
    """The `digits` recipe as a `RunConfig` of 4 updates of 16 images at 16 px
    on `TINY_RUN_MODEL`, checkpointed every 2, without few-shot probes."""
    from keras_vit.training import resolve_config

    return resolve_config("digits", {**TINY_RUN, "image_size": 16, "few_shot": [],
                                     "model_args": TINY_RUN_MODEL, **overrides})


def run_flags(**settings):
    """The recipes' command-line flags that set `settings` (`RunConfig`
    fields), each spelled by its row of `keras_vit.training.configs.FLAGS`."""
    from keras_vit.training.configs import FLAGS

    argv = []
    for field, value in settings.items():
        if isinstance(value, dict):
            value = ",".join(f"{key}={item}" for key, item in value.items())
        elif isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        argv += [FLAGS[field].option, str(value)]
    return argv


TINY_RUN_ARGS = run_flags(model_args=TINY_RUN_MODEL)


def to_numpy(x):
    return keras.ops.convert_to_numpy(x)


def run_layer_test(layer_cls, init_kwargs, input_data, expected_output_shape, tmp_path,
                   call_kwargs=None):
    """Build, call, shape inference, config and serialization round trips,
    and a .keras save/reload (safe_mode) that gives the same outputs.

    Returns the layer and its output on `input_data`.
    """
    call_kwargs = call_kwargs or {}
    layer = layer_cls(**init_kwargs)
    output = layer(input_data, **call_kwargs)
    assert tuple(output.shape) == tuple(expected_output_shape)
    assert tuple(layer.compute_output_shape(tuple(input_data.shape))) == tuple(expected_output_shape)

    config = layer.get_config()
    for key, value in init_kwargs.items():
        if isinstance(value, (dict, keras.initializers.Initializer)):
            continue
        restored = config[key]
        if isinstance(value, (list, tuple)):
            value, restored = tuple(value), tuple(restored)
        assert restored == value, f"get_config()[{key!r}] = {restored!r}, expected {value!r}"
    assert layer_cls.from_config(config).get_config() == config
    assert type(keras.layers.deserialize(keras.layers.serialize(layer))) is layer_cls

    inputs = keras.Input(shape=input_data.shape[1:])
    model = keras.Model(inputs, layer(inputs, **call_kwargs))
    reloaded = save_and_reload(model, tmp_path)
    np.testing.assert_allclose(to_numpy(reloaded(input_data)), to_numpy(output), atol=1e-6)
    return layer, to_numpy(output)


def save_and_reload(model, tmp_path, name="model.keras"):
    path = str(tmp_path / name)
    model.save(path)
    return keras.saving.load_model(path, safe_mode=True)


def value_and_gradient(f, x, w):
    """(f(x), d sum(f(x) * w) / dx) as float64 arrays, through the backend's autodiff."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf
        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
            loss = tf.reduce_sum(tf.cast(y, "float32") * w)
        g = tape.gradient(loss, x)
    elif backend == "jax":
        import jax
        # f runs once eagerly (building the layers it calls), the gradient as
        # one compiled program, as in training: op by op, JAX compiles every
        # primitive of the backward pass for its shapes (seconds per call).
        y = f(x)
        g = jax.jit(jax.grad(lambda x: (f(x).astype("float32") * w).sum()))(x)
    else:
        # On Keras's device (a GPU where torch has one), as the layers' weights.
        x = keras.ops.convert_to_tensor(x).requires_grad_()
        y = f(x)
        (y.float() * keras.ops.convert_to_tensor(w)).sum().backward()
        g = x.grad
    return to_numpy(keras.ops.cast(y, "float32")).astype("float64"), to_numpy(keras.ops.cast(g, "float32")).astype("float64")


def fails(argv, capsys, message):
    """Runs the ``keras-vit`` command `argv`, which must exit with status 2
    and print `message` on stderr; returns its stderr."""
    from keras_vit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    return err
