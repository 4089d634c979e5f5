import numpy as np
import pytest
import scipy.ndimage
from helpers import run_layer_test
from helpers import to_numpy
from helpers import value_and_gradient

from keras_vit import kernels
from keras_vit import layers
from keras_vit.config import BlockOptions

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.normal(size=shape).astype("float32")


# -- PatchEmbedding (Eq. 1) ---------------------------------------------------

def test_patch_embedding_is_flattened_patches_times_e(tmp_path):
    images = rand(2, 12, 8, 3)
    layer, out = run_layer_test(
        layers.PatchEmbedding, dict(hidden_dim=5, patch_size=(4, 2)), images, (2, 12, 5), tmp_path
    )
    kernel, bias = (to_numpy(w) for w in layer.weights)
    # x_p^i E: each (4, 2, 3) patch flattened in (h, w, c) order times E.
    patches = images.reshape(2, 3, 4, 4, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 12, 24)
    expected = patches @ kernel.reshape(24, 5) + bias
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_patch_embedding_channels_first_matches_channels_last():
    images = rand(2, 16, 16, 3)
    last = layers.PatchEmbedding(6, 8, data_format="channels_last")
    first = layers.PatchEmbedding(6, 8, data_format="channels_first")
    out_last = last(images)
    first(np.transpose(images, (0, 3, 1, 2)))
    first.set_weights(last.get_weights())
    out_first = first(np.transpose(images, (0, 3, 1, 2)))
    np.testing.assert_allclose(to_numpy(out_first), to_numpy(out_last), atol=1e-5)


def test_patch_embedding_rejects_indivisible_images():
    with pytest.raises(ValueError, match="height 30 is not divisible by the patch size 16"):
        layers.PatchEmbedding(8, 16)(rand(1, 30, 32, 3))


# -- ClassToken, DropPath -----------------------------------------------------

def test_class_token_prepends_learned_tokens(tmp_path):
    x = rand(2, 4, 6)
    layer, out = run_layer_test(layers.ClassToken, dict(num_tokens=2), x, (2, 6, 6), tmp_path)
    np.testing.assert_array_equal(out[:, 2:], x)
    np.testing.assert_array_equal(out[:, :2], np.zeros((2, 2, 6)))  # zero init, as the original


def test_drop_path_is_identity_at_inference_and_per_sample_in_training(tmp_path):
    x = np.ones((64, 3, 4), "float32")
    layer, out = run_layer_test(layers.DropPath, dict(rate=0.5, seed=1), x, x.shape, tmp_path)
    np.testing.assert_array_equal(out, x)
    dropped = to_numpy(layer(x, training=True))
    per_sample = dropped.reshape(64, -1)
    assert set(np.unique(per_sample)) <= {0.0, 2.0}
    assert np.all(per_sample.min(1) == per_sample.max(1)), "a sample must be dropped whole"
    assert 10 < (per_sample[:, 0] == 0).sum() < 54


# -- PositionEmbedding and resampling (Sec. 3.2) ------------------------------

def test_position_embedding_adds_learned_table(tmp_path):
    x = rand(2, 1 + 6, 8)
    layer, out = run_layer_test(
        layers.PositionEmbedding, dict(grid_size=(2, 3), num_prefix_tokens=1), x, x.shape, tmp_path
    )
    np.testing.assert_allclose(out - x, np.broadcast_to(to_numpy(layer.embeddings), x.shape), atol=1e-6)
    assert 0.005 < to_numpy(layer.embeddings).std() < 0.05  # normal(0.02)


def test_position_embedding_sincos_matches_big_vision_formula(tmp_path):
    x = np.zeros((1, 1 + 4, 8), "float32")
    layer, out = run_layer_test(
        layers.PositionEmbedding, dict(grid_size=(2, 2), num_prefix_tokens=1, kind="sincos2d"), x, x.shape, tmp_path
    )
    assert layer.weights == []
    np.testing.assert_array_equal(out[0, 0], 0.0)  # the class token gets none
    # Patch (row 1, col 0): omega = [1, 1e-4]; x = 0 -> sin 0, cos 1; y = 1.
    omega = np.array([1.0, 1e-4])
    expected = np.concatenate([np.sin(0 * omega), np.cos(0 * omega), np.sin(omega), np.cos(omega)])
    np.testing.assert_allclose(out[0, 1 + 2], expected, atol=1e-6)


