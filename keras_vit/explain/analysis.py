"""What a ViT learned, as numbers (Sec. 4.5 and Appendix D of the paper).

- `attention_weights`: the softmax attention of every layer.
- `attention_rollout`: Abnar & Zuidema's rollout from the output token to
  the input (Fig. 6, Appendix D.8).
- `mean_attention_distance`: how far each head attends, in pixels (Fig. 7
  right, Fig. 11).
- `position_embedding_similarity`: cosine similarity of the learned
  position embeddings (Fig. 7 centre, Fig. 10).
- `patch_embedding_components`: principal components of the patch
  projection's filters (Fig. 7 left).
- `token_merging_groups`: which patches each token holds after token
  merging (ToMe's source tracking, Bolya et al., ICLR 2023, Fig. 6).

Every function works on any `keras_vit.ViT`, on every backend, and returns
NumPy arrays. With visual prompts (`keras_vit.ViT.with_prompts`) the
prompts take part in the rollout as the tokens they are, and the maps and
distances show the patches alone: the attention over prompts is left out.
"""

import keras
import numpy as np

from keras_vit.config import is_int
from keras_vit.model import ViT
from keras_vit.startup import progress_verbose


def _check_model(model):
    if not isinstance(model, ViT):
        raise TypeError(
            f"Expected a keras_vit.ViT, got {type(model).__name__}. Load one with "
            "keras.saving.load_model(path) or ViT.from_checkpoint(path)."
        )


def _check_unmerged(model, what):
    """Refuses a model that merges tokens for a picture of one token per patch."""
    if model.config.merges_tokens:
        raise ValueError(
            f"{what} needs one token per patch in every block, and {model.name} merges "
            f"tokens (token_merging={model.config.token_merging!r}), so later blocks have fewer "
            "tokens than patches. Use `model.with_token_merging(0)` (the same weights), and "
            "`token_merging_groups` for what the merging does.")


def _layout(model):
    """(number of tokens before the patches in the blocks, VPT's prompts
    included, whether token 0 is [class], grid (gh, gw), pixels per patch
    (ph, pw))."""
    _check_model(model)
    grid = tuple(model.grid_size)
    has_class = model.config.uses_class_token
    prefix = model.config.num_leading_tokens
    pixels = tuple(size / g for size, g in zip(model.image_size, grid))
    return prefix, has_class, grid, pixels


def attention_weights(model, images, batch_size=32, verbose="auto"):
    """The attention weights of every layer (Eq. 2's MSA), from the model's
    own forward pass (`ViT.intermediates`; its outputs are unchanged).

    Args:
        model: a `keras_vit.ViT`.
        images: float array (batch, H, W, C) in the model's input range and
            size (the model's own checks apply).
        batch_size: int. Images per forward pass.
        verbose: progress bar over the batches: "auto" (when there is more
            than one batch), True or False.

    Returns:
        list of `num_layers` float32 arrays (batch, heads, tokens, tokens);
        each row sums to 1.
    """
    _check_model(model)
    _check_unmerged(model, "attention_weights (and the rollout and attention distances drawn "
                           "from them)")
    images = keras.ops.convert_to_numpy(images)
    if images.ndim != 4:
        raise ValueError(f"`images` must be a batch (batch, height, width, channels); got shape {images.shape}.")
    starts = range(0, len(images), batch_size)
    show = len(starts) > 1 if verbose == "auto" else bool(verbose)
    progress = keras.utils.Progbar(len(images), verbose=progress_verbose(), unit_name="image") if show else None
    layers = [[] for _ in range(model.num_layers)]
    for start in starts:
        record = model.intermediates(images[start:start + batch_size])
        for i in range(model.num_layers):
            layers[i].append(keras.ops.convert_to_numpy(record[f"attention_{i}"]).astype("float32"))
        if progress:
            progress.add(len(images[start:start + batch_size]))
    return [np.concatenate(parts) for parts in layers]


