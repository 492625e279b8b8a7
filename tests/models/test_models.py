"""The model zoo (zoo.py) through thunder_c.jit against PyTorch eager: per model an eval forward, one
train step (loss, every gradient, every parameter after an SGD step) and, for language models, a
bfloat16 autocast forward (runner.py says what each compares).

A model/mode that fails today is listed in failures.json with its failure (the missing op, as
thunder_c's NotImplementedError names it): it is an xfail with that reason, strict, and it fails the
same way or the test fails — when the op lands the test passes and the strict xfail flips, and a
different failure surfaces as itself. `report.py --update-failures` rewrites failures.json from a run.

Models whose spec sets `backend` (LitGPT's) also run forward and train through the torch.compile
backend, thunder_c.dynamo.ThunderCompiler, which must take every node of their graphs.
"""
import json
import pathlib

import pytest

import runner
import zoo

FAILURES = json.loads((pathlib.Path(__file__).with_name("failures.json")).read_text())


class KnownFailure(Exception):
    """The failure failures.json records for this model and mode."""


def _cases():
    for spec in zoo.SPECS:
        for mode in runner.modes(spec):
            marks = []
            known = FAILURES.get(spec.name, {}).get(mode)
            if spec.skip:
                marks.append(pytest.mark.skip(reason=spec.skip))
            elif known:
                marks.append(pytest.mark.xfail(strict=True, raises=KnownFailure, reason=known))
            yield pytest.param(spec.name, mode, marks=marks, id=f"{spec.name}-{mode}")


def test_failures_json_names_zoo_models():
    for name, modes in FAILURES.items():
        assert name in zoo.BY_NAME, f"failures.json: unknown model {name}"
        assert set(modes) <= set(runner.MODES), f"failures.json: {name}: unknown modes {set(modes) - set(runner.MODES)}"


def _backend_cases():
    for spec in zoo.SPECS:
        if spec.backend:
            for mode in ("forward", "train"):
                marks = [pytest.mark.skip(reason=spec.skip)] if spec.skip else []
                yield pytest.param(spec.name, mode, marks=marks, id=f"{spec.name}-backend_{mode}")


@pytest.mark.parametrize("name,mode", list(_cases()))
def test_model(name, mode):
    import thunder_c  # noqa: F401  (fails loudly when the extension is not built)
    spec = zoo.get(name)
    known = FAILURES.get(name, {}).get(mode)
    try:
        runner.check(spec, mode)
    except Exception as e:
        if known and runner.reason(e) == known:
            raise KnownFailure(known) from e
        raise


@pytest.mark.parametrize("name,mode", list(_backend_cases()))
def test_model_through_the_backend(name, mode):
    """The same forward / train check through torch.compile(backend=ThunderCompiler()), with every node
    of the graphs Dynamo hands over in a thunder-c region: none split out to eager, none fallen back."""
    import thunder_c  # noqa: F401
    backend = runner.ThunderBackend()
    runner.check(zoo.get(name), mode, backend)
    thunder, total = backend.coverage()
    assert total and thunder == total, backend.compiler.report()
