"""Quantization error of keras_vit against keras-hub's ViT, same shape, same inputs.

For each mode Keras offers on Dense/EinsumDense (int8, float8, int4), both
models are built at the same shape with random weights, quantized with
``model.quantize(mode)``, and run on the same images; printed is the largest
error of the encoder's output tokens (keras_vit: ``encoder_norm``;
keras-hub: ``ViTBackbone``'s output) relative to the float model's largest
value, and the ratio keras_vit / keras-hub. keras_vit's logits are checked
the same way in tests/test_keras_features.py.

    KERAS_BACKEND=jax .venv/bin/python benchmarks/quantization.py

Needs keras-hub (`make bench` installs it).
"""

import argparse

import keras
import numpy as np


def relative_error(build, mode, images):
    model = build()
    full = keras.ops.convert_to_numpy(model(images))
    model.quantize(mode)
    low = keras.ops.convert_to_numpy(model(images))
    return float(np.abs(low - full).max() / np.abs(full).max())


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

    def ours():
        vit = ViT(**shape, num_classes=0, pooling="token")
        return keras.Model(vit.input, vit.get_layer("encoder_norm").output)

    def hub():
        return keras_hub.models.ViTBackbone(
            image_shape=(32, 32, 3), patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
            mlp_dim=64)

    print(f"backend {keras.backend.backend()}, keras {keras.__version__}, keras-hub {keras_hub.__version__}")
    print(f"{'mode':8s} {'keras_vit':>10s} {'keras-hub':>10s} {'ratio':>7s}")
    for mode in args.modes.split(","):
        errors = {}
        for name, build in (("keras_vit", ours), ("keras_hub", hub)):
            runs = []
            for seed in range(args.seeds):
                keras.utils.set_random_seed(seed)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    runs.append(relative_error(build, mode, images))
            errors[name] = float(np.median(runs))
        print(f"{mode:8s} {errors['keras_vit']:10.4f} {errors['keras_hub']:10.4f} "
              f"{errors['keras_vit'] / errors['keras_hub']:7.2f}")


if __name__ == "__main__":
    main()
