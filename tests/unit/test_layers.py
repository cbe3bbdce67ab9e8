"""The layers hold: the import contracts in pyproject.toml ([tool.importlinter]) are kept by the code
of this checkout. One test per contract, so a failure names the rule; the report above the failure
names each import that breaks it. The same check from a shell: `.venv/bin/lint-imports`."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from importlinter import configuration
from importlinter.application.use_cases import lint_imports

import ragmesh
import services

configuration.configure()  # what the lint-imports command does first: its config readers and output

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"
CONTRACTS = [c["id"] for c in tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]]


def test_the_contracts_are_checked_on_this_checkout() -> None:
    """The graph is built from the packages Python imports: they must be this checkout's."""
    assert {Path(p.__file__).resolve().parents[1] for p in (ragmesh, services)} == {ROOT}
    assert set(CONTRACTS) == {"layers", "grpc-at-the-edges", "no-cycles"}


@pytest.mark.parametrize("contract", CONTRACTS)
def test_the_import_contract_is_kept(contract: str) -> None:
    assert lint_imports(str(CONFIG), limit_to_contracts=(contract,), cache_dir=None, no_logo=True), \
        f"the import contract {contract!r} is broken: the report above names the imports"
