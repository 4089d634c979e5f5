"""The docs site (mkdocs.yml) and the code examples of the guides.

- ``mkdocs build --strict`` must pass: a broken reference (``::: name`` that
  does not exist, a link to a missing page or anchor), a docstring Griffe
  cannot parse, or a public object without a docstring fails it. The build
  reads the sources statically and does not depend on the Keras backend, so
  it runs under TensorFlow only.
- The ```python blocks of README.md and docs/*.md run, in order, in one
  namespace per file, in a temporary working directory. The guides and
  docstrings take turns (`conftest.take_turns`): each runs in one backend's
  pass, and every backend runs a third of them.
  A block preceded by a line ``<!-- not-run: reason -->`` is skipped (it
  needs a download, an accelerator or a cluster); the reason is printed.
- A result an example shows is compared with what it prints: the comments
  ``# -> text`` of a block, in order, are the block's whole output
  (whitespace-insensitive, ``...`` matching anything, a further `` # ``
  starting a note), as in doctest. The
  same holds for the ```python blocks of public docstrings (functions,
  classes and their methods), and their ``>>>`` examples run as doctests.
"""

import contextlib
import copy
import doctest
import io
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import traceback

import pytest
import yaml
from conftest import take_turns

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)")


def _mkdocs_build(config_file, site_dir):
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(config_file), "--site-dir", str(site_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )


# --- the site ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.backend_independent
def test_mkdocs_build_strict(tmp_path):
    result = _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, (
        f"mkdocs build --strict failed (rc {result.returncode}):\n{result.stderr}\n{result.stdout}"
    )
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    # The API pages are generated from the docstrings.
    page = (site / "api" / "ViT" / "index.html").read_text()
    assert 'id="keras_vit.ViT"' in page and 'id="keras_vit.ViT.from_checkpoint"' in page
    assert (site / "api" / "pretrained" / "index.html").is_file()
    assert (site / "api" / "download" / "index.html").is_file()


def _small_site(tmp_path, page, package=None):
    """A copy of mkdocs.yml's theme, plugins and options over one API page."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config = copy.deepcopy(config)
    docs = tmp_path / "docs"
    (docs / "api").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n\n[The page](api/page.md)\n")
    (docs / "api" / "page.md").write_text(page)
    config["docs_dir"] = str(docs)
    config["nav"] = [{"Home": "index.md"}, {"API": "api/page.md"}]
    config.pop("extra_javascript", None)
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            python = plugin["mkdocstrings"]["handlers"]["python"]
            python["paths"] = [str(ROOT)]
            if package is not None:
                name, source = package
                (tmp_path / "src" / name).mkdir(parents=True)
                (tmp_path / "src" / name / "__init__.py").write_text(textwrap.dedent(source))
                python["paths"].append(str(tmp_path / "src"))
            python["options"]["extensions"] = [
                str(ROOT / extension) for extension in python["options"]["extensions"]
            ]
    config_file = tmp_path / "mkdocs.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    return _mkdocs_build(config_file, tmp_path / "site")


@pytest.mark.backend_independent
@pytest.mark.slow
def test_strict_build_passes_a_good_page(tmp_path):
    # The control for the two failures below: the same small site builds.
    result = _small_site(tmp_path, "# ClassToken\n\n::: keras_vit.layers.ClassToken\n")
    assert result.returncode == 0, result.stderr


@pytest.mark.backend_independent
@pytest.mark.slow
def test_strict_build_fails_on_a_broken_reference(tmp_path):
    result = _small_site(tmp_path, "# Broken\n\n::: keras_vit.does_not_exist\n")
    assert result.returncode != 0, result.stderr
    assert "keras_vit.does_not_exist" in result.stderr + result.stdout


@pytest.mark.backend_independent
@pytest.mark.slow
def test_strict_build_fails_on_a_missing_docstring(tmp_path):
    source = '''
        """A package with one documented and one undocumented function."""


        def documented():
            """Has a docstring."""


        def undocumented_function():
            return 1
    '''
    result = _small_site(tmp_path, "# Undocumented\n\n::: undocumented_pkg\n",
                         package=("undocumented_pkg", source))
    assert result.returncode != 0, result.stderr
    output = result.stderr + result.stdout
    assert "undocumented_pkg.undocumented_function" in output, output
    assert "no docstring" in output


# --- the guides' examples ----------------------------------------------------


def code_blocks(path):
    """``(line, code, not_run_reason)`` for each ```python block of `path`."""
    lines = path.read_text().splitlines()
    blocks, i, previous = [], 0, ""
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        indent, language = match.groups()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        if language == "python":
            reason = NOT_RUN.match(previous)
            blocks.append((start, textwrap.dedent("\n".join(body)) + "\n",
                           reason.group(1) if reason else None))
        previous = ""
    return blocks


@pytest.mark.backend_independent
def test_not_run_markers_precede_python_blocks():
    # A marker anywhere else would silently do nothing.
    for path in GUIDES:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if NOT_RUN.match(line):
                following = next((l for l in lines[number + 1:] if l.strip()), "")
                assert FENCE.match(following) and FENCE.match(following).group(2) == "python", (
                    f"{path.relative_to(ROOT)}:{number + 1}: a not-run marker must precede a ```python block"
                )


