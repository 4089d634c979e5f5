"""Masked patch prediction, the paper's self-supervision (Appendix B.1.2): `keras-vit masked-patch`.

    python recipes/masked_patch_pretrain.py --help
"""

import sys

from keras_vit.cli import run

if __name__ == "__main__":
    run(["masked-patch", *sys.argv[1:]])
