"""Fixtures shared by the planner's tests."""

import contextlib
import io
import json

import pytest

from trainperf.cli.main import main


@pytest.fixture(scope="session")
def validate_405b_json() -> dict:
    """`trainperf plan validate --benchmark llama31_405b --json` through the CLI, run once: it predicts
    every catalogue row (the cross-fitted band needs them all), 10-12 s on 2 cores, and two test
    files read its output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "validate", "--benchmark", "llama31_405b", "--json"]) == 0
    return json.loads(out.getvalue())
