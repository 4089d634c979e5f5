"""The capability table (`keras_vit.weights.capabilities`): an entry for
every `ViTConfig` field in every format, so a new option is refused until
it is mapped; every config the table says a format writes is read back
the same, with the same logits; docs/checkpoints.md shows the table."""

import dataclasses
import pathlib

import numpy as np
import pytest
from helpers import to_numpy

from keras_vit import ViT
from keras_vit import ViTConfig
from keras_vit import naflex_inputs
from keras_vit.config import FIELDS
from keras_vit.weights import capabilities
from keras_vit.weights.capabilities import COLUMNS
from keras_vit.weights.capabilities import ENTRY_KINDS
from keras_vit.weights.capabilities import TABLE
from keras_vit.weights.capabilities import refusal
from keras_vit.weights import formats

DOCS = pathlib.Path(__file__).parent.parent / "docs" / "checkpoints.md"
SMALL = dict(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
             num_classes=5)
# Each column written, the model it starts from
BASES = {"npz": {}, "hf_vit": {}, "timm": {}, "keras_hub": dict(gelu_approximate=False),
         "hf_dinov3": dict(position_embedding="rope", layer_scale_init=1.0, num_classes=0,
                           gelu_approximate=False),
         "hf_siglip2": dict(naflex=True, max_num_patches=6, pooling="map", num_classes=0)}
# The format each column is written by (format="huggingface" picks its column by the model:
# formats.huggingface_column)
FORMAT_OF = {column: f.name for f in formats.FORMATS.values() for column in f.columns}


def missing_entries(fields):
    """(field, format) pairs without an entry of a known kind."""
    return [(field, format) for field in fields for format in COLUMNS
            if TABLE.get(field, {}).get(format) is None
            or TABLE[field][format].kind not in ENTRY_KINDS]


@pytest.mark.backend_independent
def test_every_field_has_an_entry_in_every_format():
    assert missing_entries(FIELDS) == [], (
        "ViTConfig fields without an entry in keras_vit/weights/capabilities.py's TABLE (they are "
        f"refused on writing until they have one): {missing_entries(FIELDS)}")


@pytest.mark.backend_independent
def test_a_new_field_is_refused_everywhere_until_mapped(monkeypatch):
    fields = (*FIELDS, "new_option")
    assert missing_entries(fields) == [("new_option", format) for format in COLUMNS]
    monkeypatch.setattr(capabilities, "FIELDS", fields)
    with_option = dataclasses.make_dataclass("WithOption", [("new_option", bool, False)],
                                             bases=(ViTConfig,), frozen=True)
    for format in BASES:
        why, instead = refusal(with_option(**{**SMALL, **BASES[format]}, new_option=True), format)
        assert why.startswith("new_option=True, which keras_vit does not map to") and "keras" in instead


def unmapped(registry):
    """What a format of `registry` (`formats.FORMATS`) writes or reads that has no
    capability column, or no entry in the table: (format, column) pairs, ``""`` for a
    format without columns."""
    written = {(f.name, f.written_as(ViTConfig(**{**SMALL, **base}))) for f in registry.values()
               for base in BASES.values()}
    return sorted({(name, column) for name, column in written if column not in registry[name].columns}
                  | {(f.name, column) for f in registry.values() for column in f.columns
                     if column not in COLUMNS or any(column not in row for row in TABLE.values())}
                  | {(f.name, "") for f in registry.values() if not f.columns})


@pytest.mark.backend_independent
def test_every_format_of_the_registry_has_its_columns(monkeypatch):
    """The registry is the one list of formats: the writers' names, the command
    line's choices and the capability columns come from it, and a format added
    without a column (or with one the table has no entries for) is reported."""
    assert unmapped(formats.FORMATS) == []
    assert [*capabilities.COLUMNS] == [c for f in formats.FORMATS.values() for c in f.columns] + ["keras"]
    from keras_vit import cli

    convert = cli.build_parser()._subparsers._group_actions[0].choices["convert"].add_flags()
    assert next(a for a in convert._actions if a.dest == "format").choices == ("keras", *formats.FORMATS)
    new = dataclasses.replace(formats.FORMATS["timm"], name="new", columns={})
    assert unmapped({**formats.FORMATS, "new": new}) == [("new", ""), ("new", "timm")]
    other = dataclasses.replace(new, columns={"new": capabilities.Column("New", "new", "New")},
                                written_as=lambda c: "new")
    assert unmapped({**formats.FORMATS, "new": other}) == [("new", "new")]


