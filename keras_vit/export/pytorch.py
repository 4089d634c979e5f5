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


def _sample_and_dims(input_signature, multiples=None):
    """A zero sample of `input_signature`'s one input (an ``InputSpec``, or a
    dict of them: NaFlex's), 2 for each None axis, and ``dynamic_shapes``
    for a model whose ``forward`` takes ``*args``; every input's batch axis
    is the one symbolic ``batch``. `multiples` (axis -> int) makes an axis
    a multiple of that number (an image's height and width, of the patch
    size): 2 of them in the sample."""
    import torch

    batch = torch.export.Dim("batch")
    multiples = multiples or {}

    def free(spec, axis):
        dim = torch.export.Dim(f"{spec.name or 'images'}_dim_{axis}")
        return multiples[axis] * dim if axis in multiples else dim

    def sample_and_dims(spec):
        shape = tuple(2 * multiples.get(axis, 1) if dim is None else dim
                      for axis, dim in enumerate(spec.shape))
        dynamic = {axis: batch if axis == 0 else free(spec, axis)
                   for axis, dim in enumerate(spec.shape) if dim is None}
        dtype = getattr(torch, keras.backend.standardize_dtype(spec.dtype))
        return torch.zeros(shape, dtype=dtype), dynamic

    structure = input_signature[0]
    if isinstance(structure, dict):  # in Keras's order (sorted keys), which torch keeps
        pairs = {key: sample_and_dims(structure[key]) for key in sorted(structure)}
        return ({key: pair[0] for key, pair in pairs.items()},
                (({key: pair[1] for key, pair in pairs.items()},),))
    sample, dynamic = sample_and_dims(structure)
    return sample, ((dynamic,),)


def _input_names(input_signature):
    """The ONNX inputs' names: the spec's name (``"images"`` unnamed), or a
    dict's keys in the order its sample is flattened."""
    structure = input_signature[0]
    if isinstance(structure, dict):
        return sorted(structure)
    return [structure.name or "images"]


def torch_onnx(model, filepath, input_signature, opset_version=None, verbose=False, output_names=None,
               multiples=None):
    """Writes `model` to `filepath` as ONNX with PyTorch's dynamo exporter.

    Args:
        model: a Keras model on the PyTorch backend with one image input,
            or NaFlex's dict of inputs.
        filepath: str or path, the ``.onnx`` file.
        input_signature: ``[keras.InputSpec]`` or ``[{name: keras.InputSpec}]``
            (`keras_vit.ViT.export_signature`), batch axes None (dynamic).
        opset_version: int or None (the exporter's default).
        verbose: bool.
        output_names: list of str or None (the exporter's names).
        multiples: None, or {axis: int}: free axes that are multiples of
            that number (`_sample_and_dims`).
    """
    import torch

    sample, dynamic_shapes = _sample_and_dims(input_signature, multiples)
    model.eval()
    # The empty dict last is the keyword arguments: torch.onnx.export reads a dict last in
    # its `args` as them, and NaFlex's one input is a dict.
    program = torch.onnx.export(
        model, (sample, {}), dynamo=True, input_names=_input_names(input_signature),
        dynamic_shapes=dynamic_shapes, opset_version=opset_version, verbose=verbose,
        output_names=output_names,
    )
    program.optimize()
    program.save(str(filepath))


def torch_program(model, filepath, input_signature, extra_files=None, multiples=None):
    """Writes `model` to `filepath` as a ``torch.export`` program (``.pt2``)
    that takes any batch size (and any multiple of `multiples` on those
    axes: `_sample_and_dims`), with `extra_files` (name -> text) beside it;
    ``torch.export.load(filepath).module()`` runs it."""
    import torch

    sample, dynamic_shapes = _sample_and_dims(input_signature, multiples)
    model.eval()
    torch.export.save(torch.export.export(model, (sample,), dynamic_shapes=dynamic_shapes),
                      str(filepath), extra_files=extra_files)