def attention_rollout(model, images, head_fusion="mean", discard_ratio=0.0, batch_size=32, verbose="auto"):
    """Attention rollout (Abnar & Zuidema, 2020), as the paper uses it.

    Per layer the heads are fused into A (their mean, or max), the residual
    is added as ``0.5 A + 0.5 I`` with rows renormalised, and the layers are
    multiplied from the first to the last. The map is the [class] token's
    row over the patch tokens (for models without a class token, the mean of
    all rows), normalised to sum to 1.

    Args:
        model: as for `attention_weights`.
        images: as for `attention_weights`.
        batch_size: as for `attention_weights`.
        verbose: as for `attention_weights`.
        head_fusion: "mean" (the paper) or "max".
        discard_ratio: float in [0, 1). Per image and layer, this fraction
            of the smallest fused weights is set to 0 before the residual
            (the [class] token's weight to itself is kept).

    Returns:
        float32 array (batch, grid_h, grid_w), each map summing to 1.
    """
    _check_rollout_options(head_fusion, discard_ratio)  # before the forward passes
    return rollout_from_weights(
        model, attention_weights(model, images, batch_size, verbose), head_fusion, discard_ratio
    )


def token_merging_groups(model, images, batch_size=32, verbose="auto"):
    """Which token each patch ends up in, after every block of a model that
    merges tokens (``token_merging``): ToMe's source tracking
    (``trace_source=True``), the groups its Fig. 6 colours.

    Args:
        model: a `keras_vit.ViT` with ``token_merging`` (e.g.
            ``model.with_token_merging(8)``).
        images: float array ``(batch, H, W, C)`` in the model's input range.
        batch_size: int. Images per forward pass.
        verbose: progress bar over the batches: "auto", True or False.

    Returns:
        int32 ``(batch, grid_h, grid_w)``: for each patch, the index of the
        last block's token that holds it (among the tokens after the prefix
        tokens; a token holds one patch or a merged group of them).
    """
    _check_model(model)
    if not model.config.merges_tokens:
        raise ValueError(
            f"{model.name} merges no tokens (token_merging=0): every token holds its own patch. "
            "Pass `model.with_token_merging(r)` (e.g. r=8) to see what merging groups.")
    images = keras.ops.convert_to_numpy(images)
    prefix, _, grid, _ = _layout(model)
    starts = range(0, len(images), batch_size)
    show = len(starts) > 1 if verbose == "auto" else bool(verbose)
    progress = keras.utils.Progbar(len(images), verbose=progress_verbose(), unit_name="image") if show else None
    groups = []
    for start in starts:
        sources = keras.ops.convert_to_numpy(model.intermediates(images[start:start + batch_size])["token_sources"])
        groups.append(sources[:, prefix:, prefix:].argmax(axis=1).astype("int32"))  # ToMe's vis
        if progress:
            progress.add(len(images[start:start + batch_size]))
    return np.concatenate(groups).reshape(-1, *grid)


def _check_rollout_options(head_fusion, discard_ratio):
    if head_fusion not in ("mean", "max"):
        raise ValueError(f"`head_fusion` must be 'mean' or 'max', got {head_fusion!r}.")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"`discard_ratio` must be in [0, 1), got {discard_ratio!r}.")


def rollout_from_weights(model, weights, head_fusion="mean", discard_ratio=0.0):
    """`attention_rollout` of attention `weights` already computed with
    `attention_weights(model, ...)`."""
    _check_rollout_options(head_fusion, discard_ratio)
    prefix, has_class, grid, _ = _layout(model)
    rollout = None
    for layer in weights:
        fused = layer.mean(axis=1) if head_fusion == "mean" else layer.max(axis=1)
        fused = fused.astype("float64")
        if discard_ratio:
            flat = fused.reshape(len(fused), -1)
            count = int(flat.shape[1] * discard_ratio)
            lowest = np.argsort(flat, axis=1, kind="stable")[:, :count]
            for row, columns in zip(flat, lowest):
                row[columns[columns != 0]] = 0.0
            fused = flat.reshape(fused.shape)
        tokens = fused.shape[-1]
        fused = 0.5 * fused + 0.5 * np.eye(tokens)
        fused /= fused.sum(axis=-1, keepdims=True)
        rollout = fused if rollout is None else fused @ rollout
    rows = rollout[:, 0] if has_class else rollout.mean(axis=1)
    maps = rows[:, prefix:]
    maps = maps / maps.sum(axis=-1, keepdims=True)
    return maps.reshape(len(maps), *grid).astype("float32")