@pytest.mark.backend_independent
def test_the_docs_show_the_registrys_paths_and_formats():
    docs = DOCS.read_text()
    assert formats.markdown() in docs, (
        "docs/checkpoints.md does not hold the current table of paths: paste "
        "keras_vit.weights.formats.markdown() in its place")
    lines = docs.split("\n")
    start = lines.index(next(line for line in lines if line.startswith("| `format` | writes |")))
    written = [line.split("|")[1].strip().strip('`"') for line in lines[start + 2:]
               if line.startswith("| `")]
    assert written[:len(formats.FORMATS)] == list(formats.FORMATS)  # the writing table: one row each


@pytest.mark.backend_independent
def test_a_rotary_model_is_refused_by_timm_naming_the_options_eva_lacks():
    rotary = dict(SMALL, position_embedding="rope", rope_grid="index", layer_scale_init=1e-5,
                  gelu_approximate=False)
    why, instead = refusal(ViTConfig(**rotary, qk_norm=True), "timm")
    assert why.startswith("rotary position embeddings beside qk_norm, which timm's Eva") and "keras" in instead
    why, _ = refusal(ViTConfig(**rotary, qk_norm=True, mlp_bias=False), "timm")
    assert why.startswith("rotary position embeddings beside qk_norm, mlp_bias, which")
    assert refusal(ViTConfig(**rotary, num_registers=2), "timm") is None  # timm's rotary ViTs with registers


@pytest.mark.backend_independent
def test_the_docs_show_the_table():
    assert capabilities.markdown() in DOCS.read_text(), (
        "docs/checkpoints.md does not hold the current capability table: paste "
        "keras_vit.weights.capabilities.markdown() in its place")


@pytest.mark.backend_independent
@pytest.mark.parametrize("format", list(BASES))
def test_the_values_the_table_writes_are_not_refused(format):
    base = {**SMALL, **BASES[format]}
    assert refusal(ViTConfig(**base), format) is None
    for field in FIELDS:
        for change in _values(field, format):
            assert refusal(ViTConfig(**{**base, **change}), format) is None, (field, change)


def _values(field, format):
    entry = TABLE.get(field, {}).get(format)  # none: test_every_field_has_an_entry_in_every_format
    return entry.values if entry else ()


def written_configs(format):
    """The table's written values for `format` packed into as few valid
    configs as can be (one round trip each)."""
    base, configs, current = {**SMALL, **BASES[format]}, [], {}
    for field in FIELDS:
        for change in _values(field, format):
            trial = {**current, **change}
            clash = any(k in current for k in change)
            try:
                ok = not clash and refusal(ViTConfig(**{**base, **trial}), format) is None
            except ValueError:
                ok = False
            if not ok:
                configs.append(current)
                trial = change
            current = trial
    return [{**base, **changes} for changes in [*configs, current]]


CASES = [(format, config) for format in BASES for config in written_configs(format)]


# The writers and readers work on NumPy arrays, whatever the backend (the parity tests of
# test_checkpoints.py and test_writers.py run each format on three backends): once.
@pytest.mark.backend_independent
@pytest.mark.parametrize("format, config", CASES, ids=[
    f"{f}-{'-'.join(sorted(set(c) - set(SMALL) - set(BASES[f]))) or 'base'}" for f, c in CASES])
def test_what_the_table_writes_reads_back(tmp_path, format, config):
    model = ViT(**config)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.2, variable.shape).astype("float32"))
    if model.num_registers and model.position_embedding == "learned" and format == "keras_hub":
        # DINOv2's registers take no position embeddings
        table = to_numpy(model.parts.position_embedding.embeddings).copy()
        table[:, 1:1 + model.num_registers] = 0
        model.parts.position_embedding.embeddings.assign(table)
    path = tmp_path / ("out.npz" if format == "npz" else "out")
    model.save_checkpoint(path, checkpoint_format=FORMAT_OF[format])
    size = {"image_size": model.image_size} if model.position_embedding == "sincos2d" else {}
    back = ViT.from_checkpoint(path, **size)
    x = np.random.default_rng(1).normal(size=(1, *model.image_size, 3)).astype("float32")
    if model.config.naflex:  # the image and one of another shape, as NaFlex sequences
        x = naflex_inputs([x[0], x[0, :, :5]], model.config.patch_size, model.config.max_num_patches,
                          pixel_scale=1.0, pixel_offset=0.0)
    np.testing.assert_allclose(to_numpy(back(x)), to_numpy(model(x)), rtol=0, atol=1e-5)
    if model.mlp_activation != "gelu":  # no GELU in the model: its form is not written
        model = model.with_config(gelu_approximate=back.gelu_approximate)
    assert back.config == model.config
