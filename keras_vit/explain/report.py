"""`write_report`: every picture of `keras_vit.explain` for one model and
some images, as PNG files and one JSON of the numbers."""

import pathlib

import numpy as np

from keras_vit.explain import analysis
from keras_vit.explain import plots
from keras_vit.io import files


def write_report(model, images, out, titles=None, batch_size=32, verbose="auto",
                 token_merging=None):
    """Writes into folder `out`:

        attention_rollout.png             Fig. 6, for `images`
        mean_attention_distance.png       Fig. 7 right, over `images`
        position_embedding_similarity.png Fig. 7 centre (learned embeddings)
        patch_embedding_components.png    Fig. 7 left (pixel patches)
        token_merging.png                 ToMe's Fig. 6, with `token_merging`
                                          or a model that merges tokens
        explain.json                      the attention distances, and why a
                                          picture does not apply, if one does not

    Pictures that do not apply to the model (a hybrid's filters, fixed
    position embeddings) are left out and the reason recorded. The
    attention pictures are of the model without token merging (the same
    weights). `token_merging`: ToMe's ``r`` (an int or one per block) for
    ``token_merging.png``; None: the model's own, if it merges. Returns
    ``{name: path}`` of the files written.
    """
    plt = plots.pyplot()
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    images = np.asarray(images)
    written, numbers = {}, {"images": len(images)}

    def save(name, figure):
        path = out / f"{name}.png"
        figure.savefig(path, dpi=150)
        plt.close(figure)
        written[name] = path

    merged = model if token_merging is None else model.with_token_merging(token_merging)
    if merged.config.merges_tokens:  # ToMe's picture; the others without merging
        groups = analysis.token_merging_groups(merged, images, batch_size, verbose)
        numbers["token_merging"] = {"r": merged.config.token_merging,
                                    "tokens": [len(np.unique(g)) for g in groups]}
        save("token_merging", plots.plot_token_merging(images, groups, titles,
                                                       merged.config.token_merging))
        model = model.with_token_merging(0)
    weights = analysis.attention_weights(model, images, batch_size, verbose)  # one forward pass for both
    rollout = analysis.rollout_from_weights(model, weights)
    save("attention_rollout", plots.plot_attention_rollout(images, rollout, titles))
    distance = analysis.distance_from_weights(model, weights)
    numbers["mean_attention_distance"] = [[round(float(d), 3) for d in row] for row in distance]
    save("mean_attention_distance", plots.plot_mean_attention_distance(distance, model.image_size))
    for name, compute, draw in (
        ("position_embedding_similarity", analysis.position_embedding_similarity,
         plots.plot_position_embedding_similarity),
        ("patch_embedding_components",
         lambda m: analysis.patch_embedding_components(m, min(28, analysis.max_components(m))),
         plots.plot_patch_embedding_components),
    ):
        try:
            values = compute(model)
        except ValueError as error:
            numbers[f"{name}_skipped"] = str(error)
            continue
        save(name, draw(values))
    path = out / "explain.json"
    files.write_json(path, numbers, indent=1)
    written["numbers"] = path
    return written