@pytest.mark.parametrize("path", take_turns(pytest.param(p, id=str(p.relative_to(ROOT))) for p in GUIDES))
@pytest.mark.slow_cases("docs/architecture.md",
                        "docs/distillation.md",
                        "docs/data.md",
                        "docs/getting_started.md",
                        "docs/token_merging.md",
                        "docs/deploy.md",
                        "docs/explain.md",
                        "docs/zero_shot.md")
def test_guide_examples_run(path, tmp_path, monkeypatch):
    blocks = code_blocks(path)
    if not blocks:
        pytest.skip(f"{path.relative_to(ROOT)} has no python examples")
    monkeypatch.chdir(tmp_path)
    # An example may set environment variables (getting_started.md sets
    # KERAS_BACKEND to show how); they must not leak into later tests.
    saved = os.environ.copy()
    try:
        _run_blocks(path, blocks)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _run_blocks(path, blocks):
    namespace = {"__name__": "__docs__"}
    name = str(path.relative_to(ROOT))
    ran = 0
    for line, code, reason in blocks:
        if reason is not None:
            print(f"{name}:{line}: not run: {reason}")
            continue
        run_example(code, f"{name}:{line}", namespace)
        ran += 1
    print(f"{name}: {ran} of {len(blocks)} examples ran")
    if ran == 0:
        pytest.skip(f"{name}: every example is marked not-run")


SHOWN = re.compile(r"#\s?->(.*)$")


def shown_output(code):
    """The output an example shows: its ``# -> text`` comments, in order
    (what follows a further `` # `` on the line is a note, not output)."""
    return [match.group(1).split(" # ")[0].strip() for line in code.splitlines()
            if (match := SHOWN.search(line))]


def output_matches(shown, printed):
    """Whether `printed` is the `shown` lines, whitespace-insensitive, each
    ``...`` standing for any text."""
    want = " ".join(" ".join(shown).split())
    got = " ".join(printed.split())
    return re.fullmatch(".*?".join(re.escape(part) for part in want.split("...")), got, re.S) is not None


def run_example(code, where, namespace):
    """Runs `code` in `namespace`; fails naming `where` if it raises, or if
    it shows a result (``# ->``) other than what it prints. Keras's names
    start afresh (``clear_session``), as in the new process a reader runs the
    example in: a layer the example names by default is ``transformer_encoder``
    whatever the tests before it made."""
    import keras

    keras.backend.clear_session()
    printed = io.StringIO()
    failure = None
    try:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, where, "exec"), namespace)
    except Exception as error:  # report any failure with its block
        # Only the example's frames: drop this function's.
        failure = "".join(traceback.format_exception(error.__class__, error, error.__traceback__.tb_next))
    sys.stdout.write(printed.getvalue())
    if failure is not None:
        pytest.fail(f"{where}: the example failed:\n{failure}", pytrace=False)
    shown = shown_output(code)
    if shown and not output_matches(shown, printed.getvalue()):
        pytest.fail(f"{where}: the example shows\n  " + "\n  ".join(shown)
                    + "\nbut printed\n  " + "\n  ".join(printed.getvalue().splitlines()), pytrace=False)


