"""`keras_vit.load_model`: one loader for a `.keras` file, a checkpoint, a
model in memory and the two-tower models, with the same resizing, the same
new head and the same refusals whatever the source."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import ImageTextModel
from keras_vit import ViT
from keras_vit import load_model

TINY = dict(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A DeiT-like tiny ViT (a distillation token and head) with random
    weights, saved as `.keras` and as a timm checkpoint, and 2 images."""
    folder = tmp_path_factory.mktemp("sources")
    keras.utils.set_random_seed(0)
    model = ViT(**TINY, num_classes=5, distillation=True)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype("float32"))
    model.save(folder / "model.keras")
    model.save_checkpoint(folder / "timm", checkpoint_format="timm")
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    return model, {"in memory": model, ".keras": folder / "model.keras", "timm": folder / "timm"}, images


@pytest.mark.slow
def test_every_source_loads_resized_with_a_new_head_the_same_way(sources):
    """As stored: the source's logits. At 48 px: the model's own resampling.
    With 3 classes: both heads (the distillation one too) new and zero, the
    rest kept. Overrides reach the model; a dtype of None is the source's."""
    model, named, images = sources
    logits = to_numpy(model(images))
    large = np.random.default_rng(1).uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    resized = to_numpy(model.with_image_size(48)(large))
    for what, source in named.items():
        as_stored = load_model(source, dtype=None)
        np.testing.assert_allclose(to_numpy(as_stored(images)), logits, atol=1e-5, err_msg=what)
        bigger = load_model(source, image_size=48)
        assert bigger.image_size == (48, 48), what
        np.testing.assert_allclose(to_numpy(bigger(large)), resized, atol=1e-4, err_msg=what)
        new_head = load_model(source, num_classes=3, dropout_rate=0.1)
        assert (new_head.num_classes, new_head.dropout_rate) == (3, 0.1), what
        for name in ("head", "head_dist"):
            assert not np.any(to_numpy(new_head.get_layer(name).kernel)), (what, name)
        np.testing.assert_allclose(to_numpy(new_head.get_layer("encoder_norm").gamma),
                                   to_numpy(model.get_layer("encoder_norm").gamma), err_msg=what)


def test_a_model_of_the_wrong_class_a_missing_file_and_a_change_a_model_cannot_take_are_refused(sources):
    """A ViT asked for as an `ImageTextModel`, a missing file, or a change
    asked of a model that is not a ViT: each refused by name."""
    model, named, images = sources
    np.testing.assert_allclose(to_numpy(load_model(named[".keras"], model_class=ViT)(images)),
                               to_numpy(model(images)), atol=1e-5)
    with pytest.raises(ValueError, match=r"model\.keras holds a ViT, not an ImageTextModel"):
        load_model(named[".keras"], model_class=ImageTextModel)
    with pytest.raises(FileNotFoundError, match=r"--init .*missing\.keras: no such file"):
        load_model(named[".keras"].parent / "missing.keras", flag="--init")
    probe = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match=r"holds a Sequential, not a ViT: image_size, "
                                         r"num_classes cannot be changed here"):
        load_model(probe, image_size=48, num_classes=2)
