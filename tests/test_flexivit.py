"""FlexiViT's PI-resize of the patch embedding (Beyer et al., CVPR 2023)."""

import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import ViT
from keras_vit.layers import resize_patch_kernel
from keras_vit.layers.patch_embedding import bilinear_resize_matrix

SIZES = [
    (16, 24), (16, 32), (8, 16), (16, 8), (16, 12), ((8, 16), (12, 24)),
    (4, 4), ((3, 5), (7, 6)),
]
UP_SIZES = [(8, 16), (16, 24), (16, 32), (8, 12), ((8, 16), (12, 24)), ((4, 6), (10, 9))]


def _pair(size):
    return (size, size) if isinstance(size, int) else tuple(size)


def _jax_resize_matrix(old, new):
    """FlexiViT's `resize_matrix`: columns are resized one-hot patches."""
    import jax

    old, new = _pair(old), _pair(new)
    columns = []
    # In float64: jax's float32 sample positions are off by ~1e-6.
    with jax.enable_x64(True):
        for i in range(old[0] * old[1]):
            basis = np.zeros(old[0] * old[1], np.float64)
            basis[i] = 1.0
            resized = jax.image.resize(
                jax.numpy.asarray(basis.reshape(old)), new, method="bilinear", antialias=False
            )
            assert resized.dtype == np.float64
            columns.append(np.asarray(resized).reshape(-1))
    return np.stack(columns).T


@pytest.mark.parametrize("old,new", SIZES)
def test_resize_matrix_matches_jax_image_resize(old, new):
    pytest.importorskip("jax")
    matrix = bilinear_resize_matrix(old, new)
    expected = _jax_resize_matrix(old, new)
    assert matrix.shape == expected.shape == (
        _pair(new)[0] * _pair(new)[1], _pair(old)[0] * _pair(old)[1]
    )
    np.testing.assert_allclose(matrix, expected, atol=1e-6, rtol=0)


def test_resize_matrix_of_same_size_is_identity():
    np.testing.assert_allclose(bilinear_resize_matrix((5, 7), (5, 7)), np.eye(35), atol=1e-12)


@pytest.mark.parametrize("old,new", UP_SIZES)
def test_pi_resize_keeps_the_embedding_of_an_upsampled_patch(old, new):
    old, new = _pair(old), _pair(new)
    rng = np.random.default_rng(0)
    channels, hidden = 3, 7
    kernel = rng.normal(size=(*old, channels, hidden)).astype("float32")
    patches = rng.uniform(-1, 1, (4, *old, channels))
    resized_kernel = resize_patch_kernel(kernel, new)
    assert resized_kernel.shape == (*new, channels, hidden)
    assert resized_kernel.dtype == np.float32

    matrix = bilinear_resize_matrix(old, new)
    flat = patches.transpose(0, 3, 1, 2).reshape(4, channels, -1)
    upsampled = (flat @ matrix.T).reshape(4, channels, *new).transpose(0, 2, 3, 1)
    before = np.einsum("bhwc,hwcd->bd", patches, kernel.astype(np.float64))
    after = np.einsum("bhwc,hwcd->bd", upsampled, resized_kernel.astype(np.float64))
    np.testing.assert_allclose(after, before, atol=1e-5, rtol=0)

    # B(x) straight from jax.image.resize, as FlexiViT, gives the same.
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        upsampled = np.asarray(jax.image.resize(
            patches, (4, *new, channels), method="bilinear", antialias=False
        ))
    after = np.einsum("bhwc,hwcd->bd", upsampled, resized_kernel.astype(np.float64))
    np.testing.assert_allclose(after, before, atol=1e-5, rtol=0)


def test_resize_patch_kernel_same_size_and_bad_arguments():
    kernel = np.random.default_rng(0).normal(size=(4, 4, 3, 2)).astype("float32")
    np.testing.assert_array_equal(resize_patch_kernel(kernel, 4), kernel)
    assert resize_patch_kernel(kernel, (2, 6)).shape == (2, 6, 3, 2)
    with pytest.raises(ValueError, match="new_patch_size"):
        resize_patch_kernel(kernel, 0)
    with pytest.raises(ValueError, match="kernel"):
        resize_patch_kernel(kernel[0], 8)


