"""Pre-training as Table 3 of the paper (and AugReg's options): `keras-vit pretrain`.

    python recipes/pretrain.py --help
"""

import sys

from keras_vit.cli import run

if __name__ == "__main__":
    run(["pretrain", *sys.argv[1:]])
