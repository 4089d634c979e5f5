"""PyTorch tensor layouts <-> Keras layouts, and reading safetensors files."""

import numpy as np

from keras_vit.weights.assign import CheckpointError


def load_safetensors(path):
    """Every tensor of a ``.safetensors`` file, as float32 NumPy arrays."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        return {k: np.asarray(v, dtype=np.float32) for k, v in load_file(str(path)).items()}
    except TypeError:  # "data type 'bfloat16' not understood" by NumPy
        return _load_with_ml_dtypes(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path} could not be read as safetensors ({error}). The file may be "
            "truncated: download or save it again."
        ) from error


def _load_with_ml_dtypes(path):
    """bfloat16 tensors: NumPy has no such dtype, ml_dtypes does."""
    import json
    import struct

    import ml_dtypes

    dtypes = {"BF16": ml_dtypes.bfloat16, "F16": np.float16, "F32": np.float32, "F64": np.float64}
    with open(path, "rb") as file:
        (size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(size))
        data = file.read()
    arrays = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(data[start:end], dtype=dtypes[info["dtype"]])
        arrays[name] = array.reshape(info["shape"]).astype(np.float32)
    return arrays


def conv(weight):
    """OIHW -> HWIO."""
    return weight.transpose(2, 3, 1, 0)


def linear(weight):
    """(out, in) -> (in, out)."""
    return weight.T


def heads_in(weight, num_heads):
    """A q/k/v ``Linear`` weight (H*hd, D) -> (D, H, hd)."""
    return weight.T.reshape(weight.shape[1], num_heads, -1)


def heads_bias(bias, num_heads):
    """(H*hd,) -> (H, hd)."""
    return bias.reshape(num_heads, -1)


def heads_out(weight, num_heads):
    """The output ``Linear`` weight (D, H*hd) -> (H, hd, D)."""
    return weight.T.reshape(num_heads, -1, weight.shape[0])


def conv_to_torch(kernel):
    """HWIO -> OIHW (`conv`'s inverse)."""
    return np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))


def linear_to_torch(kernel):
    """(in, out) -> (out, in) (`linear`'s inverse)."""
    return np.ascontiguousarray(kernel.T)


def heads_in_to_torch(kernel):
    """(D, H, hd) -> (H*hd, D) (`heads_in`'s inverse)."""
    return np.ascontiguousarray(kernel.reshape(kernel.shape[0], -1).T)


def heads_out_to_torch(kernel):
    """(H, hd, D) -> (D, H*hd) (`heads_out`'s inverse)."""
    return np.ascontiguousarray(kernel.reshape(-1, kernel.shape[-1]).T)


class TorchReader:
    """Takes tensors out of a state dict, so unused ones can be reported."""

    def __init__(self, tensors, source):
        self.tensors, self.source, self.state = dict(tensors), source, {}

    def has(self, key):
        """Whether the state dict still holds `key`."""
        return key in self.tensors

    def pop(self, key):
        """Takes the tensor `key` out of the state dict.

        Raises:
            CheckpointError: the key is missing.
        """
        if key not in self.tensors:
            unread = sorted(self.tensors)
            raise CheckpointError(
                f"{self.source}: expected key '{key}' is missing."
                + (f" The keys not read yet: {unread[:6]}"
                   + (f" and {len(unread) - 6} more." if len(unread) > 6 else ".") if unread else "")
            )
        return self.tensors.pop(key)

    def put(self, target, value):
        """Stores `value` under the Keras variable path `target`."""
        self.state[target] = value

    def layer_norm(self, key, target):
        """Moves a ``LayerNorm``'s weight and bias to `target`'s gamma and beta."""
        self.put(target + "/gamma", self.pop(key + ".weight"))
        self.put(target + "/beta", self.pop(key + ".bias"))

    def linear(self, key, target):
        """Moves a ``Linear`` layer (transposed kernel, optional bias) to `target`."""
        self.put(target + "/kernel", linear(self.pop(key + ".weight")))
        if self.has(key + ".bias"):
            self.put(target + "/bias", self.pop(key + ".bias"))

    def attention(self, qkv, out, target, num_heads):
        """`qkv`: three (weight, bias-or-None) pairs; `out`: the key prefix."""
        for name, (weight, bias) in zip(("query", "key", "value"), qkv):
            self.put(f"{target}/{name}/kernel", heads_in(weight, num_heads))
            if bias is not None:
                self.put(f"{target}/{name}/bias", heads_bias(bias, num_heads))
        self.put(f"{target}/out/kernel", heads_out(self.pop(out + ".weight"), num_heads))
        self.put(f"{target}/out/bias", self.pop(out + ".bias"))

    def read_top(self, pre_logits, head, config):
        """The optional tanh pre-logits layer and linear head; their sizes
        go into `config` (``num_classes=0`` when there is no head)."""
        if self.has(pre_logits + ".weight"):
            self.linear(pre_logits, "pre_logits")
            config["representation_size"] = int(self.state["pre_logits/kernel"].shape[1])
        config["num_classes"] = 0
        if self.has(head + ".weight"):
            self.linear(head, "head")
            config["num_classes"] = int(self.state["head/kernel"].shape[1])

    def finish(self):
        """Checks that every tensor was used.

        Raises:
            CheckpointError: the state dict has keys nothing read.
        """
        if self.tensors:
            raise CheckpointError(
                f"{self.source} has keys keras_vit does not know, so it would load "
                f"only part of the model: {sorted(self.tensors)[:12]}"
            )


class TorchWriter:
    """`TorchReader`'s inverse: takes a model's variables (path -> array)
    out of its state into a PyTorch state dict, so what no key took can be
    reported."""

    def __init__(self, state, name):
        self.state, self.name, self.tensors = dict(state), name, {}

    def has(self, path):
        """Whether the model's state still holds `path`."""
        return path in self.state

    def put(self, key, path):
        """Moves the variable `path` to the key `key` as it is."""
        self.tensors[key] = self.state.pop(path)

    def layer_norm(self, source, key):
        """Moves a LayerNormalization's gamma and beta to ``key.weight`` and ``key.bias``."""
        self.put(key + ".weight", source + "/gamma")
        self.put(key + ".bias", source + "/beta")

    def linear(self, source, key, layout=linear_to_torch):
        """Moves a layer's kernel (in `layout`) and bias (flattened, if any) to `key`."""
        self.tensors[key + ".weight"] = layout(self.state.pop(source + "/kernel"))
        if self.has(source + "/bias"):
            self.tensors[key + ".bias"] = self.state.pop(source + "/bias").reshape(-1)

    def fused(self, source, names, key):
        """The projections `names` under `source` (q, k, v or k, v) as one ``Linear``."""
        self.tensors[key + ".weight"] = np.concatenate(
            [heads_in_to_torch(self.state.pop(f"{source}/{n}/kernel")) for n in names])
        if self.has(f"{source}/{names[0]}/bias"):
            self.tensors[key + ".bias"] = np.concatenate(
                [self.state.pop(f"{source}/{n}/bias").reshape(-1) for n in names])

    def finish(self, format):
        """Checks that every variable was written.

        Raises:
            CheckpointError: variables no key of `format` took.
        """
        if self.state:
            raise CheckpointError(
                f"{self.name}: the {format} writer has no key for {sorted(self.state)[:8]}.")