def _small_vit(**overrides):
    config = dict(image_size=32, patch_size=8, num_layers=2, hidden_dim=32, num_heads=4,
                  mlp_dim=64, num_classes=5)
    config.update(overrides)
    model = ViT(**config)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        # Perturb everything (zero [class] token and head included).
        value = to_numpy(variable)
        variable.assign(value + 0.05 * rng.normal(size=value.shape).astype("float32"))
    return model


def _upsample_patches(images, patch, new_patch):
    """Every patch x of `images` replaced by B(x), its bilinear upsampling."""
    batch, height, width, channels = images.shape
    grid_h, grid_w = height // patch, width // patch
    matrix = bilinear_resize_matrix(patch, new_patch)
    x = images.reshape(batch, grid_h, patch, grid_w, patch, channels)
    x = x.transpose(0, 1, 3, 5, 2, 4).reshape(batch, grid_h, grid_w, channels, patch * patch)
    x = (x.astype(np.float64) @ matrix.T).reshape(
        batch, grid_h, grid_w, channels, new_patch, new_patch
    )
    x = x.transpose(0, 1, 4, 2, 5, 3)
    return x.reshape(batch, grid_h * new_patch, grid_w * new_patch, channels).astype("float32")


def test_with_patch_size_gives_the_same_logits_on_upsampled_patches(images):
    model = _small_vit()
    resized = model.with_patch_size(16, image_size=64)
    assert resized.patch_size == (16, 16) and resized.image_size == (64, 64)
    assert resized.grid_size == model.grid_size == (4, 4)
    np.testing.assert_array_equal(
        to_numpy(resized.get_layer("position_embedding").embeddings),
        to_numpy(model.get_layer("position_embedding").embeddings),
    )
    big = _upsample_patches(images, 8, 16)
    expected = to_numpy(model(images))
    logits = to_numpy(resized(big))
    assert np.abs(expected).max() > 1e-2
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=0)


def test_with_patch_size_resamples_position_embeddings_and_round_trips(images):
    model = _small_vit()
    resized = model.with_patch_size(16)
    assert resized.image_size == (32, 32) and resized.grid_size == (2, 2)
    assert tuple(resized.get_layer("position_embedding").embeddings.shape) == (1, 1 + 4, 32)
    kernel = resized.get_layer("patch_embedding").projection.kernel
    assert tuple(kernel.shape) == (16, 16, 3, 32)
    np.testing.assert_allclose(
        to_numpy(kernel),
        resize_patch_kernel(model.get_layer("patch_embedding").projection.kernel, 16),
        atol=1e-7,
    )
    np.testing.assert_array_equal(
        to_numpy(resized.get_layer("patch_embedding").projection.bias),
        to_numpy(model.get_layer("patch_embedding").projection.bias),
    )
    np.testing.assert_array_equal(
        to_numpy(resized.get_layer("encoder_block_1").weights[0]),
        to_numpy(model.get_layer("encoder_block_1").weights[0]),
    )
    assert resized(images).shape == (2, 5)
    config = resized.get_config()
    assert config["patch_size"] == (16, 16)
    assert ViT.from_config(config).get_config() == config
    # Rectangular patches, and back down (least squares), work too.
    assert model.with_patch_size((4, 16)).grid_size == (8, 2)
    assert model.with_patch_size(4).grid_size == (8, 8)


def test_with_patch_size_sincos_model():
    model = _small_vit(position_embedding="sincos2d", pooling="gap")
    resized = model.with_patch_size(16, image_size=64)
    assert resized.grid_size == (4, 4)
    assert resized(np.zeros((1, 64, 64, 3), "float32")).shape == (1, 5)


def test_with_patch_size_errors():
    model = _small_vit()
    with pytest.raises(ValueError, match="`patch_size` 12 does not divide the image height 32"):
        model.with_patch_size(12)
    with pytest.raises(ValueError, match="`image_size` that is a multiple of 16"):
        model.with_patch_size(16, image_size=40)
    with pytest.raises(ValueError, match="`patch_size` must be a positive int"):
        model.with_patch_size(0)
    with pytest.raises(ValueError, match="`patch_size` must be a positive int"):
        model.with_patch_size((8, -8))
    with pytest.raises(ValueError, match="`image_size` must be None"):
        model.with_patch_size(8, image_size=-32)
    hybrid = ViT(image_size=32, patch_size=1, num_layers=1, hidden_dim=16, num_heads=2,
                 mlp_dim=32, num_classes=0, resnet_block_units=(1,))
    with pytest.raises(ValueError, match="hybrid model.*not FlexiViT"):
        hybrid.with_patch_size(2)
