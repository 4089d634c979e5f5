"""keras_vit.kernels: each fast path against its keras.ops / Keras-layer
reference, the hand-over to the Keras layer (quantized, LoRA, export), and
the layout rules (no backend code in keras_vit/layers/, no import cycles)."""

import ast
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import scipy.special
import conftest
from helpers import TINY
from helpers import to_numpy
from helpers import value_and_gradient

import keras_vit
from keras_vit import ViT
from keras_vit import kernels
from keras_vit.kernels import projection
from keras_vit.kernels import routes

RNG = np.random.default_rng(0)
BACKEND = keras.backend.backend()
PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "keras_vit"


def rand(*shape, scale=1.0):
    return (RNG.normal(size=shape) * scale).astype("float32")


# The three kinds of projection in a ViT: (layer, input dims, contracted axes).
PROJECTIONS = {
    "mlp": (lambda: keras.layers.Dense(24), (16,), 1),
    "qkv": (lambda: keras.layers.EinsumDense("btd,dnh->btnh", (None, 4, 6), bias_axes="nh"), (16,), 1),
    "out": (lambda: keras.layers.EinsumDense("btnh,nhd->btd", (None, 16), bias_axes="d"), (4, 6), 2),
}


def projection_layer(kind):
    """A built projection of kind `kind` with random kernel and bias, and an input (3, 7, *in)."""
    make, in_dims, _ = PROJECTIONS[kind]
    layer = make()
    layer.build((3, 7, *in_dims))
    layer.kernel.assign(rand(*layer.kernel.shape, scale=0.3))
    layer.bias.assign(rand(*layer.bias.shape))
    return layer, rand(3, 7, *in_dims)


def reference(layer, x, activation):
    """float64 ``activation(x · kernel + bias)``."""
    _, _, input_axes = next(v for k, v in PROJECTIONS.items() if isinstance(layer, type(v[0]())) and
                            (not isinstance(layer, keras.layers.EinsumDense) or v[0]().equation == layer.equation))
    kernel = to_numpy(layer.kernel).astype("float64")
    x2 = x.astype("float64").reshape(x.shape[: x.ndim - input_axes] + (-1,))
    y = x2 @ kernel.reshape(x2.shape[-1], -1) + to_numpy(layer.bias).astype("float64").reshape(-1)
    if activation is not None:
        y = gelu64(y, activation == "gelu_approximate")
    return y.reshape(y.shape[:-1] + kernel.shape[input_axes:])


def gelu64(y, approximate):
    if approximate:
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))
    return 0.5 * y * (1 + scipy.special.erf(y / np.sqrt(2)))