def test_position_embedding_rejects_wrong_length():
    with pytest.raises(ValueError, match=r"2x2 grid with 1 prefix tokens \(5 tokens\) but got 4"):
        layers.PositionEmbedding(2, 1)(rand(1, 4, 8))


def test_bilinear_resample_hand_computed():
    # A 2x2 grid of scalars [[0, 2], [4, 6]] zoomed to 3x3 with corners aligned:
    # the middle is the mean of the four corners, edges the mean of two.
    grid = np.array([0.0, 2.0, 4.0, 6.0]).reshape(1, 4, 1)
    posemb = np.concatenate([np.full((1, 1, 1), 9.0), grid], axis=1)
    out = layers.resample_position_embeddings(posemb, 2, 3, num_prefix_tokens=1)
    assert out[0, 0, 0] == 9.0
    expected = [[0, 1, 2], [2, 3, 4], [4, 5, 6]]
    np.testing.assert_allclose(out[0, 1:, 0].reshape(3, 3), expected)


def test_bilinear_resample_is_scipy_zoom_order_1_non_square():
    grid = rand(4, 6, 3)
    out = layers.resample_position_embeddings(grid.reshape(1, 24, 3), (4, 6), (7, 9), num_prefix_tokens=0)
    expected = scipy.ndimage.zoom(grid, (7 / 4, 9 / 6, 1), order=1)
    np.testing.assert_allclose(out[0].reshape(7, 9, 3), expected, atol=1e-5)


@pytest.mark.slow
def test_bicubic_resample_is_torch_interpolate():
    torch = pytest.importorskip("torch")
    grid = rand(5, 4, 3)
    out = layers.resample_position_embeddings(
        grid.reshape(1, 20, 3), (5, 4), (8, 7), num_prefix_tokens=0, method="bicubic"
    )
    tensor = torch.from_numpy(grid).permute(2, 0, 1)[None]
    expected = torch.nn.functional.interpolate(tensor, size=(8, 7), mode="bicubic", align_corners=False)
    np.testing.assert_allclose(out[0].reshape(8, 7, 3), expected[0].permute(1, 2, 0).numpy(), atol=1e-5)


@pytest.mark.backend_independent
def test_cpe_resample_is_radios_crop_of_the_square_grid():
    """RADIO's CPE (its ``ViTPatchGenerator``): ``F.interpolate(..., mode="bilinear",
    align_corners=True)`` to a square of the longer side, then the top-left rows and columns."""
    torch = pytest.importorskip("torch")
    grid = rand(4, 4, 3)
    tensor = torch.from_numpy(grid).permute(2, 0, 1)[None]
    for new in ((6, 3), (2, 5), (4, 2), (5, 5)):
        out = layers.resample_position_embeddings(grid.reshape(1, 16, 3), 4, new, num_prefix_tokens=0,
                                                  method="cpe")
        side = max(new)
        square = torch.nn.functional.interpolate(tensor, size=(side, side), mode="bilinear", align_corners=True)
        expected = square[0, :, :new[0], :new[1]].permute(1, 2, 0).numpy()
        np.testing.assert_allclose(out[0].reshape(*new, 3), expected, atol=1e-5, err_msg=str(new))
    same = layers.resample_position_embeddings(grid.reshape(1, 16, 3), 4, (4, 2), num_prefix_tokens=0, method="cpe")
    np.testing.assert_allclose(same[0].reshape(4, 2, 3), grid[:, :2], atol=1e-6)  # the table's own columns


def test_resample_errors_name_the_problem():
    with pytest.raises(ValueError, match="do not fit a 3x3 grid"):
        layers.resample_position_embeddings(np.zeros((1, 5, 2)), 3, 4)
    with pytest.raises(ValueError, match="Unknown resampling method 'nearest'"):
        layers.resample_position_embeddings(np.zeros((1, 5, 2)), 2, 4, method="nearest")


def test_layer_resampled_keeps_prefix_rows():
    layer = layers.PositionEmbedding((2, 2), num_prefix_tokens=2)
    layer.build((None, 6, 4))
    out = layer.resampled((4, 4))
    assert out.shape == (1, 18, 4)
    np.testing.assert_array_equal(out[0, :2], to_numpy(layer.embeddings)[0, :2])


# -- Attention, TransformerEncoder (Eq. 2-3), MAP -----------------------------

def named(layer):
    """The layer's weights by path below the layer, e.g. "mlp/fc1/kernel"."""
    return {v.path[len(layer.path) + 1:]: to_numpy(v) for v in layer.weights}


