"""keras_vit.layers.dense (keras_vit/layers/projection.py): x W + b (+ GELU), PyTorch's oneDNN
inference path, and the GELU whose gradient TensorFlow computes from its input alone."""

import contextlib

import keras
import numpy as np
import pytest
import scipy.special
from helpers import to_numpy
from helpers import value_and_gradient

from keras_vit import ViT
from keras_vit.layers import dense
from keras_vit.layers.projection import _PACKED
from keras_vit.layers.projection import gelu

RNG = np.random.default_rng(0)
BACKEND = keras.backend.backend()


# (input_axes, kernel shape, bias): the three kinds of projection in a ViT.
PROJECTIONS = [
    (1, (16, 24), True),          # Dense / MLP
    (1, (16, 4, 6), True),        # q/k/v: (D, heads, head_dim)
    (2, (4, 6, 16), False),       # attention output: (heads, head_dim, D)
]


def rand(*shape, scale=1.0):
    return (RNG.normal(size=shape) * scale).astype("float32")


def no_grad():
    """Inference as predict/evaluate run it: on torch, without autograd (oneDNN's branch)."""
    if BACKEND == "torch":
        import torch
        return torch.no_grad()
    return contextlib.nullcontext()


def projection_inputs(input_axes, kernel_shape, bias):
    """(kernel, bias or None, x of shape (3, 7, *input dims)) for one PROJECTIONS row."""
    kernel = rand(*kernel_shape, scale=0.3)
    return kernel, rand(*kernel_shape[input_axes:]) if bias else None, rand(3, 7, *kernel_shape[:input_axes])


def reference(x, kernel, bias, activation, input_axes):
    k = kernel.astype("float64")
    x = x.astype("float64").reshape(x.shape[: x.ndim - input_axes] + (-1,))
    y = x @ k.reshape(x.shape[-1], -1)
    if bias is not None:
        y = y + bias.reshape(-1)
    if activation == "gelu":
        y = 0.5 * y * (1 + scipy.special.erf(y / np.sqrt(2)))
    elif activation == "gelu_approximate":
        y = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    return y.reshape(y.shape[:-1] + kernel.shape[input_axes:])


@pytest.mark.parametrize("grad", [True, False], ids=["autograd", "inference"])
@pytest.mark.parametrize("activation", [None, "gelu", "gelu_approximate"])
@pytest.mark.parametrize("input_axes,kernel_shape,bias", PROJECTIONS)
def test_dense_is_matmul_plus_bias_then_gelu(grad, activation, input_axes, kernel_shape, bias):
    kernel, b, x = projection_inputs(input_axes, kernel_shape, bias)
    with contextlib.nullcontext() if grad else no_grad():
        got = to_numpy(dense(x, kernel, b, activation=activation, input_axes=input_axes))
    np.testing.assert_allclose(got, reference(x, kernel, b, activation, input_axes), rtol=1e-5, atol=1e-5)


def reference_gradients(x, kernel, bias, activation, input_axes, w):
    """d sum(w * dense(x)) / d(x, kernel, bias) in float64."""
    k = kernel.astype("float64").reshape(int(np.prod(kernel.shape[:input_axes])), -1)
    x2 = x.astype("float64").reshape(-1, k.shape[0])
    z = x2 @ k + (0 if bias is None else bias.reshape(-1))
    dz = w.reshape(z.shape).astype("float64")
    if activation is not None:
        dz = dz * gelu_derivative(z, activation == "gelu_approximate")
    return (
        (dz @ k.T).reshape(x.shape),
        (x2.T @ dz).reshape(kernel.shape),
        None if bias is None else dz.sum(0).reshape(bias.shape),
    )