def patch_distances(model):
    """Pixel distances between the centres of the model's patches:
    (gh * gw, gh * gw), patches in row-major order."""
    _, _, (gh, gw), (ph, pw) = _layout(model)
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    centres = np.stack([(rows.ravel() + 0.5) * ph, (cols.ravel() + 0.5) * pw], axis=-1)
    return np.linalg.norm(centres[:, None] - centres[None], axis=-1)


def mean_attention_distance(model, images, batch_size=32, verbose="auto"):
    """The "attention distance" of Fig. 7 (right) and Fig. 11, in pixels.

    For each query patch, the sum over key patches of attention weight times
    the distance between the two patch centres (patch tokens only: the
    [class] and register rows and columns are left out and the weights are
    not renormalised), averaged over the query patches and the images.

    Returns:
        float32 array (layers, heads).
    """
    return distance_from_weights(model, attention_weights(model, images, batch_size, verbose))


def distance_from_weights(model, weights):
    """`mean_attention_distance` of attention `weights` already computed
    with `attention_weights(model, ...)`."""
    prefix, _, _, _ = _layout(model)
    distances = patch_distances(model)
    result = []
    for layer in weights:
        patches = layer[:, :, prefix:, prefix:].astype("float64")
        result.append((patches * distances).sum(axis=-1).mean(axis=(0, 2)))
    return np.asarray(result, "float32")


def position_embedding_similarity(model):
    """Cosine similarity between the learned position embedding of every
    patch and every other (Fig. 7 centre, Fig. 10).

    Returns:
        float32 array (grid_h, grid_w, grid_h, grid_w): entry [i, j, k, l] is
        the similarity of patch (i, j)'s embedding with patch (k, l)'s.
    """
    _check_model(model)  # before reading the model's attributes
    if model.position_embedding != "learned":
        raise ValueError(
            f"This model has no learned position embeddings (position_embedding="
            f"{model.position_embedding!r}: fixed, nothing learned), so there is no similarity "
            "structure to show; position_embedding_similarity applies to models with "
            "position_embedding='learned', as in the paper."
        )
    _, _, (gh, gw), _ = _layout(model)
    prefix = model.config.num_prefix_tokens  # the table has no rows for VPT's prompts
    table = keras.ops.convert_to_numpy(model.parts.position_embedding.embeddings)[0, prefix:]
    table = table.astype("float64")
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    return (unit @ unit.T).reshape(gh, gw, gh, gw).astype("float32")


def max_components(model):
    """How many principal components the patch filters have: min(D, P*P*C)."""
    shape = model.parts.patch_embedding.projection.kernel.shape
    return int(min(shape[-1], np.prod(shape[:3])))


def patch_embedding_components(model, n=28):
    """The top `n` principal components of the patch projection's filters
    (Fig. 7 left), shaped as patches.

    The projection E (Eq. 1) has one filter of P * P * C pixels per hidden
    unit; the components are those of the D filters (centred), each with
    its largest-magnitude pixel made positive (a component's sign is
    arbitrary).

    Returns:
        float32 array (n, P, P, C).
    """
    _check_model(model)
    if model.resnet_block_units is not None:
        raise ValueError(
            "This is a hybrid model (ResNet stem): its patch projection reads ResNet feature maps, "
            "not pixels, so its filters are not image patches. patch_embedding_components "
            "applies to ViTs that embed pixel patches."
        )
    kernel = keras.ops.convert_to_numpy(model.parts.patch_embedding.projection.kernel)
    ph, pw, channels, hidden = kernel.shape
    filters = kernel.reshape(-1, hidden).T.astype("float64")  # (D, P*P*C)
    limit = max_components(model)
    if not is_int(n, 1) or n > limit:
        raise ValueError(f"`n` must be an int in [1, {limit}] for this model, got {n!r}.")
    centred = filters - filters.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    components = components[:n]
    signs = np.sign(components[np.arange(n), np.abs(components).argmax(axis=1)])
    return (components * signs[:, None]).reshape(n, ph, pw, channels).astype("float32")
