"""Fine-tuning as Table 4 of the paper (vit_jax's released update): `keras-vit finetune`.

    python recipes/finetune.py --help
"""

import sys

from keras_vit.cli import run

if __name__ == "__main__":
    run(["finetune", *sys.argv[1:]])
