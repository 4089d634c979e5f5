"""``ViT.from_checkpoint``: a checkpoint found or downloaded, read, and built into a model."""

from keras_vit.assign import build_model
from keras_vit.released import imagenet1k_class_names
from keras_vit.released import locate
from keras_vit.weights.formats import read_checkpoint


def load_checkpoint(cls, location, image_size=None, num_classes=None,
                    resample_method=None, **overrides):
    """``ViT.from_checkpoint``: find or download the file, read it, build the
    model and load it.

    Examples:
        A small model written as a vit_jax ``.npz`` file, then read back:

        ```python
        from keras_vit import ViT
        from keras_vit.weights import build_model, load_checkpoint, read_checkpoint

        source = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16,
                     mlp_dim=32, num_classes=5)
        source.save_checkpoint("tiny_vit.npz", checkpoint_format="npz")
        model = load_checkpoint(ViT, "tiny_vit.npz")

        # The same in two steps: read the file, then build the model.
        checkpoint = read_checkpoint("tiny_vit.npz")
        print(checkpoint.source)       # -> vit_jax checkpoint tiny_vit.npz
        print(checkpoint.grid_size)    # -> (4, 4)
        print({k: checkpoint.config[k] for k in ("image_size", "patch_size", "num_heads", "pooling")})
        # -> {'image_size': (32, 32), 'patch_size': (8, 8), 'num_heads': 2, 'pooling': 'token'}
        model = build_model(ViT, checkpoint, image_size=48, num_classes=3, drop_path_rate=0.1)
        print(model.grid_size, model.num_classes)   # -> (6, 6) 3
        ```
    """
    path, entry = locate(location)
    checkpoint = read_checkpoint(path, num_heads=overrides.get("num_heads"))
    if entry is not None and entry.class_names == "imagenet1k" and "class_names" not in checkpoint.config:
        checkpoint.config["class_names"] = imagenet1k_class_names()
    model = build_model(cls, checkpoint, image_size, num_classes, resample_method, **overrides)
    model.weights_source = str(location)  # the base an adapter file names (`keras_vit.adapters`)
    return model
