"""The export formats, one record each (`ROUTES`): the file a format writes,
the backends it is exported from and the exporter of each, what it needs
installed and the extra that installs it, the arguments it takes, what it
supports (each feature of `FEATURES`, with the reason where it does not),
how it is quantized to int8, its metadata writer and reader and its
runtime loader. ``ViT.export``'s checks and dispatch, the command line's
choices and help, `keras_vit.export.metadata.artifact_info`,
`keras_vit.export.runtime.load`, the int8 formats and the docs' tables of
routes (`markdown`) all come from here, as `keras_vit.weights.formats` does
for checkpoints.

An exporter is a function of `keras_vit.export.exporters` taking one
`keras_vit.export.exporters.Job`, or another route's exporter on the same
backend whose file this route's ``converter`` turns into its own
(``through``). A route's metadata writer and reader are ``write_<metadata>``
and ``read_<metadata>`` of `keras_vit.export.metadata`, its loader
``load_<runtime>`` of `keras_vit.export.runtime`; all are imported when
first used, so that this module (and the command line's help) imports no
backend.
"""

import collections
import dataclasses
import importlib
import pathlib

from keras_vit.arguments import BACKENDS
from keras_vit.extras import require

DEFAULT_FORMAT = "tf_saved_model"  # Keras's ``model.export``'s
QUANTIZE_NEEDS = ("onnxruntime",)  # what an int8 export needs beyond its float32 route's

# A feature an export may ask of a route: its column in the docs, what asks for it (in a
# refusal), what else to do where it is refused, and ``wanted(request)``: whether a `Request` asks it.
Feature = collections.namedtuple("Feature", ("title", "asked", "otherwise", "wanted"))
# What an export asks: the model's `ViTConfig`, its ``preprocessing``, a free image size without
# preprocessing (``dynamic``), ``quantize`` (None: float32) and whether calibration images came.
Request = collections.namedtuple("Request", ("config", "preprocessing", "dynamic", "quantize", "calibrated"))
_FIXED = ("Export `model.with_image_size((height, width))` for each size you serve, or export with "
          "preprocessing=True, which takes images of any size and resizes them to the model's.")
FEATURES = {
    "preprocessing": Feature("images in, classes out", "preprocessing=True", "Export it without preprocessing.",
                             lambda r: r.preprocessing),
    "dynamic_image_size": Feature("any image size", "dynamic_image_size=True", _FIXED, lambda r: r.dynamic),
    "int8": Feature("int8, dynamic", "quantize='int8' without calibration_images",
                    "Pass calibration_images, or export without quantize (float32).",
                    lambda r: r.quantize is not None and not r.calibrated),
    "int8_calibrated": Feature("int8, calibrated", "quantize='int8' with calibration_images",
                               "Export without quantize (float32).", lambda r: r.quantize is not None and r.calibrated),
    "rope_dynamic_image_size": Feature("rotary embeddings at any size",
                                       "dynamic_image_size=True with rotary position embeddings", _FIXED,
                                       lambda r: r.dynamic and r.config.uses_rope),
    "naflex": Feature("NaFlex", "a NaFlex model", "Export `model.with_config(naflex=False, max_num_patches=None)`.",
                      lambda r: bool(r.config.naflex)),
    "token_merging": Feature("token merging", "token merging", "Export `model.with_token_merging(0)`.",
                             lambda r: bool(r.config.merges_tokens)),
}
_INT8_REASON = ("onnxruntime's tools quantize an ONNX graph, which OpenVINO converts too; this format is "
                "traced from the model itself")


@dataclasses.dataclass(frozen=True, eq=False)  # a record is itself: compared and hashed by identity
class Exporter:
    """How one backend writes a route's file.

    Attributes:
        title: the exporter, in the docs' words.
        function: the name of its function in `keras_vit.export.exporters`
            (``function(job)``); None where it goes `through` another route.
        through: None, or the route whose exporter on this backend writes
            first, its file then converted by this route's ``converter``.
        needs: modules it needs beyond the route's own (`Route.needs`).
        arguments: the keyword arguments it takes beyond ``ViT.export``'s
            own, as Keras 3.15 passes them on; None: any (the exporter
            checks its own).
        refuses: feature -> why this exporter cannot take it.
        fails: None, or why this exporter fails upstream (refused whole).
        note: a footnote of the docs' table, or None.
    """

    title: str
    function: str | None = None
    through: str | None = None
    needs: tuple = ()
    arguments: tuple | None = ()
    refuses: dict = dataclasses.field(default_factory=dict)
    fails: str | None = None
    note: str | None = None


