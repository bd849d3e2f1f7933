"""scripts/prerequisites: what the README's two commands need, each thing missing named in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prerequisites"


def _check(mode: str, path: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PATH": path, "HOME": str(tmp_path), "PYENV_ROOT": str(tmp_path / "no-pyenv")}
    return subprocess.run([shutil.which("bash"), str(SCRIPT), mode], capture_output=True, text=True, env=env)


def test_this_machine_has_what_the_tests_need(tmp_path):
    # Expect: the machine running the tests passes the check the tests' own command makes.
    done = subprocess.run([shutil.which("bash"), str(SCRIPT), "test"], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")


def test_each_missing_prerequisite_is_one_line_and_the_check_fails(tmp_path):
    # Setup: a PATH holding only bash's own folder's tools we link in (no Python, Java, Maven, openssl), no pyenv.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ls", "sort", "sed", "head", "printf"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    done = _check("test", str(bin_dir), tmp_path)
    lines = done.stderr.splitlines()
    # Expect: exit 1; one line per missing thing, each naming it and why it is needed.
    assert done.returncode == 1
    assert [line.split(" (")[0].split(":")[1].strip() for line in lines][:4] == [
        "missing Python 3.13", "missing Python 3.10", "missing Python 3.12", "missing Java 17 or newer"]
    assert any(line.startswith("prerequisites: missing Maven") for line in lines)
    assert any(line.startswith("prerequisites: missing openssl") for line in lines)
    assert any(line.startswith("prerequisites: missing the system python3") for line in lines)
    demo = _check("demo", str(bin_dir), tmp_path).stderr.splitlines()
    assert [line for line in demo if "3.10" in line or "openssl" in line] == []  # the demo needs neither
