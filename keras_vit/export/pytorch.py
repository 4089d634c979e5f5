"""The PyTorch exports that Keras 3.15's ``model.export`` gets wrong for a
dynamic batch, done with PyTorch's own exporters.

- ``format="onnx"``: Keras uses the TorchScript exporter whenever the batch
  axis is dynamic, and that exporter cannot trace Keras's own
  ``layer_normalization`` (``F.layer_norm``'s normalized shape becomes a
  traced value: "Failed to export a node ... because it is not constant").
  The dynamo exporter (``torch.onnx.export(..., dynamo=True)``) traces it.
- ``format="torch"``: Keras traces ``torch.export.export`` with a sample batch
  of 1, which PyTorch specializes: the program then takes one image only
  ("Guard failed: args_0.size()[0] == 1").

Both trace a sample batch of 2 with the batch as a symbolic dimension.
`ViT.export` calls them on PyTorch.
"""

import keras


def _sample_and_dims(input_signature):
    """A zero sample of `input_signature`'s one input (2 for each None axis)
    and ``dynamic_shapes`` for a model whose ``forward`` takes ``*args``."""
    import torch

    spec = input_signature[0]
    shape = tuple(2 if dim is None else dim for dim in spec.shape)
    dynamic = {axis: torch.export.Dim("batch" if axis == 0 else f"dim_{axis}")
               for axis, dim in enumerate(spec.shape) if dim is None}
    sample = torch.zeros(shape, dtype=getattr(torch, keras.backend.standardize_dtype(spec.dtype)))
    return sample, ((dynamic,),)


def torch_onnx(model, filepath, input_signature, opset_version=None, verbose=False):
    """Writes `model` to `filepath` as ONNX with PyTorch's dynamo exporter.

    Args:
        model: a Keras model on the PyTorch backend with one image input.
        filepath: str or path, the ``.onnx`` file.
        input_signature: ``[keras.InputSpec]``, its batch axis None (dynamic).
        opset_version: int or None (the exporter's default).
        verbose: bool.
    """
    import torch

    sample, dynamic_shapes = _sample_and_dims(input_signature)
    model.eval()
    program = torch.onnx.export(
        model, (sample,), dynamo=True, input_names=[input_signature[0].name or "images"],
        dynamic_shapes=dynamic_shapes, opset_version=opset_version, verbose=verbose,
    )
    program.optimize()
    program.save(str(filepath))


def torch_program(model, filepath, input_signature):
    """Writes `model` to `filepath` as a ``torch.export`` program (``.pt2``)
    that takes any batch size; ``torch.export.load(filepath).module()`` runs it."""
    import torch

    sample, dynamic_shapes = _sample_and_dims(input_signature)
    model.eval()
    torch.export.save(torch.export.export(model, (sample,), dynamic_shapes=dynamic_shapes),
                      str(filepath))
