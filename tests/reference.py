"""An independent NumPy Vision Transformer, written from the paper and the
Flax parameter names of vit_jax, for checking keras_vit's numbers.

It shares no code with keras_vit: it reads a flat dict of Flax arrays
(``embedding/kernel``, ``Transformer/encoderblock_0/...``) and computes
Eq. 1-4 in float64.
"""

import math

import numpy as np


def gelu(x, approximate):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def layer_norm(x, scale, bias, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale.reshape(-1) + bias.reshape(-1)


def _same_pad(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv2d(x, kernel, stride, padding):
    """x (B,H,W,C), kernel HWIO, TF/Flax 'SAME' or 'VALID' padding."""
    kh, kw = kernel.shape[:2]
    if padding == "SAME":
        x = np.pad(x, ((0, 0), _same_pad(x.shape[1], kh, stride), _same_pad(x.shape[2], kw, stride), (0, 0)))
    out_h = (x.shape[1] - kh) // stride + 1
    out_w = (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], out_h, out_w, kernel.shape[-1]))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + stride * out_h:stride, j:j + stride * out_w:stride]
            out += np.einsum("bhwc,cd->bhwd", patch, kernel[i, j])
    return out


def max_pool_same(x, size=3, stride=2):
    pads = (_same_pad(x.shape[1], size, stride), _same_pad(x.shape[2], size, stride))
    x = np.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=-np.inf)
    out_h = (x.shape[1] - size) // stride + 1
    out_w = (x.shape[2] - size) // stride + 1
    out = np.full((x.shape[0], out_h, out_w, x.shape[3]), -np.inf)
    for i in range(size):
        for j in range(size):
            out = np.maximum(out, x[:, i:i + stride * out_h:stride, j:j + stride * out_w:stride])
    return out


def std_conv(x, kernel, stride):
    """BiT weight standardization: (w - mean) / (std + 1e-5) over HWI."""
    kernel = kernel - kernel.mean(axis=(0, 1, 2))
    kernel = kernel / (kernel.std(axis=(0, 1, 2)) + 1e-5)
    return conv2d(x, kernel, stride, "SAME")


