"""The paper's pictures of what ViT learned, as matplotlib figures.

matplotlib is an optional extra: ``pip install "keras-vision-transformer[plots]"``. Each
function takes the numbers of `keras_vit.explain.analysis` and returns a
`matplotlib.figure.Figure` (save it with ``figure.savefig(path)``).
"""

import numpy as np

from keras_vit.extras import require


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (unless one is
    already chosen), or a `keras_vit.extras.MissingDependency` that names
    its extra."""
    matplotlib = require("matplotlib", "Drawing keras_vit's figures (the numeric functions, "
                         "attention_rollout, mean_attention_distance, ..., do not)")
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _display(image):
    """An image for imshow: [-1, 1] or [0, 255] floats to [0, 1], RGB."""
    image = np.asarray(image, "float64")
    if image.ndim == 3 and image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3):
        image = image.transpose(1, 2, 0)  # channels_first
    low, high = image.min(), image.max()
    if low >= -1.0 - 1e-6 and high <= 1.0 + 1e-6:
        image = (image + 1.0) / 2.0
    elif high > 1.0:
        image = image / 255.0
    image = np.clip(image, 0.0, 1.0)
    return image[..., 0] if image.shape[-1] == 1 else image


def _upsample(grid_map, height, width):
    """Nearest-neighbour upsampling of a (gh, gw) map to (height, width):
    each patch's value covers exactly its patch of the image."""
    gh, gw = grid_map.shape
    rows = (np.arange(height) * gh // height).clip(0, gh - 1)
    cols = (np.arange(width) * gw // width).clip(0, gw - 1)
    return grid_map[rows][:, cols]


def plot_attention_rollout(images, rollout, titles=None):
    """Fig. 6: each input image, and the image weighted by its rollout map.

    Args:
        images: (batch, H, W, C) the images the rollout was computed on.
        rollout: (batch, gh, gw) from `attention_rollout`.
        titles: optional list of str, one per image.
    """
    images, rollout = np.asarray(images), np.asarray(rollout)

    def weighted(i, image):
        mask = _upsample(rollout[i] / rollout[i].max(), image.shape[0], image.shape[1])
        return image * (mask[..., None] if image.ndim == 3 else mask)

    return _under_each_image(images, titles, weighted, lambda i: "attention",
                             "Attention rollout from the output token to the input (Fig. 6)")


def _under_each_image(images, titles, lower, lower_title, title):
    """A figure of two rows: each of `images` (`_display`ed) titled by
    `titles` (or "input i"), and under it ``lower(i, image)`` titled
    ``lower_title(i)``."""
    plt = pyplot()
    count = len(images)
    figure, axes = plt.subplots(2, count, figsize=(2.2 * count, 4.6), squeeze=False)
    for i in range(count):
        image = _display(images[i])
        cmap = None if image.ndim == 3 else "gray"
        axes[0, i].imshow(image, cmap=cmap)
        axes[1, i].imshow(lower(i, image), cmap=cmap)
        axes[0, i].set_title(titles[i] if titles else f"input {i}", fontsize=8)
        axes[1, i].set_title(lower_title(i), fontsize=8)
        for axis in axes[:, i]:
            axis.axis("off")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    return figure


def token_merging_picture(image, groups, seed=0):
    """ToMe's picture of one image (``tome/vis.py``'s ``make_visualization``):
    each group of merged patches filled with its mean colour, its outline in
    a colour of its own.

    Args:
        image: ``(H, W, C)``, as `_display` reads it.
        groups: int ``(gh, gw)`` from `token_merging_groups`.
        seed: of the outlines' random colours.

    Returns:
        float ``(k H, k W, 3)`` in [0, 1]: the image enlarged ``k`` times
        (nearest neighbour) where its patches are under 16 pixels, so that
        the one-pixel outlines stay thin.
    """
    image = _display(image)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=-1)
    k = max(1, -(-16 // max(1, image.shape[0] // np.shape(groups)[0])))
    image = np.repeat(np.repeat(image, k, axis=0), k, axis=1)
    height, width = image.shape[:2]
    labels = _upsample(np.asarray(groups), height, width)
    count = int(labels.max()) + 1
    means = np.zeros((count, 3))
    np.add.at(means, labels, image)
    means /= np.maximum(np.bincount(labels.ravel(), minlength=count), 1)[:, None]
    outlines = np.random.default_rng(seed).random((count, 3))
    edge = np.zeros((height, width), bool)  # a pixel beside another group, or the image's border
    edge[1:] |= labels[1:] != labels[:-1]
    edge[:-1] |= labels[:-1] != labels[1:]
    edge[:, 1:] |= labels[:, 1:] != labels[:, :-1]
    edge[:, :-1] |= labels[:, :-1] != labels[:, 1:]
    edge[[0, -1]] = edge[:, [0, -1]] = True
    return np.where(edge[..., None], outlines[labels], means[labels])


def plot_token_merging(images, groups, titles=None, token_merging=None):
    """ToMe's Fig. 6: each input image, and its patches coloured by the
    merged token that holds them (`token_merging_picture`).

    Args:
        images: ``(batch, H, W, C)``.
        groups: int ``(batch, gh, gw)`` from `token_merging_groups`.
        titles: optional list of str, one per image.
        token_merging: the model's ``token_merging``, for the title.
    """
    images, groups = np.asarray(images), np.asarray(groups)
    r = "" if token_merging is None else f", r={token_merging}"
    return _under_each_image(
        images, titles, lambda i, image: token_merging_picture(images[i], groups[i]),
        lambda i: f"{len(np.unique(groups[i]))} tokens",
        f"Token merging: the patches each token holds after the last block{r} (ToMe, Fig. 6)")


def plot_position_embedding_similarity(similarity):
    """Fig. 7 (centre): tile (i, j) shows the cosine similarity of patch
    (i, j)'s position embedding with every patch's, tiles in grid order.

    Args:
        similarity: (gh, gw, gh, gw) from `position_embedding_similarity`.
    """
    plt = pyplot()
    similarity = np.asarray(similarity)
    gh, gw = similarity.shape[:2]
    figure, axes = plt.subplots(gh, gw, figsize=(0.6 * gw + 1.2, 0.6 * gh + 0.6), squeeze=False)
    for i in range(gh):
        for j in range(gw):
            shown = axes[i, j].imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis")
            axes[i, j].set_xticks([])
            axes[i, j].set_yticks([])
            if j == 0:
                axes[i, j].set_ylabel(str(i + 1), fontsize=6)
            if i == gh - 1:
                axes[i, j].set_xlabel(str(j + 1), fontsize=6)
    figure.supylabel("input patch row", fontsize=8)
    figure.supxlabel("input patch column", fontsize=8)
    figure.suptitle("Position embedding similarity (Fig. 7, centre)", fontsize=9)
    figure.colorbar(shown, ax=axes, shrink=0.6, label="cosine similarity")
    return figure


def plot_patch_embedding_components(components):
    """Fig. 7 (left): the principal components of the patch filters, each
    scaled to [0, 1] on its own.

    Args:
        components: (n, P, P, C) from `patch_embedding_components`.
    """
    plt = pyplot()
    components = np.asarray(components)
    count = len(components)
    columns = min(7, count)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(1.1 * columns, 1.1 * rows + 0.4), squeeze=False)
    for k, axis in enumerate(axes.ravel()):
        axis.axis("off")
        if k < count:
            tile = components[k]
            tile = (tile - tile.min()) / max(float(tile.max() - tile.min()), 1e-12)
            axis.imshow(tile[..., 0] if tile.shape[-1] == 1 else tile[..., :3],
                        cmap="gray" if tile.shape[-1] == 1 else None, interpolation="nearest")
    figure.suptitle("RGB embedding filters (first principal components; Fig. 7, left)", fontsize=9)
    figure.tight_layout()
    return figure


def plot_mean_attention_distance(distance, image_size=None):
    """Fig. 7 (right): mean attention distance against depth, one point per
    head.

    Args:
        distance: (layers, heads) from `mean_attention_distance`, in pixels.
        image_size: optional (H, W) for the axis limit.
    """
    plt = pyplot()
    distance = np.asarray(distance)
    layers, heads = distance.shape
    figure, axis = plt.subplots(figsize=(4.2, 3.4))
    for head in range(heads):
        axis.scatter(np.arange(1, layers + 1), distance[:, head], s=12, label=f"head {head + 1}")
    axis.set_xlabel("network depth (layer)")
    axis.set_ylabel("mean attention distance (pixels)")
    axis.set_xticks(range(1, layers + 1))
    if image_size is not None:
        axis.set_ylim(0, float(np.hypot(*image_size)) / 2)
    if heads <= 16:
        axis.legend(fontsize=6, ncol=2)
    axis.set_title("Attention distance (Fig. 7, right)", fontsize=9)
    figure.tight_layout()
    return figure
