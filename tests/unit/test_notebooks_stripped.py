"""The notebooks are kept in git without outputs, and take their inputs from a first parameter cell."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_has_no_outputs_and_no_execution_counts(path):
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {index} has outputs: clear them before committing"
            assert cell.execution_count is None, f"{path.name} cell {index} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_holds_the_parameters(path):
    # CI points the notebooks at a temporary demo through environment variables read there.
    notebook = nbformat.read(path, as_version=4)
    first = next(c for c in notebook.cells if c.cell_type == "code")
    assert "parameters" in first.metadata.get("tags", [])
    assert "os.environ.get(" in first.source