@pytest.mark.parametrize("transposed_x", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("activation", [None, "gelu_approximate"])
@pytest.mark.parametrize("input_axes,kernel_shape,bias", PROJECTIONS)
def test_dense_gradients_are_the_float64_ones(transposed_x, activation, input_axes, kernel_shape, bias):
    # Training: on torch's CPU the projection and its three gradients are
    # oneDNN matmuls (a torch.autograd.Function), elsewhere keras.ops'
    # autodiff; every backend must give the exact gradients to float32 rounding,
    # also where x arrives as a transposed view (strides, not a copy).
    kernel, b, x = projection_inputs(input_axes, kernel_shape, bias)
    w = rand(3, 7, *kernel_shape[input_axes:])
    arrange = (lambda v: keras.ops.swapaxes(v, 0, 1)) if transposed_x else (lambda v: v)
    xin = np.swapaxes(x, 0, 1).copy() if transposed_x else x
    w_out = np.swapaxes(w, 0, 1).copy() if transposed_x else w

    def f(x=xin, kernel=kernel, b=b):
        return arrange(dense(arrange(x), kernel, b, activation=activation, input_axes=input_axes))

    y, dx = value_and_gradient(lambda v: f(x=v), xin, w_out)
    _, dkernel = value_and_gradient(lambda v: f(kernel=v), kernel, w_out)
    want_dx, want_dkernel, want_db = reference_gradients(x, kernel, b, activation, input_axes, w)
    np.testing.assert_allclose(y, np.swapaxes(reference(x, kernel, b, activation, input_axes), 0, 1)
                               if transposed_x else reference(x, kernel, b, activation, input_axes),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, np.swapaxes(want_dx, 0, 1) if transposed_x else want_dx,
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dkernel, want_dkernel, rtol=1e-5, atol=1e-5)
    if bias:
        _, db = value_and_gradient(lambda v: f(b=v), b, w_out)
        np.testing.assert_allclose(db, want_db, rtol=1e-5, atol=1e-5)


def test_dense_training_runs_onednn_on_torch_cpu():
    # The measured branch is taken where it was measured (torch, CPU, autograd),
    # in float32 and bfloat16, and nowhere else.
    x, kernel, bias = rand(3, 7, 16), rand(16, 24), rand(24)
    if BACKEND != "torch":
        print(f"oneDNN's training branch is torch's only; {BACKEND} checked through keras.ops")
        return
    import torch

    for dtype in (torch.float32, torch.bfloat16):
        xt = torch.tensor(x, dtype=dtype, requires_grad=True)
        y = dense(xt, torch.tensor(kernel, dtype=dtype, requires_grad=True), torch.tensor(bias, dtype=dtype))
        assert type(y.grad_fn).__name__ == "OneDNNLinearBackward", y.grad_fn
        assert y.dtype == dtype
        y.float().sum().backward()
        want = np.broadcast_to(kernel.astype("float64").sum(1), x.shape)
        tol = 1e-5 if dtype == torch.float32 else 5e-2
        np.testing.assert_allclose(xt.grad.float().numpy(), want, rtol=tol, atol=tol * 4)
    with torch.no_grad():  # inference keeps the packed-weight branch
        y = dense(torch.tensor(x), keras.Variable(kernel), None)
        assert y.grad_fn is None


def gelu_derivative(x, approximate):
    """d GELU / dx in float64: Φ(x) + x φ(x), or the derivative of the tanh form."""
    x = x.astype("float64")
    if not approximate:
        return 0.5 * (1 + scipy.special.erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_gelu_is_keras_gelu_with_the_exact_derivative(approximate):
    # On TensorFlow and JAX's CPU the gradient is written out from x (so the
    # backward keeps x alone), on TensorFlow's CPU both run as XLA kernels; everywhere it must be
    # GELU's derivative, also where tanh and exp saturate, and the forward
    # keras.ops.gelu's (to float32 rounding: XLA's tanh is its own).
    x = np.concatenate([rand(3, 50, scale=3.0).ravel(), [0.0, -40.0, 40.0, -1e3, 1e3]]).astype("float32")
    w = rand(x.size)
    y, g = value_and_gradient(lambda x: gelu(x, approximate), x, w)
    np.testing.assert_allclose(y, to_numpy(keras.ops.gelu(x, approximate=approximate)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y, reference(x[:, None], np.eye(1, dtype="float32"), None,
                                            "gelu_approximate" if approximate else "gelu", 1)[:, 0],
                               rtol=1e-6, atol=1e-6)
    # atol: 1 + tanh(x) cancels to 0 in float32 below x ≈ -4.5 (there the derivative is < 1e-5)
    np.testing.assert_allclose(g, w * gelu_derivative(x, approximate), rtol=2e-5, atol=1e-5)
    _, g_autodiff = value_and_gradient(lambda x: keras.ops.gelu(x, approximate=approximate), x, w)
    np.testing.assert_allclose(g, g_autodiff, rtol=2e-5, atol=5e-6)


def test_gelu_runs_as_xla_kernels_on_tensorflow_cpu():
    # The measured branch is taken where it was measured, and nowhere else.
    from keras_vit.layers import projection
    from keras_vit.layers._utils import backend_platform

    value_and_gradient(lambda x: gelu(x, True), rand(4, 8), rand(4, 8))
    compiled = {projection._gelu_tanh_value, projection._gelu_tanh_gradient} <= set(projection._XLA)
    if backend_platform() == ("tensorflow", "cpu"):
        assert compiled
    else:
        assert not compiled
        print(f"XLA's GELU is TensorFlow's CPU path; {backend_platform()} runs keras.ops")


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_gelu_gradient_is_written_out_on_jax_cpu(approximate):
    # On JAX's CPU the written-out gradient (from x alone) measured faster than
    # autodiff's, which keeps the forward's tanh: it must be the one traced there.
    from keras_vit.layers._utils import backend_platform

    if backend_platform() != ("jax", "cpu"):
        pytest.skip(f"the written-out GELU gradient on JAX is its CPU path; {backend_platform()} "
                    "is checked by the gradient tests above")
    import jax

    primitives = [e.primitive.name for e in jax.make_jaxpr(lambda x: gelu(x, approximate))(rand(4, 8)).eqns]
    assert primitives == ["custom_vjp_call"], primitives


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_gelu_gradient_in_bfloat16(approximate):
    # mixed_bfloat16 computes the MLP in bfloat16: the derivative must follow, to bfloat16's precision.
    x = rand(400, scale=3.0)
    xb = to_numpy(keras.ops.cast(keras.ops.cast(x, "bfloat16"), "float32"))  # the values bfloat16 holds
    w = rand(400)
    f = lambda x: gelu(keras.ops.cast(x, "bfloat16"), approximate)  # noqa: E731
    y, g = value_and_gradient(f, x, w)
    np.testing.assert_allclose(y, reference(xb[:, None], np.eye(1, dtype="float32"), None,
                                            "gelu_approximate" if approximate else "gelu", 1)[:, 0],
                               rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(g, w * gelu_derivative(xb, approximate), rtol=3e-2, atol=3e-2)


def test_dense_takes_variables_and_sees_every_change_of_them():
    # predict() after fit/assign must use the new weights: on torch the packed
    # oneDNN weights are cached per variable and re-packed when it changes.
    kernel = keras.Variable(rand(16, 24), name="kernel")
    bias = keras.Variable(rand(24), name="bias")
    x = rand(5, 16)
    for step in range(3):
        with no_grad():
            got = to_numpy(dense(x, kernel, bias, activation="gelu_approximate"))
        want = reference(x, to_numpy(kernel), to_numpy(bias), "gelu_approximate", 1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        if step == 0:
            kernel.assign(rand(16, 24))                 # assign / load_weights
        else:
            kernel.assign_add(np.ones((16, 24), "float32"))  # an optimizer's in-place update
    if BACKEND == "torch":  # the branch itself ran, and its cache holds this kernel once
        assert id(kernel.value) in _PACKED
    else:
        print(f"oneDNN's branch is torch's only; {BACKEND} checked through keras.ops")


def test_packed_weights_are_packed_once_under_mixed_precision():
    # mixed_bfloat16 reads each variable through a cast; the cache must still
    # hold one packed bfloat16 copy per kernel, reused by the next prediction
    # (packing at every call cost 17% of a B/16 prediction).
    model = ViT(image_size=16, patch_size=4, hidden_dim=32, num_layers=2, num_heads=4,
                mlp_dim=64, num_classes=5, dtype="mixed_bfloat16")
    x = rand(2, 16, 16, 3)
    first = to_numpy(model.predict_on_batch(x))
    if BACKEND != "torch":
        print(f"oneDNN's packed weights are torch's only; {BACKEND} checked through keras.ops")
        return
    kernels = [v for v in model.weights if v.path.startswith("encoder_block") and v.path.endswith("kernel")]
    assert len(kernels) == 2 * 6  # per block q, k, v, out, fc1, fc2
    packed = {id(v): _PACKED[id(v._value)][2] for v in kernels}
    import torch
    assert all(p.dtype == torch.bfloat16 for p in packed.values())
    np.testing.assert_array_equal(to_numpy(model.predict_on_batch(x)), first)
    assert all(_PACKED[id(v._value)][2] is packed[id(v)] for v in kernels)


def test_dense_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"activation must be one of"):
        dense(rand(2, 4), rand(4, 3), activation="relu")
    with pytest.raises(ValueError, match=r"last 2 axes of x \(2, 4\).*kernel's input axes \(4, 3\)"):
        dense(rand(2, 4), rand(4, 3, 5), input_axes=2)


def test_model_predict_after_fit_matches_autograd_forward():
    # The whole model: predict (torch: oneDNN, packed weights) equals the
    # plain forward, before and after a training step changes every weight.
    model = ViT(image_size=16, patch_size=4, hidden_dim=32, num_layers=2, num_heads=4,
                mlp_dim=64, num_classes=5)
    head = model.get_layer("head")
    head.kernel.assign(rand(*head.kernel.shape))
    x, y = rand(4, 16, 16, 3), np.arange(4) % 5
    model.compile(optimizer=keras.optimizers.AdamW(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    for _ in range(2):
        before = to_numpy(model.predict_on_batch(x))
        np.testing.assert_allclose(before, to_numpy(model(x)), rtol=1e-4, atol=1e-5)
        model.fit(x, y, epochs=1, verbose=0)
        assert np.abs(to_numpy(model.predict_on_batch(x)) - before).max() > 1e-3