@dataclasses.dataclass(frozen=True, eq=False)  # a record is itself: compared and hashed by identity
class Route:
    """One export format.

    Attributes:
        name: ``ViT.export(format=...)``, ``keras-vit export --format``.
        title: what its file is, in words (errors name it so).
        suffix: the end of the file's name; None for a folder.
        folder_file: for a folder, the file in it that marks the artifact.
        extra: the extra that installs what it needs.
        needs: modules every export to it needs.
        exporters: backend -> `Exporter`, the backends it is exported from.
        supports: feature of `FEATURES` -> None, or why it cannot be had.
        quantized_through: the route whose float32 file is quantized for
            its int8 export; None where it has none.
        converter: the name of a function of `keras_vit.export.exporters`,
            ``converter(source, path)``, that writes this format from an
            ``.onnx`` file (exporters going `through` ONNX, int8); or None.
        metadata: ``write_<metadata>``/``read_<metadata>`` of `keras_vit.export.metadata`.
        runtime: ``load_<runtime>`` of `keras_vit.export.runtime`.
        runs_in: the runtime that loads it, in the docs' words.
    """

    name: str
    title: str
    suffix: str | None
    extra: str
    needs: tuple
    exporters: dict
    supports: dict
    metadata: str
    runtime: str
    runs_in: str
    folder_file: str | None = None
    quantized_through: str | None = None
    converter: str | None = None

    @staticmethod
    def _function(module, name):
        return getattr(importlib.import_module(f"keras_vit.export.{module}"), name)

    @property
    def write_metadata(self):
        """``write(path, data, outputs)``: the record `data` into the artifact at `path`."""
        return self._function("metadata", f"write_{self.metadata}")

    @property
    def read_metadata(self):
        """``read(path)``: the record in the artifact at `path`, or None."""
        return self._function("metadata", f"read_{self.metadata}")

    @property
    def load_runtime(self):
        """``load(path)``: the artifact at `path` as a function of a batch."""
        return self._function("runtime", f"load_{self.runtime}")

    def convert(self, source, path):
        """Writes this format at `path` from the ``.onnx`` file `source` (`converter`)."""
        return self._function("exporters", self.converter)(source, path)

    def claims(self, path):
        """Whether `path` is an artifact of this route."""
        path = pathlib.Path(path)
        if self.suffix is None:
            return (path / self.folder_file).is_file()
        return path.is_file() and path.suffix == self.suffix

    def refusal(self, feature, backend):
        """Why `feature` cannot be exported to this route from `backend`, or None."""
        reason = self.supports.get(feature)
        exporter = self.exporters.get(backend)
        return reason or (exporter.refuses.get(feature) if exporter else None)

    def exporter(self, backend):
        """The `Exporter` from `backend`; a ValueError naming the backends
        to use where it has none or it fails upstream."""
        exporter = self.exporters.get(backend)
        if exporter is None:
            offered = tuple(self.exporters)
            raise ValueError(f"Keras exports {self.name} from the {' or '.join(offered)} backend, not from "
                             f"{backend}: run with KERAS_BACKEND={offered[0]}.")
        if exporter.fails:
            working = [b for b, e in self.exporters.items() if not e.fails]
            raise ValueError(f"An export to {self.name} from {backend} fails upstream: {exporter.fails}. "
                             f"Export {self.name} from {either(working)} (KERAS_BACKEND). Nothing was exported.")
        return exporter

    def modules(self, backend):
        """What a float32 export from `backend` needs, in order: the route's
        own, then its exporter's (and the route it goes through's)."""
        exporter = self.exporters.get(backend)
        if exporter is None:
            return self.needs
        through = ROUTES[exporter.through].modules(backend) if exporter.through else ()
        return (*self.needs, *through, *exporter.needs)

    def arguments(self, backend):
        """The keyword arguments its exporter from `backend` takes (None: any)."""
        exporter = self.exporters.get(backend)
        if exporter is None:
            return ()
        return ROUTES[exporter.through].arguments(backend) if exporter.through else exporter.arguments


