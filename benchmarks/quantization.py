"""Quantization error of keras_vit against keras-hub's ViT, same shape, same inputs.

For each mode Keras offers on Dense/EinsumDense (int8, float8, int4), a
keras_vit ViT with random weights (exact GELU, as keras-hub) and keras-hub's
``ViTBackbone`` of the same shape holding the same weights (copied variable
by variable; their float outputs agree to 1e-4, checked) are quantized with
``model.quantize(mode)`` and run on the same images. Printed is the largest
error of the encoder's output tokens (keras_vit: ``encoder_norm``; keras-hub:
the backbone's output) relative to the float model's largest value, and the
ratio keras_vit / keras-hub, median over seeds. keras_vit's logits are checked
the same way in tests/test_keras_features.py.

    KERAS_BACKEND=jax .venv/bin/python benchmarks/quantization.py

Needs keras-hub (`make bench` installs it).
"""

import argparse

import keras
import numpy as np


def relative_error(model, mode, images):
    full = keras.ops.convert_to_numpy(model(images))
    model.quantize(mode)
    low = keras.ops.convert_to_numpy(model(images))
    return float(np.abs(low - full).max() / np.abs(full).max()), full


def same_weights(ours, hub):
    """Copies keras_vit's variables into keras-hub's backbone: the same order
    but for the class token, which keras-hub keeps first."""
    source = list(ours.weights)
    source = [source[2]] + source[:2] + source[3:]  # class token, patch kernel, bias, ...
    for theirs, mine in zip(hub.weights, source, strict=True):
        theirs.assign(np.reshape(keras.ops.convert_to_numpy(mine), theirs.shape))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="int8,float8,int4")
    parser.add_argument("--seeds", type=int, default=3, help="models per mode (median reported)")
    args = parser.parse_args()
    import warnings

    import keras_hub

    from keras_vit import ViT

    shape = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64)
    images = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")

    def pair(seed):
        keras.utils.set_random_seed(seed)
        vit = ViT(**shape, num_classes=0, pooling="token", gelu_approximate=False)
        rng = np.random.default_rng(seed)
        for variable in vit.weights:  # biases, LayerNorms and tokens off their initial constants
            value = keras.ops.convert_to_numpy(variable)
            variable.assign(value + rng.normal(0, 0.1, value.shape).astype(value.dtype))
        ours = keras.Model(vit.input, vit.get_layer("encoder_norm").output)
        hub = keras_hub.models.ViTBackbone(
            image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
            mlp_dim=64)
        same_weights(vit, hub)
        return ours, hub

    print(f"backend {keras.backend.backend()}, keras {keras.__version__}, keras-hub {keras_hub.__version__}")
    print(f"{'mode':8s} {'keras_vit':>10s} {'keras-hub':>10s} {'ratio':>7s}")
    for mode in args.modes.split(","):
        runs = {"keras_vit": [], "keras_hub": []}
        for seed in range(args.seeds):
            models = dict(zip(runs, pair(seed)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results = {name: relative_error(model, mode, images) for name, model in models.items()}
            float_gap = np.abs(results["keras_vit"][1] - results["keras_hub"][1]).max()
            assert float_gap < 1e-4, f"the float models differ by {float_gap}: not the same weights"
            for name, (error, _) in results.items():
                runs[name].append(error)
        errors = {name: float(np.median(values)) for name, values in runs.items()}
        print(f"{mode:8s} {errors['keras_vit']:10.4f} {errors['keras_hub']:10.4f} "
              f"{errors['keras_vit'] / errors['keras_hub']:7.2f}")


if __name__ == "__main__":
    main()
