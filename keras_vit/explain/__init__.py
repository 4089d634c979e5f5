"""Understanding ViT (Sec. 4.5, Appendix D): attention rollout, attention
distance, position-embedding similarity and patch filters, as numbers
(`analysis`, NumPy only) and as the paper's pictures (`plots`, which need
the optional matplotlib: ``pip install "keras-vision-transformer[plots]"``)."""

from keras_vit.explain.analysis import attention_rollout
from keras_vit.explain.analysis import attention_weights
from keras_vit.explain.analysis import distance_from_weights
from keras_vit.explain.analysis import max_components
from keras_vit.explain.analysis import mean_attention_distance
from keras_vit.explain.analysis import patch_distances
from keras_vit.explain.analysis import patch_embedding_components
from keras_vit.explain.analysis import position_embedding_similarity
from keras_vit.explain.analysis import rollout_from_weights
from keras_vit.explain.analysis import token_merging_groups
from keras_vit.explain.plots import plot_attention_rollout
from keras_vit.explain.plots import plot_mean_attention_distance
from keras_vit.explain.plots import plot_patch_embedding_components
from keras_vit.explain.plots import plot_position_embedding_similarity
from keras_vit.explain.plots import plot_token_merging
from keras_vit.explain.plots import token_merging_picture
from keras_vit.explain.report import write_report

__all__ = [
    "attention_rollout",
    "attention_weights",
    "distance_from_weights",
    "max_components",
    "mean_attention_distance",
    "patch_distances",
    "patch_embedding_components",
    "plot_attention_rollout",
    "plot_mean_attention_distance",
    "plot_patch_embedding_components",
    "plot_position_embedding_similarity",
    "position_embedding_similarity",
    "plot_token_merging",
    "rollout_from_weights",
    "token_merging_groups",
    "token_merging_picture",
    "write_report",
]
