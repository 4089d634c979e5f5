"""Small helpers shared by the layers."""

import keras


def standardize_data_format(value):
    """`value`, or Keras's image data format when None, checked."""
    value = value or keras.config.image_data_format()
    if value not in ("channels_last", "channels_first"):
        raise ValueError(
            f"`data_format` must be 'channels_last' or 'channels_first', got {value!r}."
        )
    return value

