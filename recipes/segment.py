"""DINOv3's linear segmentation probe on canvases of the embedded digits: `keras-vit segment`.

    python recipes/segment.py --init demo_output/finetune/model.keras --workdir segment_output
    python recipes/segment.py --help
"""

import sys

from keras_vit.cli import run

if __name__ == "__main__":
    run(["segment", *sys.argv[1:]])