def reference_attention(layer, q_in, kv_in):
    w = named(layer)
    q = np.einsum("btd,dnh->btnh", q_in, w["query/kernel"]) + w["query/bias"]
    k = np.einsum("btd,dnh->btnh", kv_in, w["key/kernel"]) + w["key/bias"]
    v = np.einsum("btd,dnh->btnh", kv_in, w["value/kernel"]) + w["value/bias"]
    logits = np.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(q.shape[-1])
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = np.einsum("bnqk,bknh->bqnh", weights, v)
    return np.einsum("bqnh,nhd->bqd", out, w["out/kernel"]) + w["out/bias"], weights


def test_attention_matches_reference_and_scores_do_not_change_output(tmp_path):
    x = rand(2, 5, 8)
    layer, out = run_layer_test(
        layers.MultiHeadDotProductAttention, dict(options=BlockOptions(num_heads=2).to_dict()), x, x.shape,
        tmp_path
    )
    for v in layer.weights:  # non-zero biases so they are tested too
        v.assign(v + RNG.normal(0, 0.1, v.shape))
    expected, expected_weights = reference_attention(layer, x, x)
    fused = to_numpy(layer(x))
    explicit, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(fused, expected, atol=1e-5)
    np.testing.assert_allclose(to_numpy(explicit), fused, atol=1e-6)
    np.testing.assert_allclose(to_numpy(scores), expected_weights, atol=1e-6)


def test_attention_out_norm_normalises_each_tokens_heads_together(tmp_path):
    """EVA-CLIP's sub-LN (timm's ``scale_attn_inner``): a LayerNorm over all
    ``heads * head_dim`` outputs of a token, before the output projection."""
    x = rand(2, 5, 8)
    options = BlockOptions(num_heads=2, attention_norm=True)
    layer, _ = run_layer_test(layers.MultiHeadDotProductAttention, dict(options=options.to_dict()), x,
                              x.shape, tmp_path)
    assert layer.get_config()["options"] == options.to_dict()
    for v in layer.weights:
        v.assign(v + RNG.normal(0, 0.1, v.shape))
    w = {v.path.split("/", 1)[1]: to_numpy(v) for v in layer.weights}
    q, k, v = (np.einsum("btd,dnh->btnh", x, w[f"{n}/kernel"]) + w[f"{n}/bias"] for n in ("query", "key", "value"))
    heads = softmax_attention(q, k, v, q.shape[-1] ** -0.5).reshape(2, 5, 8)
    normed = (heads - heads.mean(-1, keepdims=True)) / np.sqrt(heads.var(-1, keepdims=True) + 1e-6)
    normed = normed * w["out_norm/gamma"].reshape(-1) + w["out_norm/beta"].reshape(-1)
    expected = np.einsum("bqnh,nhd->bqd", normed.reshape(2, 5, 2, 4), w["out/kernel"]) + w["out/bias"]
    np.testing.assert_allclose(to_numpy(layer(x)), expected, atol=1e-5)


def softmax_attention(q, k, v, scale):
    """float64 reference of ``softmax(q kᵀ · scale) v``, (batch, T, heads, head_dim)."""
    logits = np.einsum("bqnh,bknh->bnqk", q.astype("float64"), k.astype("float64")) * scale
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    return np.einsum("bnqk,bknh->bqnh", weights / weights.sum(-1, keepdims=True), v.astype("float64"))


@pytest.mark.parametrize("tq,tk", [(5, 5), (1, 7), (4, 6)])
def test_fused_attention_is_softmax_attention(tq, tk):
    q, k, v = rand(2, tq, 3, 8), rand(2, tk, 3, 8), rand(2, tk, 3, 8)
    expected = softmax_attention(q, k, v, 0.3)
    np.testing.assert_allclose(to_numpy(kernels.fused_attention(q, k, v, 0.3)), expected, atol=1e-5)