def either(names):
    """``a``, ``a or b``, ``a, b or c``."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


_TORCH_NOTE = (
    "Keras 3.15 exports ONNX from PyTorch with the TorchScript exporter whenever the batch is dynamic, "
    "which fails inside Keras's own `layer_normalization` (\"Failed to export a node ... because it is not "
    "constant\"; keras-hub's ViT fails the same way), and traces `format=\"torch\"` with a batch of 1, "
    "which PyTorch specializes to one image. `ViT.export` runs PyTorch's dynamo exporter and "
    "`torch.export.export` itself with the batch as a symbolic dimension.")
_JAX2TF = ("is_static", "jax2tf_kwargs")
_OPSET = ("opset_version",)

ROUTES = {route.name: route for route in (
    Route(
        "tf_saved_model", "SavedModel", None, folder_file="saved_model.pb", extra="tensorflow",
        needs=("tensorflow",), metadata="saved_model", runtime="saved_model", runs_in="TensorFlow (TF Serving)",
        exporters={"tensorflow": Exporter("Keras's `ExportArchive`", "saved_model"),
                   "jax": Exporter("jax2tf", "saved_model", arguments=_JAX2TF)},
        supports={"int8": _INT8_REASON, "int8_calibrated": _INT8_REASON}),
    Route(
        "onnx", "ONNX model", ".onnx", extra="export", needs=("onnx",), metadata="onnx", runtime="onnx",
        runs_in="onnxruntime", quantized_through="onnx",
        exporters={
            "tensorflow": Exporter("tf2onnx", "keras_export", needs=("tf2onnx",), arguments=_OPSET),
            "jax": Exporter("jax2onnx", "keras_export", needs=("jax2onnx",), arguments=_OPSET, refuses={
                "dynamic_image_size":
                    "jax2onnx gives the wrong length when it joins the [class] token to a sequence of free "
                    "length (its concatenate keeps the first operand's size); nor does the TensorFlow "
                    "route's tf2onnx take jax2tf's SavedModel, which holds the model as one XlaCallModule op "
                    "(StableHLO: JAX 0.10's jax2tf serializes nothing else) that tf2onnx does not convert"}),
            "torch": Exporter("PyTorch's dynamo exporter, `keras_vit.export.pytorch`", "torch_onnx",
                              needs=("onnxscript",), arguments=_OPSET, note=_TORCH_NOTE)},
        supports={}),
    Route(
        "openvino", "OpenVINO model", ".xml", extra="export", needs=("openvino",), metadata="openvino",
        runtime="openvino", runs_in="OpenVINO", quantized_through="onnx", converter="openvino_from_onnx",
        exporters={
            "tensorflow": Exporter("Keras's", "keras_export"),
            "jax": Exporter("Keras's, through jax2tf", "keras_export", arguments=_JAX2TF, fails=(
                "Keras 3.15 converts a JAX model for OpenVINO through jax2tf with native_serialization=False, "
                "which JAX 0.10 no longer has: the graph holds an XlaCallModule op that OpenVINO cannot "
                "convert")),
            "torch": Exporter("PyTorch's ONNX, converted", through="onnx", note=(
                "Keras's own route from PyTorch (torch.jit's trace, converted by OpenVINO) fails on a model "
                "with its preprocessing inside (\"a Tensor without names\"): the model goes through "
                "PyTorch's ONNX, which OpenVINO converts."))},
        supports={"int8": (
            "OpenVINO runs int8 kernels on a statically quantized model, and a dynamically quantized one in "
            "float32, slower than the float model")}),
    Route(
        "litert", "LiteRT model", ".tflite", extra="tensorflow", needs=("tensorflow",), metadata="tflite",
        runtime="tflite", runs_in="the LiteRT interpreter",
        exporters={"tensorflow": Exporter("Keras's", "keras_export", arguments=None),
                   "torch": Exporter("Keras's, with `litert-torch`", "keras_export", arguments=None, note=(
                       "`litert-torch` is not in the dev set: its pins would move pinned packages "
                       "(`typing_extensions` 4.12, `pydantic` 2.11, `torchao`); export LiteRT from TensorFlow."))},
        supports={"int8": _INT8_REASON, "int8_calibrated": _INT8_REASON, "rope_dynamic_image_size": (
            "the model has rotary position embeddings, which LiteRT's converter turns, on a grid of free "
            "size, into a TensorFlow op (FlexStridedSlice) that the LiteRT interpreter does not run")}),
    Route(
        "torch", "torch.export program (.pt2)", ".pt2", extra="torch", needs=(), metadata="pt2", runtime="pt2",
        runs_in="`torch.export.load`",
        exporters={"torch": Exporter("`torch.export` with a symbolic batch, `keras_vit.export.pytorch`",
                                     "torch_program", note=_TORCH_NOTE)},
        supports={"int8": _INT8_REASON, "int8_calibrated": _INT8_REASON}),
)}

QUANTIZED_FORMATS = tuple(name for name, r in ROUTES.items() if r.quantized_through)


def route(format):
    """The `Route` of `format`; a ValueError listing the formats for another."""
    if format not in ROUTES:
        raise ValueError(f"format={format!r} is not an export format: choose {either(map(repr, ROUTES))} "
                         "(docs/deploy.md#export).")
    return ROUTES[format]


def artifact_route(path):
    """The `Route` whose artifact `path` is (a file by its suffix, a folder by its marking file), or None."""
    return next((r for r in ROUTES.values() if r.claims(path)), None)


def artifacts():
    """The artifacts `artifact_route` knows, in words, for messages."""
    files = [f"{r.suffix} ({r.title})" for r in ROUTES.values() if r.suffix]
    folders = [f"a {r.title} folder" for r in ROUTES.values() if not r.suffix]
    return f"an {either(files)} file, or {either(folders)}"


def exported_from():
    """format -> the backends it is exported from (the command line's choices)."""
    return {name: tuple(r.exporters) for name, r in ROUTES.items()}


def route_traced(format, quantize=None):
    """The route whose exporter runs for an export to `format` quantized as
    `quantize` (None: float32): the route it is quantized through, or its own."""
    chosen = route(format)
    return ROUTES[chosen.quantized_through] if quantize is not None and chosen.quantized_through else chosen


def check(format, backend, request, name):
    """Refuses, before anything is exported, an export to `format` from
    `backend` that its record cannot take: a backend it is not exported
    from, an exporter that fails upstream (float32), or a feature `request`
    (a `Request`) asks that the route or its exporter refuses; an int8
    export is checked against the route it is quantized through too. The
    ValueError names the model (`name`), the reason and the routes to use."""
    chosen, traced = route(format), route_traced(format, request.quantize)
    wanted = [feature for feature, spec in FEATURES.items() if spec.wanted(request)]
    for each in dict.fromkeys((chosen, traced)):
        for feature in wanted:
            if each.refusal(feature, backend):
                raise ValueError(_refusal(each, feature, backend, name, wanted))
    traced.exporter(backend)


def _takes(taker, backend, wanted):
    """Whether `taker` (a `Route`) exports from `backend` every feature of `wanted`."""
    exporter = taker.exporters.get(backend)
    return bool(exporter and not exporter.fails and not any(taker.refusal(f, backend) for f in wanted))


def _refusal(refused, feature, backend, name, wanted):
    """The message refusing `feature` to the route `refused` from `backend`,
    naming the backends and routes that take all `wanted` features."""
    others = [b for b in refused.exporters if b != backend and _takes(refused, b, wanted)]
    routes = [r.name for r in ROUTES.values() if r is not refused and _takes(r, backend, wanted)]
    ways = ([f"{refused.name} from {either(others)} (KERAS_BACKEND)"] if others else []) + (
        [f"{either(routes)} from {backend}"] if routes else [])
    spec = FEATURES[feature]
    return (f"{name}: {spec.asked} cannot be exported to {refused.name} from {backend}: "
            f"{refused.refusal(feature, backend)}." + (f" Export {', or '.join(ways)}." if ways else "")
            + f" {spec.otherwise}")


def require_route(format, backend, quantize=None):
    """Imports what an export to `format` from `backend` (quantized as
    `quantize`, or float32 for None) needs, before anything is exported:
    its route's modules (`Route.modules`), or for int8 those of the route
    it is quantized through, `QUANTIZE_NEEDS` and the route's own.

    Raises:
        keras_vit.extras.MissingDependency: naming the first module missing
            and the route's extra.
    """
    chosen = route(format)
    if quantize is None or not chosen.quantized_through:
        modules = chosen.modules(backend)
    else:
        modules = (*ROUTES[chosen.quantized_through].modules(backend), *QUANTIZE_NEEDS, *chosen.needs)
    for module in dict.fromkeys(modules):
        require(module, f"An export to {format} from {backend}", extra=chosen.extra)


def check_arguments(format, backend, quantize, kwargs):
    """Raises a TypeError naming each of `kwargs` that the exporter of
    `format` from `backend` (of the route it is quantized through, for an
    int8 export) does not take (`Route.arguments`), and the ones it does:
    an argument Keras would drop without a word."""
    takes = route_traced(format, quantize).arguments(backend)
    unused = [] if takes is None else sorted(set(kwargs) - set(takes))
    if unused:
        others = f"it takes {', '.join(takes)} besides ViT.export's own" if takes else "it takes no other"
        raise TypeError(f"An export to {format} from {backend} does not use {', '.join(unused)}: {others} "
                        "argument. Nothing was exported.")


_BACKEND_TITLES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
_SUPERSCRIPTS = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def markdown():
    """The docs' tables of routes (docs/deploy.md#export): each format's
    file, exporter from each backend, runtime and needs; then what each
    supports; the reasons and notes as footnotes."""
    notes = {}

    def mark(text):  # the footnote's number, superscript
        return str(notes.setdefault(text, len(notes) + 1)).translate(_SUPERSCRIPTS)

    def exported(r, backend):
        exporter = r.exporters.get(backend)
        if exporter is None:
            return "not offered by Keras"
        if exporter.fails:
            return f"✗ upstream{mark(exporter.fails)}"
        through = f" through `{exporter.through}`" if exporter.through else ""
        return f"✓ ({exporter.title}{through}){mark(exporter.note) if exporter.note else ''}"

    def supported(r, feature):
        if r.supports.get(feature):
            return f"✗{mark(r.supports[feature])}"
        refused = [b for b, e in r.exporters.items() if e.refuses.get(feature)]
        return "✓" + "".join(f", not from {_BACKEND_TITLES[b]}{mark(r.exporters[b].refuses[feature])}"
                             for b in refused)

    def needs(r):
        own = [f"from {_BACKEND_TITLES[b]} `{'`, `'.join(e.needs)}`" for b, e in r.exporters.items() if e.needs]
        listed = ", ".join(f"`{m}`" for m in r.needs) + ("; " if r.needs and own else "") + "; ".join(own)
        return f"{listed or 'the backend'} (`[{r.extra}]`)"

    titles = [_BACKEND_TITLES[b] for b in BACKENDS]
    routes = ["| format | file | " + " | ".join(titles) + " | runs in | needs |", "|---" * (4 + len(BACKENDS)) + "|"]
    for r in ROUTES.values():
        file = f"`{r.suffix}`" if r.suffix else f"a folder (`{r.folder_file}`)"
        cells = [f"`{r.name}`", file, *(exported(r, b) for b in BACKENDS), r.runs_in, needs(r)]
        routes.append("| " + " | ".join(cells) + " |")
    features = ["| format | " + " | ".join(f.title for f in FEATURES.values()) + " |",
                "|---" * (1 + len(FEATURES)) + "|"]
    for r in ROUTES.values():
        features.append("| " + " | ".join([f"`{r.name}`", *(supported(r, f) for f in FEATURES)]) + " |")
    footnotes = [f"{number}. {text.rstrip('.')}." for text, number in notes.items()]
    return "\n".join([*routes, "", *features, "", *footnotes])