@pytest.mark.backend_independent
def test_a_wrong_shown_result_fails(tmp_path):
    """The control: a guide whose shown result is changed in a copy fails,
    naming the block, what it shows and what it printed; the original passes."""
    guide = ROOT / "docs" / "architecture.md"
    (line, code, _), = [b for b in code_blocks(guide) if "# -> True (4, 4)" in b[1]]
    run_example(code, "architecture.md", {"__name__": "__docs__"})
    wrong = code.replace("# -> True (4, 4)", "# -> True (4, 5)")
    with pytest.raises(pytest.fail.Exception, match=r"shows\n  True \(4, 5\)[\s\S]*but printed\n  True \(4, 4\)"):
        run_example(wrong, "architecture.md (changed)", {"__name__": "__docs__"})
    assert output_matches(["[1, ...,", "3]"], "[1, 2,\n 3]") and not output_matches(["[1, 2]"], "[1, 2, 3]")


# --- the examples in the docstrings (the API pages show them) -----------------

API_MODULES = ["keras_vit", "keras_vit.layers", "keras_vit.data", "keras_vit.training",
               "keras_vit.weights", "keras_vit.explain", "keras_vit.distribution",
               "keras_vit.presets", "keras_vit.kernels", "keras_vit.evaluation", "keras_vit.distillation"]


def public_objects():
    """``(path, object)`` for each public function, class and method of the API modules."""
    import importlib
    import inspect

    found, seen = [], set()
    for module_name in API_MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
        for name in names:
            obj = getattr(module, name, None)
            if id(obj) in seen or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            if not obj.__module__.startswith("keras_vit"):  # re-exported, e.g. DecodeError (TensorFlow's)
                continue
            found.append((f"{module_name}.{name}", obj))
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    value = getattr(value, "__func__", value)  # classmethod, staticmethod
                    if not member.startswith("_") and inspect.isfunction(value) and id(value) not in seen:
                        seen.add(id(value))
                        found.append((f"{module_name}.{name}.{member}", value))
    return found


def docstring_examples():
    """``(object path, code)`` for each ```python block in a public docstring."""
    import inspect

    return [(path, textwrap.dedent(code)) for path, obj in public_objects()
            for code in re.findall(r"```python\n(.*?)```", inspect.getdoc(obj) or "", re.S)]


def doctests():
    """``(object path, doctest)`` for each public docstring with ``>>>`` examples,
    run in a copy of its module's namespace, as doctest does."""
    import inspect

    parser = doctest.DocTestParser()
    found = []
    for path, obj in public_objects():
        doc = inspect.getdoc(obj) or ""
        if ">>>" in doc:
            namespace = dict(vars(sys.modules[obj.__module__]))
            found.append((path, parser.get_doctest(doc, namespace, path, None, 0)))
    return found


DOCSTRING_EXAMPLES = docstring_examples()
DOCTESTS = doctests()


@pytest.mark.parametrize("path,code", take_turns(pytest.param(*example, id=example[0])
                                                 for example in DOCSTRING_EXAMPLES))
@pytest.mark.slow_cases("keras_vit.kernels.keras_layers_only",
                        "keras_vit.layers.BottleneckUnit",
                        "keras_vit.training.masked_patch_dataset",
                        "keras_vit.training.pretrain_optimizer",
                        "keras_vit.segmentation_probe",
                        "keras_vit.training.train")
def test_docstring_examples_run(path, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_example(code, f"<docstring of {path}>", {"__name__": "__docs__"})


@pytest.mark.parametrize("path,test", take_turns(pytest.param(*case, id=case[0]) for case in DOCTESTS))
def test_docstring_doctests_pass(path, test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = io.StringIO()
    runner.run(test, out=report.write)
    assert runner.failures == 0 and test.examples, f"{path}:\n{report.getvalue()}"


@pytest.mark.backend_independent
def test_the_deploy_guide_shows_the_export_routes():
    """docs/deploy.md holds the tables of export routes as their records
    write them (`keras_vit.export.routes.markdown`)."""
    from keras_vit.export import routes

    assert routes.markdown() in (ROOT / "docs" / "deploy.md").read_text(), (
        "docs/deploy.md does not hold the current tables of export routes: paste "
        "keras_vit.export.routes.markdown() in their place")