@pytest.mark.parametrize("tq,tk", [(5, 5), (1, 7), (197, 197)])
@pytest.mark.slow_cases("197-197")
def test_padded_attention_equals_attention_with_its_gradient(tq, tk):
    # The JAX GPU path for odd lengths (cuDNN trains only on even ones), run
    # here with XLA's implementation: the padded tokens must change nothing.
    import keras
    if keras.backend.backend() != "jax":
        pytest.skip(f"padded_attention is JAX's path; backend is {keras.backend.backend()}")
    import jax
    from keras_vit.kernels import padded_attention
    q, k, v = rand(2, tq, 3, 8), rand(2, tk, 3, 8), rand(2, tk, 3, 8)

    def loss(fn):
        return lambda q, k, v: (fn(q, k, v) ** 2 * np.arange(8)).sum()
    plain = lambda q, k, v: keras.ops.dot_product_attention(q, k, v, scale=0.3)  # noqa: E731
    padded = lambda q, k, v: padded_attention(q, k, v, 0.3, implementation="xla")  # noqa: E731
    np.testing.assert_allclose(padded(q, k, v), plain(q, k, v), atol=1e-5)
    grads = [jax.jit(jax.grad(loss(fn), (0, 1, 2)))(q, k, v) for fn in (padded, plain)]
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("fn", ["heads_first_attention", "per_image_attention"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("tq,tk,masked", [(5, 5, False), (1, 7, False), (197, 197, False),
                                          (5, 7, True), (197, 197, True)])
def test_heads_first_attention_equals_keras_attention_with_its_gradient(tq, tk, masked, dtype, fn):
    # JAX's and TensorFlow's CPU paths (fused_attention calls them there); pure
    # keras.ops, so they are checked against keras.ops.dot_product_attention on
    # every backend. Masked: NaFlex's padding, the second image's last keys left out.
    import keras
    heads_first_attention = getattr(kernels, fn)
    key_mask = np.ones((2, tk), "int32")
    key_mask[1, tk // 2 + 1:] = 0
    options = dict(key_mask=key_mask) if masked else {}
    reference_mask = dict(mask=key_mask.astype(bool)[:, None, None, :]) if masked else {}
    qkv = np.concatenate([rand(2, tq, 3, 8), rand(2, tk, 3, 8), rand(2, tk, 3, 8)], axis=1)
    w = rand(2, tq, 3, 8)

    def attention(fn):
        def f(qkv):
            qkv = keras.ops.cast(qkv, dtype)
            return fn(qkv[:, :tq], qkv[:, tq:tq + tk], qkv[:, tq + tk:])
        return f
    y, g = value_and_gradient(
        attention(lambda q, k, v: heads_first_attention(q, k, v, 0.3, **options)), qkv, w)
    y_ref, g_ref = value_and_gradient(
        attention(lambda q, k, v: keras.ops.dot_product_attention(q, k, v, scale=0.3, **reference_mask)),
        qkv, w)
    # In bfloat16 the backends' own attention is a rounding or two away (some
    # keep bf16 logits; the sums run in another order): 2 ulp of 1.6 is 0.016.
    # Masked, TensorFlow's bfloat16 attention was one element of 28,368 a rounding further off (0.035).
    tol = 1e-5 if dtype == "float32" else 4e-2 if masked else 2e-2
    np.testing.assert_allclose(y, y_ref, atol=tol, rtol=tol)
    np.testing.assert_allclose(g, g_ref, atol=tol, rtol=tol)


def test_layer_norm_equals_keras_layer_normalization_with_its_gradients():
    # The written-out gradient (JAX's and TensorFlow's CPU path) against
    # autodiff of keras.ops.layer_normalization: d/dx, d/dgamma, d/dbeta.
    import keras
    from keras_vit.kernels.normalization import _layer_norm
    x, gamma, beta, w = rand(2, 5, 8), 1 + rand(8), rand(8), rand(2, 5, 8)
    params = np.concatenate([x.ravel(), gamma, beta])

    def normalized(fn):
        return lambda p: fn(keras.ops.reshape(p[:80], (2, 5, 8)), p[80:88], p[88:], 1e-6)
    reference = lambda x, g, b, eps: keras.ops.layer_normalization(x, g, b, epsilon=eps)  # noqa: E731
    y, g = value_and_gradient(normalized(_layer_norm), params, w)
    y_ref, g_ref = value_and_gradient(normalized(reference), params, w)
    np.testing.assert_allclose(y, y_ref, atol=2e-6)
    np.testing.assert_allclose(g, g_ref, atol=2e-5)


def test_projection_matmul_equals_keras_matmul_with_its_gradients():
    # JAX's CPU path (the gradient's two GEMMs in sequence) against autodiff of
    # keras.ops.matmul, for x (batch, tokens, in) and a (in, out) kernel: d/dx, d/dkernel.
    import keras
    from unittest import mock

    from keras_vit.kernels import projection
    from keras_vit.kernels import backend_platform
    x, kernel, w = rand(2, 5, 8), rand(8, 6), rand(2, 5, 6)
    params = np.concatenate([x.ravel(), kernel.ravel()])

    def product(fn):
        return lambda p: fn(keras.ops.reshape(p[:80], (2, 5, 8)), keras.ops.reshape(p[80:], (8, 6)))
    y, g = value_and_gradient(product(projection.matmul), params, w)
    y_ref, g_ref = value_and_gradient(product(keras.ops.matmul), params, w)
    np.testing.assert_allclose(y, y_ref, atol=1e-6)
    np.testing.assert_allclose(g, g_ref, atol=1e-6)
    sequential = backend_platform() == ("jax", "cpu")
    with mock.patch.object(projection, "_jax_sequential_matmul",
                           wraps=projection._jax_sequential_matmul) as spy:
        layers.MlpBlock(BlockOptions(mlp_dim=16))(x)
    assert spy.call_count == (2 if sequential else 0), backend_platform()


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_encoder_block_norms_run_the_written_out_layer_norm_on_jax_and_tensorflow_cpus(dtype):
    from unittest import mock

    from keras_vit.kernels import backend_platform
    from keras_vit.kernels import normalization as transformer_encoder
    block = layers.TransformerEncoder(BlockOptions(num_heads=2, mlp_dim=16), dtype=dtype)
    x = rand(2, 5, 8)
    block.build(x.shape)
    for norm in (block.norm1, block.norm2):
        norm.gamma.assign(1 + rand(8))
        norm.beta.assign(rand(8))
        got, want = transformer_encoder.layer_norm(norm, x), norm(x)
        assert got.dtype == want.dtype
        tol = 2e-6 if dtype == "float32" else 2e-2
        np.testing.assert_allclose(to_numpy(got).astype("float32"), to_numpy(want).astype("float32"), atol=tol)
    written_out = backend_platform() in (("jax", "cpu"), ("tensorflow", "cpu"))
    with mock.patch.object(transformer_encoder, "_layer_norm", wraps=transformer_encoder._layer_norm) as spy:
        block(x)
    assert spy.call_count == (2 if written_out else 0), backend_platform()


def test_jax_cpu_attention_maps_over_images_in_inference_only():
    import keras
    from keras_vit.kernels import backend_platform
    if backend_platform() != ("jax", "cpu"):
        pytest.skip(f"per_image_attention is JAX's CPU inference path; here {backend_platform()}")
    from unittest import mock

    from keras_vit.kernels import attention
    q, k, v = rand(2, 9, 3, 8), rand(2, 9, 3, 8), rand(2, 9, 3, 8)
    expected = softmax_attention(q, k, v, 0.3)
    layer = layers.MultiHeadDotProductAttention(BlockOptions(num_heads=2))
    x = rand(2, 5, 8)
    for training, used in ((None, "per_image_attention"), (False, "per_image_attention"),
                           (True, "heads_first_attention")):
        with mock.patch.object(attention, used, wraps=getattr(attention, used)) as spy:
            np.testing.assert_allclose(
                to_numpy(kernels.fused_attention(q, k, v, 0.3, training=training)), expected, atol=1e-6
            )
            layer(x, training=training)
        assert spy.call_count == 2, (training, used)
    predicted = layer(x, training=False)
    np.testing.assert_allclose(to_numpy(layer(x, training=True)), to_numpy(predicted), atol=1e-6)
    assert keras.backend.backend() == "jax"


def test_attention_kernels_are_xavier_uniform_of_the_dense_view():
    layer = layers.MultiHeadDotProductAttention(BlockOptions(num_heads=8))
    layer.build((None, 4, 256))
    limit = np.sqrt(6 / (256 + 256))
    for name in ("query", "key", "value", "out"):
        kernel = to_numpy(getattr(layer, name).kernel)
        assert np.abs(kernel).max() <= limit
        assert abs(kernel.std() - limit / np.sqrt(3)) < 0.05 * limit


@pytest.mark.parametrize("mlp_bias, norm_bias", [(True, True), (False, True), (True, False)])
def test_transformer_encoder_is_eq_2_and_3(tmp_path, mlp_bias, norm_bias):
    x = rand(2, 5, 8)
    options = BlockOptions(num_heads=2, mlp_dim=16, gelu_approximate=False, layer_norm_epsilon=1e-6,
                           mlp_bias=mlp_bias, norm_bias=norm_bias)
    layer, out = run_layer_test(layers.TransformerEncoder, dict(options=options.to_dict()), x, x.shape, tmp_path)
    assert layer.get_config()["options"] == options.to_dict()
    w = named(layer)
    assert ("mlp/fc1/bias" in w and "mlp/fc2/bias" in w) == mlp_bias
    assert {n for n in w if n.endswith("/beta")} == ({"norm1/beta", "norm2/beta"} if norm_bias else set())

    def ln(v, name):  # norm_bias=False: (x - mean) / std * gamma
        m, s = v.mean(-1, keepdims=True), v.var(-1, keepdims=True)
        return (v - m) / np.sqrt(s + 1e-6) * w[name + "/gamma"] + w.get(name + "/beta", 0.0)

    from scipy.special import erf

    z = x + reference_attention(layer.attention, ln(x, "norm1"), ln(x, "norm1"))[0]  # Eq. 2
    h = ln(z, "norm2") @ w["mlp/fc1/kernel"] + w.get("mlp/fc1/bias", 0.0)
    h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
    expected = z + h @ w["mlp/fc2/kernel"] + w.get("mlp/fc2/bias", 0.0)                # Eq. 3
    np.testing.assert_allclose(out, expected, atol=1e-5)
    with_scores, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(with_scores), out, atol=1e-6)
    assert tuple(scores.shape) == (2, 2, 5, 5)


def test_transformer_encoder_num_queries_is_the_first_rows_with_their_gradient():
    import keras

    x = rand(2, 6, 8)
    layer = layers.TransformerEncoder(BlockOptions(num_heads=2, mlp_dim=16, layer_scale_init=0.5))
    layer(x)
    w = np.zeros((2, 6, 8), "float32")
    w[:, :2] = rand(2, 2, 8)
    full, full_grad = value_and_gradient(layer, x, w)
    part, part_grad = value_and_gradient(lambda v: layer(v, num_queries=2), x, w[:, :2])
    assert part.shape == (2, 2, 8)
    np.testing.assert_allclose(part, full[:, :2], atol=1e-5)
    # Keys and values still come from every token: the gradient reaches all of x.
    assert np.abs(part_grad[:, 2:]).max() > 1e-3
    np.testing.assert_allclose(part_grad, full_grad, atol=1e-5)
    out, scores = layer(x, num_queries=1, return_attention_scores=True)
    assert tuple(out.shape) == (2, 1, 8) and tuple(scores.shape) == (2, 2, 1, 6)
    # The symbolic shapes of a functional graph follow num_queries.
    symbolic = layer(keras.Input((6, 8)), num_queries=1, return_attention_scores=True)
    assert [tuple(t.shape) for t in symbolic] == [(None, 1, 8), (None, 2, 1, 6)]
    with pytest.raises(ValueError, match="num_queries must be a positive int or None, got 0"):
        layer(x, num_queries=0)


def test_transformer_encoder_layer_scale_and_dropout(tmp_path):
    x = rand(2, 5, 8)
    options = BlockOptions(num_heads=2, mlp_dim=16, layer_scale_init=0.0)
    layer, out = run_layer_test(
        layers.TransformerEncoder,
        dict(options=options.to_dict(), dropout_rate=0.5, attention_dropout_rate=0.5, drop_path_rate=0.2),
        x, x.shape, tmp_path,
    )
    assert layer.get_config()["options"] == options.to_dict()
    np.testing.assert_allclose(out, x, atol=1e-6)  # zero LayerScale: the identity
    for v in layer.weights:
        if "layer_scale" in v.path:
            v.assign(np.ones(v.shape))
    assert not np.allclose(to_numpy(layer(x, training=True)), to_numpy(layer(x)))
    np.testing.assert_allclose(to_numpy(layer(x)), to_numpy(layer(x)))


# -- BlockOptions: the options of a block as one value ----------------------------

def test_block_options_carry_vit_configs_names_to_the_attention_and_mlp_as_one_value():
    import dataclasses

    from keras_vit import ViTConfig
    from keras_vit.config import BLOCK_OPTIONS
    from keras_vit.config import FIELDS
    from keras_vit.model import block_arguments
    config = ViTConfig(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
                       qk_norm=True, attention_norm=True, position_embedding="rope", layer_scale_init=0.1,
                       drop_path_rate=0.2)
    assert [name for name in BLOCK_OPTIONS if name not in FIELDS and not hasattr(ViTConfig, name)] == ["causal"]
    options = config.block_options
    assert all(getattr(options, name) == getattr(config, name) for name in BLOCK_OPTIONS if name != "causal")
    block = layers.TransformerEncoder(**block_arguments(config, 1))
    assert block.options == options and block.attention.options is block.options is block.mlp.options
    assert block.drop_path_rate == pytest.approx(0.2) and block.num_prefix_tokens == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.num_heads = 4
    with pytest.raises(TypeError):
        options.rope["theta"] = 1.0  # read-only, as the rest
    assert BlockOptions.from_dict(options.to_dict()) == options
    with pytest.raises(ValueError, match="Unknown block option.s. 'use_bias'. Valid ones: num_heads, mlp_dim"):
        BlockOptions.from_dict({"use_bias": False})
    with pytest.raises(ValueError, match="Unknown mlp_activation 'relu'"):
        BlockOptions(mlp_activation="relu")
    with pytest.raises(ValueError, match="`qk_norm` must be True or False, got 1"):
        BlockOptions(qk_norm=1)
    with pytest.raises(ValueError, match="must be a keras_vit.config.BlockOptions or a dict of its fields, got 2"):
        layers.TransformerEncoder(2)


# Configs that the layers' get_config() gave while each option was an argument of its own.
EARLIER_CONFIGS = {
    "TransformerEncoder": dict(
        name="block", trainable=True, num_heads=2, mlp_dim=16, dropout_rate=0.0, attention_dropout_rate=0.0,
        drop_path_rate=0.0, layer_norm_epsilon=1e-06, gelu_approximate=False, qkv_bias=True,
        layer_scale_init=0.5, seed=None, qk_norm=True, mlp_activation="gelu", mlp_bias=True, mlp_norm=True,
        attention_norm=True, norm_bias=True, norm_type="layer_norm", out_bias=True, key_bias=False, rope=None,
        causal=False, token_merging=0, num_prefix_tokens=0, proportional_attention=True),
    "MultiHeadDotProductAttention": dict(
        name="attention", trainable=True, num_heads=2, head_dim=None, use_bias=True, dropout_rate=0.0,
        seed=None, qk_norm=True, norm_epsilon=1e-05, norm_bias=True, key_bias=False, rope=None, causal=False,
        norm_type="layer_norm", out_bias=True, out_norm=True),
    "MlpBlock": dict(
        name="mlp", trainable=True, mlp_dim=16, dropout_rate=0.0, gelu_approximate=False, seed=None,
        activation="quick_gelu", use_bias=False, norm=dict(norm_type="layer_norm", epsilon=1e-05, bias=False)),
}
TODAYS_OPTIONS = {
    "TransformerEncoder": BlockOptions(num_heads=2, mlp_dim=16, gelu_approximate=False, layer_scale_init=0.5,
                                       qk_norm=True, mlp_norm=True, attention_norm=True, key_bias=False),
    "MultiHeadDotProductAttention": BlockOptions(num_heads=2, qk_norm=True, layer_norm_epsilon=1e-5,
                                                 key_bias=False, attention_norm=True),
    "MlpBlock": BlockOptions(mlp_dim=16, gelu_approximate=False, mlp_activation="quick_gelu", mlp_bias=False,
                             mlp_norm=True, layer_norm_epsilon=1e-5, norm_bias=False),
}


@pytest.mark.parametrize("name", sorted(EARLIER_CONFIGS))
def test_layer_configs_with_each_option_an_argument_load_as_todays_layer(name):
    import keras
    layer_cls = getattr(layers, name)
    loaded = keras.layers.deserialize({"class_name": f"keras_vit>{name}", "config": EARLIER_CONFIGS[name]})
    assert type(loaded) is layer_cls and loaded.options == TODAYS_OPTIONS[name]
    today = layer_cls(TODAYS_OPTIONS[name], name=loaded.name)
    assert loaded.get_config() == today.get_config()
    x = rand(2, 5, 8)
    loaded(x), today(x)
    assert [w.path for w in loaded.weights] == [w.path for w in today.weights]
    today.set_weights([w + RNG.normal(0, 0.1, w.shape) for w in loaded.get_weights()])
    loaded.set_weights(today.get_weights())
    np.testing.assert_allclose(to_numpy(loaded(x)), to_numpy(today(x)), atol=1e-6)


def _jax_cpu_only():
    import keras
    if keras.backend.backend() != "jax":
        pytest.skip(f"the flat LayerNorm backward is checked on JAX's XLA:CPU; backend is {keras.backend.backend()}")
    import jax
    if jax.default_backend() != "cpu":
        pytest.skip(f"the flat LayerNorm backward is checked on XLA:CPU; JAX computes on {jax.default_backend()}")


def _vit_backward(num_layers, written_out):
    """(gradients, compiled HLO text) of a tiny ViT's loss, with the blocks' written-out
    LayerNorm gradient or with Keras's LayerNormalization and its autodiff."""
    import jax
    import jax.numpy as jnp
    from keras_vit import ViT
    from keras_vit import kernels as module

    original = module.layer_norm
    if not written_out:
        module.layer_norm = module.layer_norm_reference  # Keras's computation, autodiff's gradient
    try:
        model = ViT(image_size=32, patch_size=8, num_layers=num_layers, num_heads=2, hidden_dim=16,
                    mlp_dim=32, num_classes=5)
        trainable = [v.value for v in model.trainable_variables]
        other = [v.value for v in model.non_trainable_variables]
        images = jnp.asarray(rand(2, 32, 32, 3))

        def loss(trainable, images):
            return jnp.sum(model.stateless_call(trainable, other, images, training=True)[0] ** 2)
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        return grad(trainable, images), grad.lower(trainable, images).compile().as_text()
    finally:
        module.layer_norm = original


def _widest_fusion(hlo):
    """The most operands any fusion of a compiled HLO module reads."""
    import re
    return max(len(re.findall(r"%[\w.\-]+", line.split(" fusion(", 1)[1].split("), kind=", 1)[0]))
               for line in hlo.splitlines() if " fusion(" in line)


@pytest.mark.slow
def test_layer_norm_backward_keeps_xla_cpu_fusions_flat_with_depth():
    # XLA:CPU fuses elementwise producers into each consumer, duplicating them.
    # With Keras's LayerNormalization autodiff the residual stream's gradient
    # is such a producer (at block l, the sum of the LayerNorm backward of every
    # block above), so the widest backward fusion grows with depth: O(depth^2)
    # work. The written-out gradient's reductions end that chain at each block.
    _jax_cpu_only()
    import keras
    keras.utils.set_random_seed(0)
    (grads, image_grad), hlo6 = _vit_backward(6, written_out=True)
    keras.utils.set_random_seed(0)
    (plain, plain_image_grad), plain_hlo6 = _vit_backward(6, written_out=False)
    for got, want in zip(grads + [image_grad], plain + [plain_image_grad]):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)
    _, hlo2 = _vit_backward(2, written_out=True)
    _, plain_hlo2 = _vit_backward(2, written_out=False)
    assert _widest_fusion(hlo6) == _widest_fusion(hlo2)
    assert _widest_fusion(plain_hlo6) > _widest_fusion(plain_hlo2)  # what it prevents


def test_multi_head_attention_pooling(tmp_path):
    x = rand(3, 7, 8)
    layer, out = run_layer_test(
        layers.MultiHeadAttentionPooling, dict(num_heads=2, mlp_dim=12), x, (3, 8), tmp_path
    )
    w = named(layer)
    probe = np.broadcast_to(w["probe"], (3, 1, 8))
    y = reference_attention(layer.attention, probe, x)[0]
    m, s = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    n = (y - m) / np.sqrt(s + 1e-6) * w["norm/gamma"] + w["norm/beta"]
    h = n @ w["mlp/fc1/kernel"] + w["mlp/fc1/bias"]
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    expected = (y + h @ w["mlp/fc2/kernel"] + w["mlp/fc2/bias"])[:, 0]
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_token_pooling(tmp_path):
    x = rand(2, 5, 4)
    _, token = run_layer_test(layers.TokenPooling, dict(mode="token", num_prefix_tokens=1), x, (2, 4), tmp_path)
    np.testing.assert_array_equal(token, x[:, 0])
    _, gap = run_layer_test(layers.TokenPooling, dict(mode="gap", num_prefix_tokens=2), x, (2, 4), tmp_path)
    np.testing.assert_allclose(gap, x[:, 2:].mean(1), atol=1e-6)


@pytest.mark.slow
def test_resnet_stem_shapes_and_stride(tmp_path):
    x = rand(1, 32, 32, 3)
    layer, out = run_layer_test(
        layers.ResNetStem, dict(block_units=(1, 1), width_factor=1), x, (1, 4, 4, 512), tmp_path
    )
    assert layer.stride == 8
    kernel = to_numpy(layer.conv_root.kernel)
    shifted = layers.ResNetStem((1, 1), name="shifted")
    shifted(x)
    shifted.set_weights(layer.get_weights())
    shifted.conv_root.kernel.assign(kernel * 3.0 + 1.0)  # weight standardization removes this
    np.testing.assert_allclose(to_numpy(shifted(x)), out, rtol=1e-3, atol=1e-4)