def gelu_derivative(x, approximate):
    """d GELU / dx in float64: Φ(x) + x φ(x), or the derivative of the tanh form."""
    x = x.astype("float64")
    if not approximate:
        return 0.5 * (1 + scipy.special.erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    c = np.sqrt(2 / np.pi)
    t = np.tanh(c * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)


# -- dense ---------------------------------------------------------------------

@pytest.mark.parametrize("activation", [None, "gelu", "gelu_approximate"])
@pytest.mark.parametrize("kind", list(PROJECTIONS))
def test_dense_is_the_keras_layer_then_gelu(kind, activation):
    layer, x = projection_layer(kind)
    got = to_numpy(kernels.dense(layer, x, activation=activation))
    np.testing.assert_allclose(got, reference(layer, x, activation), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, to_numpy(kernels.dense_reference(layer, x, activation)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transposed_x", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("activation", [None, "gelu_approximate"])
@pytest.mark.parametrize("kind", list(PROJECTIONS))
def test_dense_input_gradient_is_the_float64_one(kind, activation, transposed_x):
    # Every backend must give the exact gradient to float32 rounding, also
    # where x arrives as a transposed view (strides, not a copy).
    layer, x = projection_layer(kind)
    w = rand(*reference(layer, x, None).shape)
    arrange = (lambda v: keras.ops.swapaxes(v, 0, 1)) if transposed_x else (lambda v: v)
    xin = np.swapaxes(x, 0, 1).copy() if transposed_x else x
    w_in = np.swapaxes(w, 0, 1).copy() if transposed_x else w
    y, dx = value_and_gradient(lambda v: arrange(kernels.dense(layer, arrange(v), activation)), xin, w_in)
    _, want = value_and_gradient(lambda v: arrange(kernels.dense_reference(layer, arrange(v), activation)),
                                 xin, w_in)
    want_y = reference(layer, x, activation)
    np.testing.assert_allclose(y, np.swapaxes(want_y, 0, 1) if transposed_x else want_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-5)
    # float64: d sum(w * act(x K + b)) / dx = (w act'(z)) Kᵀ
    kernel = to_numpy(layer.kernel).astype("float64")
    fan_in = int(np.prod(x.shape[2:]))
    z = reference(layer, x, None).reshape(-1, kernel.size // fan_in)
    dz = w.reshape(z.shape).astype("float64")
    if activation is not None:
        dz = dz * gelu_derivative(z, True)
    dx64 = (dz @ kernel.reshape(fan_in, -1).T).reshape(x.shape)
    np.testing.assert_allclose(dx, np.swapaxes(dx64, 0, 1) if transposed_x else dx64, rtol=1e-5, atol=1e-5)


def test_plain_projection_reads_the_contraction_and_refuses_what_keras_must_compute():
    assert [kernels.plain_projection(projection_layer(k)[0]) for k in PROJECTIONS] == [1, 1, 2]
    assert kernels.plain_projection(keras.layers.Dense(3, activation="relu")) is None
    assert kernels.plain_projection(keras.layers.EinsumDense("ab,bc->ac", (3,))) == 1
    assert kernels.plain_projection(keras.layers.EinsumDense("abc,cd->abd", (None, 3))) == 1
    assert kernels.plain_projection(keras.layers.EinsumDense("abc,dc->abd", (None, 3))) is None
    assert kernels.plain_projection(keras.layers.EinsumDense("...b,bc->...c", (3,))) is None
    assert kernels.plain_projection(keras.layers.LayerNormalization()) is None
    for mode in ("int8", "float8", "lora"):
        layer, _ = projection_layer("qkv")
        layer.enable_lora(2) if mode == "lora" else layer.quantize(mode)
        assert kernels.plain_projection(layer) is None, mode


@pytest.mark.parametrize("mode", ["int8", "float8", "int4", "lora"])
@pytest.mark.parametrize("kind", list(PROJECTIONS))
def test_dense_calls_a_quantized_or_lora_layer_itself(kind, mode):
    # Whatever Keras computes in the layer's call (quantized kernels and their
    # scales, float8 scaling, LoRA) is what dense gives: exactly layer(x),
    # or for int8 on a backend's int8 kernels what test_int8_dense_* checks.
    layer, x = projection_layer(kind)
    float_y = reference(layer, x, None)
    if mode == "lora":
        layer.enable_lora(2)
        layer.lora_kernel_b.assign(rand(*layer.lora_kernel_b.shape))
    else:
        layer.quantize(mode)
    got = to_numpy(kernels.dense(layer, x, activation="gelu"))
    if mode == "int8":
        path = kernels.route("int8_dense", layer=layer, x=keras.ops.convert_to_tensor(x))
        want = to_numpy(kernels.gelu(kernels.int8_dense(layer, x, path), approximate=False))
    else:
        want = to_numpy(kernels.gelu(layer(x), approximate=False))
    np.testing.assert_array_equal(got, want)
    if mode == "lora":
        assert np.abs(to_numpy(layer(x)) - float_y).max() > 1e-2  # the adapter counts
    else:
        tol = {"int8": 0.05, "float8": 0.1, "int4": 0.3}[mode]
        assert np.abs(to_numpy(layer(x)) - float_y).max() < tol * np.abs(float_y).max()


def int8_layer(kind):
    """A projection of kind `kind` quantized to int8 by Keras, its float64
    dequantized kernel ``(fan_in, fan_out)`` and bias, and an input (3, 7, *in)
    whose tokens span four decades of scale (Keras quantizes each on its own)."""
    layer, x = projection_layer(kind)
    x = x * np.logspace(-2, 2, 7, dtype="float32").reshape(1, 7, *[1] * (x.ndim - 2))
    layer.quantize("int8")
    scale = to_numpy(layer.kernel_scale).astype("float64").reshape(-1)
    kernel = to_numpy(layer.kernel).astype("float64").reshape(-1, scale.size) / scale
    return layer, x, kernel, to_numpy(layer.bias).astype("float64").reshape(-1)


def int8_rounding_bound(x, kernel, steps):
    """The largest error of ``x · kernel`` when each token of `x` is rounded
    to `steps` steps of its ``max|x|`` (a half step each way, and as much
    again for a shifted zero point: 2 / steps), plus float32's sums."""
    x2 = np.abs(x.astype("float64").reshape(-1, kernel.shape[0]))
    return (2 / steps) * x2.max(-1, keepdims=True) * np.abs(kernel).sum(0) + 1e-5 * (x2 @ np.abs(kernel) + 1)


# The rounding of the input that each path gives: Keras's (and XLA's) 127
# steps each way (254), PyTorch's dynamic int8 linear 127 over the range.
INT8_STEPS = {"reference": 254, "xla_int8": 254, "dynamic_int8": 127}


@pytest.mark.parametrize("kind", list(PROJECTIONS))
def test_int8_dense_is_keras_int8_call_to_the_inputs_rounding(kind):
    layer, x, kernel, bias = int8_layer(kind)
    keras_y = to_numpy(layer(x))
    np.testing.assert_allclose(to_numpy(kernels.int8_dense_reference(layer, x)), keras_y, rtol=1e-6, atol=1e-6)
    path = kernels.route("int8_dense", layer=layer, x=keras.ops.convert_to_tensor(x))
    assert path == {"tensorflow": "xla_int8", "torch": "dynamic_int8", "jax": routes.REFERENCE}[BACKEND]
    got = to_numpy(kernels.dense(layer, x))
    assert got.shape == keras_y.shape
    exact = x.astype("float64").reshape(-1, kernel.shape[0]) @ kernel + bias  # the int8 kernel, x unrounded
    for y, steps in ((keras_y, INT8_STEPS["reference"]), (got, INT8_STEPS[path])):
        error = np.abs(y.reshape(exact.shape) - exact)
        bound = int8_rounding_bound(x, kernel, steps)
        assert (error <= bound).all(), (steps, (error / bound).max())
    if path != "dynamic_int8":  # XLA's int8 dot: Keras's integers, its scales
        np.testing.assert_allclose(got, keras_y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", list(PROJECTIONS))
def test_int8_dense_gradient_is_keras_int8_gradient(kind):
    # Under autodiff PyTorch's route hands over to Keras's call; XLA's route
    # has Keras's gradient written out (through kernel / kernel_scale).
    layer, x, _, _ = int8_layer(kind)
    w = rand(*to_numpy(layer(x)).shape)
    y, dx = value_and_gradient(lambda v: kernels.dense(layer, v), x, w)
    want_y, want = value_and_gradient(lambda v: layer(v), x, w)
    np.testing.assert_allclose(y, want_y, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(dx, want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(BACKEND == "jax", reason="JAX runs Keras's int8 call")
def test_int8_dense_trains_the_bias_on_its_fast_path():
    # The input needs no gradient (frozen layers before it): PyTorch keeps
    # its int8 linear and adds the bias in autograd; TensorFlow's gradient
    # is written out. d sum(w * y) / d bias = w summed over the tokens.
    layer, x, _, _ = int8_layer("qkv")
    w = rand(*to_numpy(layer(x)).shape)
    x = keras.ops.convert_to_tensor(x)
    assert kernels.route("int8_dense", layer=layer, x=x) != routes.REFERENCE
    if BACKEND == "tensorflow":
        import tensorflow as tf
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(kernels.dense(layer, x) * w)
        (grad,) = tape.gradient(loss, layer.trainable_variables)
    else:
        (kernels.dense(layer, x) * keras.ops.convert_to_tensor(w)).sum().backward()
        grad = layer.bias.value.grad
    np.testing.assert_allclose(to_numpy(grad), w.sum(axis=(0, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's packed int8 kernel")
def test_int8_kernel_is_packed_once_and_again_after_its_variables_change():
    from keras_vit.kernels import quantized

    layer, x, _, _ = int8_layer("qkv")
    other, third = int8_layer("qkv")[0], int8_layer("qkv")[0]
    first = quantized._packed_kernel(layer)
    kernels.dense(layer, x)
    assert quantized._packed_kernel(layer) is first
    for variable in (layer.kernel, layer.kernel_scale):  # each assign packs again
        variable.assign(to_numpy(getattr(other, variable.name)))
        assert quantized._packed_kernel(layer) is not first
        first = quantized._packed_kernel(layer)
    layer.bias.assign(to_numpy(other.bias))
    np.testing.assert_array_equal(to_numpy(kernels.dense(layer, x)), to_numpy(kernels.dense(other, x)))
    layer.set_weights(third.get_weights())  # as load_weights
    want = to_numpy(kernels.int8_dense_reference(third, x))
    got = to_numpy(kernels.dense(layer, x))
    assert np.abs(got - want).max() < 0.03 * np.abs(want).max()


def int8_model():
    """A small ViT, every weight random (the head's too), and images."""
    model = ViT(image_size=16, patch_size=4, hidden_dim=32, num_layers=2, num_heads=4, mlp_dim=64,
                num_classes=10, gelu_approximate=False)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype("float32"))
    return model, rng.uniform(-1, 1, (16, 16, 16, 3)).astype("float32")


@pytest.mark.slow
def test_int8_model_logits_are_keras_int8_logits():
    model, x = int8_model()
    full = to_numpy(model.predict_on_batch(x))
    model.quantize("int8")
    fast = to_numpy(model.predict_on_batch(x))
    with kernels.keras_layers_only():  # Keras's own int8 call in every projection
        plain = to_numpy(model(x))
    spread = full.max() - full.min()
    print(f"int8 logit error / range: fast {np.abs(fast - full).max() / spread:.4f}, "
          f"Keras {np.abs(plain - full).max() / spread:.4f}")
    assert np.abs(fast - plain).max() < 0.03 * spread
    np.testing.assert_array_equal(fast.argmax(-1), plain.argmax(-1))
    np.testing.assert_array_equal(fast.argmax(-1), full.argmax(-1))


def test_dense_errors_name_the_problem():
    layer, x = projection_layer("mlp")
    with pytest.raises(ValueError, match=r"activation must be one of \(None, 'gelu', 'gelu_approximate'\), got 'relu'"):
        kernels.dense(layer, x, activation="relu")


@pytest.mark.skipif(conftest.BACKEND != "jax", reason="compiled programs kept per call are JAX's: "
                    "TensorFlow and PyTorch run eager ops without compiling them")
@pytest.mark.slow
def test_an_eager_call_on_jax_compiles_only_the_first_time():
    """JAX compiles each program an eager call runs once and keeps it: the
    same call again, on a fixed model, on one that merges tokens (the keys'
    offsets) and on NaFlex inputs (the key mask), traces and compiles
    nothing. `per_image_attention` loops with the same step function each
    time for that."""
    import jax

    events = []

    def record(event, duration, **kwargs):
        if event.startswith("/jax/core/compile/"):
            events.append(event)

    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    fixed = ViT(**TINY)
    merging, flex = fixed.with_token_merging(2), fixed.with_naflex(16)
    calls = {"fixed": lambda: fixed(x), "token merging": lambda: merging(x),
             "naflex": lambda: flex(keras_vit.naflex_inputs(x, 8, 16))}
    jax.monitoring.register_event_duration_secs_listener(record)
    try:
        for name, call in calls.items():
            call()
            events.clear()
            call()
            assert events == [], f"{name}: the second eager call compiled again: {events}"
    finally:
        jax.monitoring.unregister_event_duration_listener(record)


def test_projection_runs_the_sequential_matmul_on_jax_cpu_only():
    from unittest import mock

    layer, x = projection_layer("out")
    with mock.patch.object(projection, "_jax_sequential_matmul", wraps=projection._jax_sequential_matmul) as spy:
        kernels.dense(layer, x)
        with kernels.keras_layers_only():
            kernels.dense(layer, x)
    assert spy.call_count == (1 if kernels.backend_platform() == ("jax", "cpu") else 0)


def test_matmul_in_bfloat16_is_the_product_of_the_bfloat16_values():
    # mixed_bfloat16's projections: the float64 product of the values bfloat16
    # holds, rounded once to bfloat16, and so are both gradients. On JAX's CPU
    # the product is asked for in float32 (XLA:CPU runs only bf16 x bf16 ->
    # f32 on YNNPACK's bfloat16 kernels; bf16 -> bf16 on Eigen, slower).
    x, kernel, w = rand(3, 7, 16), rand(16, 24, scale=0.3), rand(3, 7, 24)
    bf16 = lambda v: keras.ops.cast(v, "bfloat16")  # noqa: E731
    x16, k16, w16 = (to_numpy(keras.ops.cast(bf16(v), "float32")).astype("float64") for v in (x, kernel, w))
    y, dx = value_and_gradient(lambda v: kernels.matmul(bf16(v), bf16(kernel)), x, w)
    _, dk = value_and_gradient(lambda k: kernels.matmul(bf16(x), bf16(k)), kernel, w)
    assert keras.backend.standardize_dtype(kernels.matmul(bf16(x), bf16(kernel)).dtype) == "bfloat16"
    # w16: the upstream gradient, cast to bfloat16 like the product it multiplies
    for got, want in ((y, x16 @ k16), (dx, w16 @ k16.T), (dk, x16.reshape(-1, 16).T @ w16.reshape(-1, 24))):
        np.testing.assert_allclose(got, want, rtol=2 ** -8, atol=2 ** -8 * np.abs(want).max())
    if kernels.backend_platform() == ("jax", "cpu"):
        import jax

        program = str(jax.make_jaxpr(kernels.matmul)(bf16(x), bf16(kernel)))
        assert "preferred_element_type=float32" in program, program
        # The gradient's products too, as XLA:CPU compiles them: each dot reads
        # two bfloat16 operands laid out as it multiplies them (XLA:CPU runs a
        # bf16 dot with a transposed operand in float32, on Eigen or YNNPACK's
        # float32 kernels: 3-4x slower on an Intel Xeon with AMX).
        gradient = jax.jit(lambda a, b, up: jax.vjp(kernels.matmul, a, b)[1](up))
        compiled = gradient.lower(bf16(x), bf16(kernel), bf16(w)).compile().as_text()
        dots, header = 0, ""
        for line in compiled.splitlines():
            if line.lstrip().startswith(("%", "ENTRY")) and line.rstrip().endswith("{"):
                header = line  # the computation the next lines belong to, with its parameters
            elif " dot(" in line:
                dots += 1
                parameters = header[header.index("(") + 1: header.index("->")]
                assert "lhs_contracting_dims={1}, rhs_contracting_dims={0}" in line, line
                assert "f32[" not in parameters and "bf16[" in parameters, header
        assert dots == 2, compiled


# -- GELU ----------------------------------------------------------------------

@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
@pytest.mark.slow
def test_gelu_is_keras_gelu_with_the_exact_derivative(approximate, request):
    # On TensorFlow and JAX's CPU the gradient is written out from x (so the
    # backward keeps x alone), on TensorFlow's CPU both run as XLA kernels;
    # everywhere it must be GELU's derivative, also where tanh and exp
    # saturate, and the forward keras.ops.gelu's (to float32 rounding).
    if approximate and BACKEND in ("tensorflow", "jax") and conftest.fast_xla_compiles():
        # What users run: XLA's tanh as its default settings compile it (conftest.FAST_XLA_COMPILES:
        # the cheapest level's tanh saturates past -1, and the gradient it gives
        # where GELU's is 0 reached 8.5e-6 on JAX, which some draws of x and w
        # took past the 1e-5 below).
        # --run-slow: this test is slow, which plain pytest would leave out.
        run = subprocess.run([sys.executable, "-m", "pytest", request.node.nodeid, "--run-slow", "-q",
                              "-p", "no:cacheprovider"],
                             env={**os.environ, conftest.DEFAULT_XLA: "1"}, cwd=request.config.rootpath,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-3000:]
        print(f"{request.node.name}: passed in a process with XLA's default settings")
        return
    x = np.concatenate([rand(3, 50, scale=3.0).ravel(), [0.0, -40.0, 40.0, -1e3, 1e3]]).astype("float32")
    w = rand(x.size)
    y, g = value_and_gradient(lambda x: kernels.gelu(x, approximate), x, w)
    np.testing.assert_allclose(y, to_numpy(kernels.gelu_reference(x, approximate)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y, gelu64(x.astype("float64"), approximate), rtol=1e-6, atol=1e-6)
    # atol: 1 + tanh(x) cancels to 0 in float32 below x ≈ -4.5 (there the derivative is < 1e-5)
    np.testing.assert_allclose(g, w * gelu_derivative(x, approximate), rtol=2e-5, atol=1e-5)
    _, g_autodiff = value_and_gradient(lambda x: keras.ops.gelu(x, approximate=approximate), x, w)
    np.testing.assert_allclose(g, g_autodiff, rtol=2e-5, atol=5e-6)


def test_gelu_runs_as_xla_kernels_on_tensorflow_cpu():
    # The measured branch is taken where it was measured, and nowhere else.
    value_and_gradient(lambda x: kernels.gelu(x, True), rand(4, 8), rand(4, 8))
    compiled = {projection._gelu_tanh_value, projection._gelu_tanh_gradient} <= set(projection._XLA)
    if kernels.backend_platform() == ("tensorflow", "cpu"):
        assert compiled
    else:
        assert not compiled
        print(f"XLA's GELU is TensorFlow's CPU path; {kernels.backend_platform()} runs keras.ops")


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_gelu_gradient_is_written_out_on_jax_cpu(approximate):
    # On JAX's CPU the written-out gradient (from x alone) measured faster than
    # autodiff's, which keeps the forward's tanh: it must be the one traced there.
    if kernels.backend_platform() != ("jax", "cpu"):
        pytest.skip(f"the written-out GELU gradient on JAX is its CPU path; {kernels.backend_platform()} "
                    "is checked by the gradient tests above")
    import jax

    def primitives(fn):
        return [e.primitive.name for e in jax.make_jaxpr(fn)(rand(4, 8)).eqns]
    assert primitives(lambda x: kernels.gelu(x, approximate)) == ["custom_vjp_call"]
    with kernels.keras_layers_only():
        assert "custom_vjp_call" not in primitives(lambda x: kernels.gelu(x, approximate))


@pytest.mark.parametrize("approximate", [True, False], ids=["tanh", "erf"])
def test_gelu_gradient_in_bfloat16(approximate):
    # mixed_bfloat16 computes the MLP in bfloat16: the derivative must follow, to bfloat16's precision.
    x = rand(400, scale=3.0)
    xb = to_numpy(keras.ops.cast(keras.ops.cast(x, "bfloat16"), "float32"))  # the values bfloat16 holds
    w = rand(400)
    y, g = value_and_gradient(lambda x: kernels.gelu(keras.ops.cast(x, "bfloat16"), approximate), x, w)
    np.testing.assert_allclose(y, gelu64(xb.astype("float64"), approximate), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(g, w * gelu_derivative(xb, approximate), rtol=3e-2, atol=3e-2)


# -- the whole model -----------------------------------------------------------

def model_gradients(model, x, labels):
    """(loss, [d loss / d v for v in model.trainable_variables]) as numpy, by the backend's autodiff."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if BACKEND == "tensorflow":
        import tensorflow as tf
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
    elif BACKEND == "jax":
        import jax
        trainable = [v.value for v in model.trainable_variables]
        other = [v.value for v in model.non_trainable_variables]

        def f(trainable):
            return loss_fn(labels, model.stateless_call(trainable, other, x, training=True)[0])
        loss, grads = jax.jit(jax.value_and_grad(f))(trainable)  # compiled, as in training
    else:
        model.zero_grad()
        loss = loss_fn(labels, model(x, training=True))
        loss.backward()
        grads = [v.value.grad for v in model.trainable_variables]
    return to_numpy(loss), [to_numpy(g) for g in grads]


@pytest.mark.slow
def test_model_fast_paths_give_the_keras_layers_logits_and_gradients():
    # The whole ViT with every fast path of this backend against the same
    # weights through Keras's layers and ops alone (what export traces).
    model = ViT(image_size=16, patch_size=4, hidden_dim=32, num_layers=2, num_heads=4,
                mlp_dim=64, num_classes=5, gelu_approximate=False)
    head = model.get_layer("head")
    head.kernel.assign(rand(*head.kernel.shape))
    x, labels = rand(4, 16, 16, 3), np.arange(4) % 5
    fast = to_numpy(model.predict_on_batch(x)), model_gradients(model, x, labels)
    with kernels.keras_layers_only():
        assert not kernels.fast_paths_enabled()
        plain = to_numpy(model(x)), model_gradients(model, x, labels)
    assert kernels.fast_paths_enabled()
    np.testing.assert_allclose(fast[0], plain[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fast[1][0], plain[1][0], rtol=1e-5)
    for got, want in zip(fast[1][1], plain[1][1]):  # float32 rounding of O(1) gradients
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(want).max()))


@pytest.mark.slow
def test_model_predict_after_fit_matches_its_forward():
    # predict equals the plain forward, before and after a training step changes every weight.
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


# -- routes ------------------------------------------------------------------------

NAMES = {"JAX": "jax", "TensorFlow": "tensorflow", "PyTorch": "torch", "CPU": "cpu", "GPU": "gpu"}


@pytest.mark.backend_independent
def test_the_table_in_kernels_docstring_is_the_routes_table():
    rows = set()
    for line in kernels.__doc__.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`") or cells[0] == "operation":
            continue
        operation, path = cells[0].strip("`"), cells[2].split("`")[1]
        for where in cells[1].split(", "):
            backend, *platform = where.split()
            rows.add((operation, NAMES[backend], NAMES[platform[0]] if platform else None, path))
    table = {(op, backend, platform, path)
             for op, paths in kernels.FAST_PATHS.items() for (backend, platform), path in paths.items()}
    assert rows == table, (rows - table, table - rows)


def test_route_names_each_condition_here():
    backend, platform = kernels.backend_platform()
    before = routes._platform.cache_info()
    assert kernels.backend_platform() == (keras.backend.backend(), platform)
    after = routes._platform.cache_info()  # looked up once per backend, then cached
    assert (after.misses, after.hits) == (before.misses, before.hits + 1)

    def expected(operation):
        paths = kernels.FAST_PATHS[operation]
        return paths.get((backend, platform), paths.get((backend, None))) or routes.REFERENCE

    dense = keras.layers.Dense(4)
    dense.build((2, 8))
    norm = keras.layers.LayerNormalization()
    norm.build((2, 8))
    x = np.zeros((2, 8), "float32")
    q = np.zeros((2, 5, 2, 4), "float32")
    assert kernels.route("dense", layer=dense) == expected("dense")
    assert kernels.route("matmul") == expected("matmul")
    assert kernels.route("gelu") == expected("gelu")
    assert kernels.route("layer_norm", layer=norm, x=x) == expected("layer_norm")
    attention = expected("attention")
    if attention == "padded_cudnn":  # float32 and 5 tokens: Keras's path
        attention = routes.REFERENCE
    assert kernels.route("attention", query=q, key=q, training=True) == attention
    # The weights asked for, or dropped out while training: written out, everywhere.
    assert kernels.route("attention", query=q, key=q, weights=True) == routes.WEIGHTS
    assert kernels.route("attention", query=q, key=q, training=True, dropout=True) == routes.WEIGHTS
    assert kernels.route("attention", query=q, key=q, training=False, dropout=True) != routes.WEIGHTS
    # What only the Keras layer computes.
    dense.quantize("int8")
    assert kernels.route("dense", layer=dense) == routes.REFERENCE
    x_tensor = keras.ops.convert_to_tensor(x)
    assert kernels.route("int8_dense", layer=dense, x=x_tensor) == expected("int8_dense")
    assert kernels.route("int8_dense", layer=norm, x=x_tensor) == routes.REFERENCE
    for mode in ("int4", "float8", "lora"):
        layer = keras.layers.Dense(4)
        layer.build((2, 8))
        layer.enable_lora(2) if mode == "lora" else layer.quantize(mode)
        assert kernels.int8_projection(layer) is None, mode
        assert kernels.route("int8_dense", layer=layer, x=x_tensor) == routes.REFERENCE, mode
    if backend == "torch":  # autograd through PyTorch's int8 linear: Keras's call
        watched = keras.ops.convert_to_tensor(x).requires_grad_()
        assert kernels.route("int8_dense", layer=dense, x=watched) == routes.REFERENCE
    assert kernels.route("layer_norm", layer=keras.layers.LayerNormalization(center=False), x=x) == routes.REFERENCE
    assert kernels.route("layer_norm", layer=keras.layers.LayerNormalization(axis=0), x=x) == routes.REFERENCE
    # Export tracing: every operation its reference.
    with kernels.keras_layers_only():
        for operation in ("matmul", "gelu"):
            assert kernels.route(operation) == routes.REFERENCE
        assert kernels.route("int8_dense", layer=dense, x=x_tensor) == routes.REFERENCE
        assert kernels.route("layer_norm", layer=norm, x=x) == routes.REFERENCE
        assert kernels.route("attention", query=q, key=q, weights=True) == routes.REFERENCE
    with pytest.raises(ValueError, match="unknown operation 'softmax'; one of"):
        kernels.route("softmax")


# -- layout ----------------------------------------------------------------------

BACKEND_MODULES = ("jax", "tensorflow", "torch", "flax", "numpy.core")


def test_layers_hold_no_backend_code():
    # keras_vit/layers/ is the paper's math over keras.ops and Keras layers:
    # no backend import, no backend check (those live in keras_vit/kernels/).
    found = []
    for path in sorted((PACKAGE / "layers").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            found += [f"{path.name}: import {n}" for n in names if n.split(".")[0] in BACKEND_MODULES]
            if isinstance(node, ast.Attribute) and node.attr in ("backend", "backend_platform"):
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.Name) and node.id == "backend_platform":
                found.append(f"{path.name}:{node.lineno}: backend_platform")
        assert path.read_text().count("keras.src") == 0, path
    assert not found, found
    assert (PACKAGE / "kernels" / "__init__.py").exists()


def module_imports():
    """module -> the keras_vit modules it imports (at module level or inside a
    function: an import on use is a dependency all the same), and the
    private names it imports from another module."""
    graph, private = {}, []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_vit"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if (PACKAGE.parent / full.replace(".", "/")).with_suffix(".py").exists()
                             or (PACKAGE.parent / full.replace(".", "/")).is_dir() else node.module)
                    if alias.name.startswith("_"):
                        private.append(f"{name} imports {full}")
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("keras_vit")}
        graph[name] = deps - {name}
    return graph, private


def test_no_import_cycles_and_no_private_names_across_modules():
    graph, private = module_imports()
    assert not private, private

    def package_of(module):
        return module.rsplit(".", 1)[0] if module not in graph or not (
            PACKAGE.parent / module.replace(".", "/")).is_dir() else module

    cycles = []

    def visit(module, stack):
        if module in stack:
            cycle = stack[stack.index(module):] + [module]
            # a package importing its own submodules (its __init__) is not a cycle
            if not all(m == cycle[0] or m.startswith(cycle[0] + ".") for m in cycle):
                cycles.append(" -> ".join(cycle))
            return
        for dep in graph.get(module, ()):
            if not (module.startswith(dep + ".")):  # a submodule importing its package's __init__
                visit(dep, stack + [module])

    for module in graph:
        visit(module, [])
    assert not cycles, cycles[:5]