def group_norm(x, scale, bias, groups=32, eps=1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(b, h, w, c) * scale.reshape(-1) + bias.reshape(-1)


def resnet(p, x):
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    x = relu(group_norm(std_conv(x, p["conv_root/kernel"], 2), p["gn_root/scale"], p["gn_root/bias"]))
    x = max_pool_same(x)
    stage = 1
    while f"block{stage}/unit1/conv1/kernel" in p:
        unit = 1
        while f"block{stage}/unit{unit}/conv1/kernel" in p:
            u = f"block{stage}/unit{unit}/"
            stride = 2 if stage > 1 and unit == 1 else 1
            residual = x
            if u + "conv_proj/kernel" in p:
                residual = group_norm(std_conv(x, p[u + "conv_proj/kernel"], stride), p[u + "gn_proj/scale"], p[u + "gn_proj/bias"])
            y = relu(group_norm(std_conv(x, p[u + "conv1/kernel"], 1), p[u + "gn1/scale"], p[u + "gn1/bias"]))
            y = relu(group_norm(std_conv(y, p[u + "conv2/kernel"], stride), p[u + "gn2/scale"], p[u + "gn2/bias"]))
            y = group_norm(std_conv(y, p[u + "conv3/kernel"], 1), p[u + "gn3/scale"], p[u + "gn3/bias"])
            x = relu(residual + y)
            unit += 1
        stage += 1
    return x


def attention(p, prefix, q_in, kv_in, record=None):
    q = np.einsum("btd,dnh->btnh", q_in, p[prefix + "query/kernel"]) + p[prefix + "query/bias"]
    k = np.einsum("btd,dnh->btnh", kv_in, p[prefix + "key/kernel"]) + p[prefix + "key/bias"]
    v = np.einsum("btd,dnh->btnh", kv_in, p[prefix + "value/kernel"]) + p[prefix + "value/bias"]
    logits = np.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(q.shape[-1])
    logits -= logits.max(-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(-1, keepdims=True)
    if record is not None:
        record.append(weights)
    out = np.einsum("bnqk,bknh->bqnh", weights, v)
    return np.einsum("bqnh,nhd->bqd", out, p[prefix + "out/kernel"]) + p[prefix + "out/bias"]


def mlp(p, prefix, x, approximate):
    h = gelu(x @ p[prefix + "Dense_0/kernel"] + p[prefix + "Dense_0/bias"], approximate)
    return h @ p[prefix + "Dense_1/kernel"] + p[prefix + "Dense_1/bias"]


def vit_forward(params, images, eps=1e-6, approximate_gelu=True, record=None, prompts=None):
    """Logits (or features) of the vit_jax model in ``params`` on ``images``;
    each encoder block's attention weights are appended to `record`.

    `prompts`: visual prompt tuning's tokens, ``(depth, N, D)``, as KMnP/vpt
    ``src/models/vit_prompt/vit.py`` computes them (``PromptedTransformer``):
    ``incorporate_prompt`` puts row 0 after the [class] token, after the
    position embeddings; with ``depth > 1`` (``forward_deep_prompt``) block
    ``i >= 1`` first replaces the ``N`` tokens after [class] with row ``i``
    (VPT's ``deep_prompt_embeddings[i - 1]``). The head reads the final
    norm's [class] token; without one the mean (or MAP) pools the patches
    alone, never the prompts."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(images, np.float64)
    if "conv_root/kernel" in p:
        x = resnet(p, x)
    patch = p["embedding/kernel"].shape[0]
    x = conv2d(x, p["embedding/kernel"], patch, "VALID") + p["embedding/bias"]     # Eq. 1: x_p E
    b, h, w, d = x.shape
    x = x.reshape(b, h * w, d)
    if "cls" in p:
        x = np.concatenate([np.broadcast_to(p["cls"], (b, 1, d)), x], axis=1)     # [x_class; ...]
    x = x + p["Transformer/posembed_input/pos_embedding"]                           # + E_pos
    start = int("cls" in p)
    if prompts is not None:                                                         # VPT
        prompts = np.asarray(prompts, np.float64)
        n = prompts.shape[1]
        x = np.concatenate([x[:, :start], np.broadcast_to(prompts[0], (b, n, d)), x[:, start:]], axis=1)
    i = 0
    while f"Transformer/encoderblock_{i}/LayerNorm_0/scale" in p:
        blk = f"Transformer/encoderblock_{i}/"
        if prompts is not None and i and len(prompts) > 1:                           # VPT-deep
            x = np.concatenate([x[:, :start], np.broadcast_to(prompts[i], (b, n, d)),
                                x[:, start + n:]], axis=1)
        y = layer_norm(x, p[blk + "LayerNorm_0/scale"], p[blk + "LayerNorm_0/bias"], eps)
        x = x + attention(p, blk + "MultiHeadDotProductAttention_1/", y, y, record)  # Eq. 2
        y = layer_norm(x, p[blk + "LayerNorm_2/scale"], p[blk + "LayerNorm_2/bias"], eps)
        x = x + mlp(p, blk + "MlpBlock_3/", y, approximate_gelu)                    # Eq. 3
        i += 1
    x = layer_norm(x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"], eps)
    if prompts is not None:  # the pooling reads the [class] token and the patches
        x = np.concatenate([x[:, :start], x[:, start + n:]], axis=1)
    if "MAPHead_0/probe" in p:                                                      # MAP head
        probe = np.broadcast_to(p["MAPHead_0/probe"], (b, 1, d))
        y = attention(p, "MAPHead_0/MultiHeadDotProductAttention_0/", probe, x)
        n = layer_norm(y, p["MAPHead_0/LayerNorm_0/scale"], p["MAPHead_0/LayerNorm_0/bias"], eps)
        x = (y + mlp(p, "MAPHead_0/MlpBlock_0/", n, approximate_gelu))[:, 0]
    else:
        x = x[:, 0] if "cls" in p else x.mean(axis=1)                               # Eq. 4
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    if "head/kernel" in p:
        x = x @ p["head/kernel"] + p["head/bias"]
    return x


def random_vit_params(seed=0, image_size=32, patch=8, hidden=32, layers=2, heads=4, mlp_dim=64,
                      num_classes=5, pooling="token", representation_size=None, resnet_units=None,
                      channels=3, resnet_width=64):
    """Random weights in the original vit_jax ``.npz`` layout (old numbering);
    a hybrid's root has `resnet_width` = int(64 * width_factor) channels and
    ``resnet_units=()`` is the root alone."""
    rng = np.random.default_rng(seed)
    r = lambda *shape: rng.normal(0, 0.5, shape).astype(np.float32)  # noqa: E731
    p = {}
    stride = 1
    in_channels = channels
    if resnet_units is not None:
        width = resnet_width
        p["conv_root/kernel"] = r(7, 7, channels, width)
        p["gn_root/scale"], p["gn_root/bias"] = 1 + r(width) * 0.1, r(width) * 0.1
        in_channels = width
        for s, units in enumerate(resnet_units, 1):
            w = width * 2 ** (s - 1)
            for u in range(1, units + 1):
                pre = f"block{s}/unit{u}/"
                p[pre + "conv1/kernel"] = r(1, 1, in_channels, w)
                p[pre + "conv2/kernel"] = r(3, 3, w, w)
                p[pre + "conv3/kernel"] = r(1, 1, w, 4 * w)
                for g, c in (("gn1", w), ("gn2", w), ("gn3", 4 * w)):
                    p[pre + g + "/scale"], p[pre + g + "/bias"] = 1 + r(c) * 0.1, r(c) * 0.1
                if in_channels != 4 * w or (s > 1 and u == 1):
                    p[pre + "conv_proj/kernel"] = r(1, 1, in_channels, 4 * w)
                    p[pre + "gn_proj/scale"], p[pre + "gn_proj/bias"] = 1 + r(4 * w) * 0.1, r(4 * w) * 0.1
                in_channels = 4 * w
        stride = 4 * 2 ** max(len(resnet_units) - 1, 0)
    p["embedding/kernel"] = r(patch, patch, in_channels, hidden) * (1 / math.sqrt(patch * patch * in_channels))
    p["embedding/bias"] = r(hidden)
    height, width = (image_size, image_size) if isinstance(image_size, int) else image_size
    tokens = (height // (patch * stride)) * (width // (patch * stride))
    if pooling == "token":
        p["cls"] = r(1, 1, hidden)
        tokens += 1
    p["Transformer/posembed_input/pos_embedding"] = r(1, tokens, hidden)
    hd = hidden // heads
    for i in range(layers):
        blk = f"Transformer/encoderblock_{i}/"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            p[blk + ln + "/scale"], p[blk + ln + "/bias"] = 1 + r(hidden) * 0.1, r(hidden) * 0.1
        att = blk + "MultiHeadDotProductAttention_1/"
        for name in ("query", "key", "value"):
            p[att + name + "/kernel"] = r(hidden, heads, hd) / math.sqrt(hidden)
            p[att + name + "/bias"] = r(heads, hd)
        p[att + "out/kernel"] = r(heads, hd, hidden) / math.sqrt(hidden)
        p[att + "out/bias"] = r(hidden)
        p[blk + "MlpBlock_3/Dense_0/kernel"] = r(hidden, mlp_dim) / math.sqrt(hidden)
        p[blk + "MlpBlock_3/Dense_0/bias"] = r(mlp_dim)
        p[blk + "MlpBlock_3/Dense_1/kernel"] = r(mlp_dim, hidden) / math.sqrt(mlp_dim)
        p[blk + "MlpBlock_3/Dense_1/bias"] = r(hidden)
    p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"] = 1 + r(hidden) * 0.1, r(hidden) * 0.1
    if pooling == "map":
        p["MAPHead_0/probe"] = r(1, 1, hidden)
        att = "MAPHead_0/MultiHeadDotProductAttention_0/"
        for name in ("query", "key", "value"):
            p[att + name + "/kernel"] = r(hidden, heads, hd) / math.sqrt(hidden)
            p[att + name + "/bias"] = r(heads, hd)
        p[att + "out/kernel"] = r(heads, hd, hidden) / math.sqrt(hidden)
        p[att + "out/bias"] = r(hidden)
        p["MAPHead_0/LayerNorm_0/scale"], p["MAPHead_0/LayerNorm_0/bias"] = 1 + r(hidden) * 0.1, r(hidden) * 0.1
        p["MAPHead_0/MlpBlock_0/Dense_0/kernel"] = r(hidden, mlp_dim) / math.sqrt(hidden)
        p["MAPHead_0/MlpBlock_0/Dense_0/bias"] = r(mlp_dim)
        p["MAPHead_0/MlpBlock_0/Dense_1/kernel"] = r(mlp_dim, hidden) / math.sqrt(mlp_dim)
        p["MAPHead_0/MlpBlock_0/Dense_1/bias"] = r(hidden)
    features = hidden
    if representation_size:
        p["pre_logits/kernel"] = r(hidden, representation_size) / math.sqrt(hidden)
        p["pre_logits/bias"] = r(representation_size)
        features = representation_size
    if num_classes:
        p["head/kernel"] = r(features, num_classes) / math.sqrt(features)
        p["head/bias"] = r(num_classes)
    return p
