"""The product as users install it: its wheel, and virtualenvs of a given Python holding it.

Used by the session fixtures `wheel`, `runtime_python` and `runtime_python_with_spark` (tests/conftest.py), which
start making them in the background at the end of collection.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ticdc_delta.jobs.paths import cache_dir

ROOT = Path(__file__).resolve().parent.parent
# The repository's product folders (setup.cfg installs them as `ticdc_delta.<folder>` under the root package's own).
PRODUCT_FOLDERS = ("ticdc_delta", "schema_cache", "apply", "jobs")
WHEEL_INPUTS = ("setup.cfg", "pyproject.toml", "README.md", "LICENSE", *PRODUCT_FOLDERS)


def pip_env() -> dict[str, str]:
    return {**os.environ, "PIP_CACHE_DIR": str(cache_dir() / "pip"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def build_wheel(source: Path, out: Path) -> Path:
    """The wheel built from a copy of its inputs in `source` (so both pairs' runs never share build/)."""
    for name in WHEEL_INPUTS:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}))
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
                   check=True, capture_output=True, env=pip_env())
    (built,) = out.glob("ticdc_delta-*.whl")
    return built


def virtualenv(python: str, folder: Path, *requirements: str) -> Path:
    """A virtualenv of `python` in `folder` with `requirements`, at the versions the tests run with (so the
    install needs nothing new), installed by uv (as scripts/setup does: it links from its cache, where pip
    took about 20 s for pyarrow and pandas)."""
    uv = str(Path(sys.executable).parent / "uv")
    env = {**pip_env(), "UV_CACHE_DIR": str(cache_dir() / "uv")}
    subprocess.run([uv, "venv", "--quiet", "--python", python, str(folder)], check=True, env=env)
    pins = folder / "constraints.txt"
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout
    pins.write_text("\n".join(line for line in frozen.splitlines() if not line.startswith(("-e", "setuptools"))))
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(folder / "bin" / "python"), "-c", str(pins),
                    *requirements], check=True, env=env)
    return folder / "bin" / "python"


def python_of(version: str) -> str:
    """Python `version` where scripts/setup finds one: on PATH, else among pyenv's installs."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in [shutil.which(f"python{version}"), *sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True)]:
        if candidate and subprocess.run([str(candidate), "-c", f"import sys; assert sys.version.startswith('{version}.')"],
                                        capture_output=True).returncode == 0:
            return str(candidate)
    raise AssertionError(f"Python {version} is needed for the Databricks Runtime 16.x pair (scripts/setup finds it the same way)")


def runtime_venv(wheel: Path, folder: Path) -> Path:
    """Python 3.12 as Databricks Runtime 16.x has it beside Spark 3.5, for spark-submit (which brings pyspark):
    the wheel, and what that runtime also brings: pyarrow and pandas (what the Spark engine's Python workers
    need; spark-submit's test runs the driver engine since 2026-11-28), setuptools (pyspark 3.5's distutils)."""
    return virtualenv(python_of("3.12"), folder, str(wheel), "pandas", "pyarrow", "setuptools")


def runtime_venv_with_spark(wheel: Path, folder: Path) -> Path:
    """Python 3.12 with the wheel and its `local` extra (pyspark and delta-spark at this pair's versions), for
    job processes of the driver engine on Python 3.12 with Spark 3.5 (on the oldest pair)."""
    return virtualenv(python_of("3.12"), folder, f"{wheel}[local]", "setuptools")
