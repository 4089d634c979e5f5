"""Journey: NaFlex inputs of two image sizes through a NaFlex ViT.

    python naflex.py

``keras_vit.naflex_inputs`` cuts a 16x16 and a 12x40 numpy image into
sequences of at most 8 patches; the tiny ViT made NaFlex
(``model.with_naflex(8)``, the same weights) classifies both. The square
image, whose grid is the model's own, gets the fixed-size model's logits;
the wide image's logits do not change with more padding after its patches
(a NaFlex model of 12 patches given the same sequence padded to 12).
"""

import keras_vit
import numpy as np

import _journey

BUDGET, LONGER = 8, 12


def main():
    _journey.installed()
    rng = np.random.default_rng(0)
    square = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    wide = rng.integers(0, 256, (12, 40, 3), dtype=np.uint8)
    x = keras_vit.naflex_inputs([square, wide], patch_size=8, max_num_patches=BUDGET)
    shapes = {key: value.shape for key, value in x.items()}
    expected = {"patches": (2, BUDGET, 8 * 8 * 3), "patch_mask": (2, BUDGET), "spatial_shapes": (2, 2)}
    assert shapes == expected, shapes
    grids = x["spatial_shapes"].tolist()
    assert grids[0] == [2, 2] and grids[1][1] > grids[1][0], grids  # the square's own grid; wide stays wide
    assert x["patch_mask"].sum(axis=1).tolist() == [4, grids[1][0] * grids[1][1]], x["patch_mask"]

    model = _journey.tiny_vit()
    flex = model.with_naflex(BUDGET)
    out = _journey.logits(flex, x)
    assert out.shape == (2, _journey.TINY["num_classes"]), out.shape
    fixed = _journey.logits(model, (square[None].astype("float32") / 127.5 - 1))
    _journey.assert_same(out[0], fixed[0], "the square image: the fixed-size model's logits")

    padding = LONGER - BUDGET
    longer = {"patches": np.pad(x["patches"][1:], ((0, 0), (0, padding), (0, 0))),
              "patch_mask": np.pad(x["patch_mask"][1:], ((0, 0), (0, padding))),
              "spatial_shapes": x["spatial_shapes"][1:]}
    _journey.assert_same(_journey.logits(model.with_naflex(LONGER), longer)[0], out[1],
                         "the wide image with more padding")
    _journey.ok(f"grids {grids}: the square image gives the fixed-size logits, the wide one's do not "
                "change with more padding")


if __name__ == "__main__":
    main()
