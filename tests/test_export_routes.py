"""The export routes as data (`keras_vit.export.routes`): every record is
whole, and the command line's choices and help, the refusals, the artifact
readers and the runtime loaders are read off the records, so that a new
route is a new record and its exporter."""

import dataclasses
import inspect
import os
import types

import keras
import pytest

from keras_vit import ViT
from keras_vit import extras
from keras_vit.export import exporters
from keras_vit.export import int8
from keras_vit.export import routes
from keras_vit.export import runtime

BACKEND = keras.backend.backend()
TINY = dict(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16, num_classes=3)


@pytest.mark.backend_independent
def test_every_route_is_whole():
    """Each record names backends that exist, an exporter function (or a
    route it goes through and a converter) for each, modules whose extra
    `keras_vit.extras` knows, features of `FEATURES` with a reason where
    refused, and a metadata writer, reader and runtime loader that exist;
    no two routes write the same file."""
    assert list(routes.ROUTES) == [route.name for route in routes.ROUTES.values()]
    files = [route.suffix or route.folder_file for route in routes.ROUTES.values()]
    assert len(set(files)) == len(files) and routes.DEFAULT_FORMAT in routes.ROUTES
    for route in routes.ROUTES.values():
        assert (route.suffix is None) != (route.folder_file is None), route.name
        assert set(route.exporters) <= set(routes.BACKENDS) and route.exporters, route.name
        for backend, exporter in route.exporters.items():
            if exporter.through:
                assert exporter.function is None and routes.ROUTES[exporter.through].suffix, route.name
                assert callable(getattr(exporters, route.converter)), route.name
            else:
                assert inspect.signature(getattr(exporters, exporter.function)).parameters.keys() == {"job"}
            assert set(exporter.refuses) <= set(routes.FEATURES) and all(exporter.refuses.values())
            assert all(module in extras.EXTRAS for module in route.modules(backend)), (route.name, backend)
        assert set(route.supports) <= set(routes.FEATURES) and all(route.supports.values()), route.name
        assert all(callable(f) for f in (route.write_metadata, route.read_metadata, route.load_runtime))
        assert route.quantized_through in (None, *routes.ROUTES)
    assert int8.QUANTIZED_FORMATS == tuple(n for n, r in routes.ROUTES.items() if r.quantized_through)


@pytest.mark.backend_independent
def test_the_command_line_reads_the_records(capsys):
    """``keras-vit export``'s --format choices are the routes, its help
    names each file and backend; a route added to `ROUTES` is a choice,
    an artifact `runtime` and `artifact_info` know, and a row of the docs'
    tables."""
    from keras_vit.cli import build_parser

    def export_parser():
        commands = next(a for a in build_parser()._actions if a.dest == "command")
        return commands.choices["export"]

    parser = export_parser()
    assert next(a for a in parser._actions if a.dest == "format").choices == tuple(routes.ROUTES)
    text = parser.format_help()
    for name, route in routes.ROUTES.items():
        assert f"{name} ({', '.join(route.exporters)})" in " ".join(text.split()), name
        assert route.suffix is None or route.suffix in text
    new = dataclasses.replace(routes.ROUTES["onnx"], name="new_format", suffix=".new", title="new model")
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(routes.ROUTES, "new_format", new)
        assert "new_format" in next(a for a in export_parser()._actions if a.dest == "format").choices
        assert "| `new_format` | `.new` |" in routes.markdown()
        assert ".new (new model)" in routes.artifacts()


@pytest.mark.backend_independent
def test_an_artifact_is_known_by_its_route(tmp_path):
    """A file of a route's suffix and a folder with its marking file are
    that route's artifacts; anything else is refused by `runtime.load` and
    `artifact_info`, naming the artifacts the routes write."""
    from keras_vit.export import artifact_info

    for route in routes.ROUTES.values():
        path = tmp_path / route.name
        if route.suffix:
            path = path.with_suffix(route.suffix)
            path.write_bytes(b"")
        else:
            path.mkdir()
            (path / route.folder_file).write_bytes(b"")
        assert routes.artifact_route(path) is route and runtime.is_artifact(path)
    other = tmp_path / "model.keras"
    other.write_bytes(b"")
    assert routes.artifact_route(other) is None and not runtime.is_artifact(tmp_path)
    for read in (runtime.load, artifact_info):
        with pytest.raises(ValueError, match=r"model\.keras is not an artifact keras_vit .*: an \.onnx \(ONNX "
                           r"model\), .* or a SavedModel folder\.$"):
            read(other)


def _requests():
    """(feature, a `routes.Request` that asks it alone, as far as it can)."""
    config = types.SimpleNamespace(uses_rope=False, naflex=False, merges_tokens=False)
    plain = routes.Request(config, False, False, None, False)
    return {"preprocessing": plain._replace(preprocessing=True), "dynamic_image_size": plain._replace(dynamic=True),
            "int8": plain._replace(quantize="int8"),
            "int8_calibrated": plain._replace(quantize="int8", calibrated=True),
            "rope_dynamic_image_size": plain._replace(dynamic=True, config=types.SimpleNamespace(
                **{**vars(config), "uses_rope": True})),
            "naflex": plain._replace(config=types.SimpleNamespace(**{**vars(config), "naflex": True})),
            "token_merging": plain._replace(config=types.SimpleNamespace(**{**vars(config), "merges_tokens": True}))}


def test_each_refusal_is_its_records_reason():
    """On this backend, `routes.check` refuses each feature a route (or its
    exporter from this backend) gives a reason for, with that reason and
    the ways round, and refuses a backend with no exporter or one that
    fails upstream; it lets everything else through."""
    requests = _requests()
    assert set(requests) == set(routes.FEATURES) and all(
        routes.FEATURES[f].wanted(r) for f, r in requests.items())
    for name, route in routes.ROUTES.items():
        for feature, request in requests.items():
            traced = routes.route_traced(name, request.quantize)
            reasons = [r.refusal(f, BACKEND) for r in dict.fromkeys((route, traced)) for f in routes.FEATURES
                       if routes.FEATURES[f].wanted(request)]
            expected = next((reason for reason in reasons if reason), None)
            if expected is None and (traced.exporters.get(BACKEND) is None or traced.exporters[BACKEND].fails):
                expected = "Keras exports" if traced.exporters.get(BACKEND) is None else "fails upstream"
            if expected is None:
                routes.check(name, BACKEND, request, "vit")
                continue
            with pytest.raises(ValueError, match="^vit: |^Keras exports |^An export to ") as refused:
                routes.check(name, BACKEND, request, "vit")
            assert expected in str(refused.value), (name, feature, str(refused.value))


def test_export_refuses_what_the_records_refuse_and_writes_nothing(tmp_path):
    """``ViT.export`` of a model with rotary embeddings with
    ``dynamic_image_size=True`` to each route whose record refuses either
    from this backend raises that reason before anything is written."""
    model = ViT(**TINY, position_embedding="rope")
    refused = 0
    for name, route in routes.ROUTES.items():
        reason = route.refusal("dynamic_image_size", BACKEND) or route.refusal("rope_dynamic_image_size", BACKEND)
        if reason is None:
            continue
        with pytest.raises(ValueError, match="cannot be exported to") as error:
            model.export(str(tmp_path / f"vit{route.suffix or ''}"), format=name, dynamic_image_size=True)
        assert reason in str(error.value)
        refused += 1
    assert os.listdir(tmp_path) == [] and refused >= 1
