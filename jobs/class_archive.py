"""A class-data-sharing archive for the local driver JVM of the product's own commands.

A cold JVM's first Delta statements spend seconds loading and verifying classes (15,000 of Spark's,
Delta's and Hadoop's in a job run); an archive of them, mapped at start, took 4-6 s off a run's first
Delta read and 1-2 s off Spark's start here (docs/performance.md). HotSpot writes one at a JVM's exit
(`-XX:ArchiveClassesAtExit`): the first run of a class path makes it as it ends, later runs map it.

The archive is written after the job's Python has returned, by a JVM nobody waits for; one cut short is
truncated, and mapping a truncated archive crashes the JVM. So a run writes to a file of its own
(`<key>.<id>.part`, with a note of its JVM's process, options and class path), and a later run takes it
into use only once that JVM has ended and a JVM started with the same options and class path maps it
with `-Xshare:on` and its checksums verified (`-XX:+VerifySharedSpaces`); a candidate that fails is deleted.
An archive whose jars or JVM changed since is ignored by the JVM itself (it checks both at every start):
the key changes with them, so a new one is made.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# The JVM's own warnings about classes it cannot archive (signed jars, old class files: over a thousand
# lines at a dump) and about an archive it will not map (stale: it then runs without) are not the job's.
_QUIET = "-Xlog:cds*=off"
# A start whose JVM was never noted (the starting process still there after this long), or a candidate
# whose note is lost or unreadable for this long, is taken for abandoned; a noted live JVM never is.
_WRITER_PATIENCE_SECONDS = 600
# Archives of class paths not used for this long are removed when a new one is made (each is ~200 MB).
_UNUSED_DAYS = 30


def archive_key(java: Path, class_path: Sequence[Path]) -> str:
    """What an archive depends on: the JVM (its installation, by its module image and its own base archive)
    and every jar of the class path (by path, size and time), so an upgrade of either makes a new archive."""
    digest = hashlib.sha256()
    java_home = java.resolve().parent.parent
    for path in [java_home / "lib" / "modules", java_home / "lib" / "server" / "classes.jsa", *class_path]:
        try:
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{path}\0missing\n".encode())
    return digest.hexdigest()[:16]


class ClassArchive:
    """The archive of one class path in `folder`; `options()` are the JVM options for the next start."""

    def __init__(self, folder: Path, key: str) -> None:
        self._folder = folder
        self._key = key
        self.final = folder / f"{key}.jsa"
        self.writing: Path | None = None  # the candidate this start's JVM writes at its exit

    def options(self) -> str:
        """Map the archive if there is one (taking a finished candidate into use first), else write a
        candidate at exit unless another JVM is about to; "" when neither."""
        self._folder.mkdir(parents=True, exist_ok=True)
        someone_writing = self._settle_candidates()
        if self.final.exists() and not self._whole():
            log.info("class archive %s changed since it was checked; removed (a later run writes another)", self.final.name)
            _remove(self.final)
        if self.final.exists():
            try:
                os.utime(self.final)  # (used: kept by `_remove_unused`)
            except OSError:
                pass
            # (checksums verified at every start too: an archive damaged since is then not mapped, where
            # mapping it would crash the JVM; a tenth of a second or so of CRC)
            return f"-XX:SharedArchiveFile={self.final} -XX:+VerifySharedSpaces {_QUIET}"
        if someone_writing:
            return ""
        self._remove_unused()
        self.writing = self._folder / f"{self._key}.{uuid.uuid4().hex[:12]}.part"
        # Noted before the JVM starts (this process stands for it until then): a start meanwhile leaves the
        # archive to it. The JVM creates the archive's file only as it exits.
        _write_note(_note_of(self.writing), {"pid": os.getpid()})
        return f"-XX:ArchiveClassesAtExit={self.writing} -XX:+VerifySharedSpaces {_QUIET}"

    def note_writer(self, jvm_pid: int, java_home: str, arguments: Sequence[str], class_path: str) -> None:
        """What a later start needs to check the candidate this JVM writes: when it is done, and how to map it."""
        if self.writing is None:
            return
        note = {"pid": jvm_pid, "java_home": java_home, "arguments": list(arguments), "class_path": class_path}
        _write_note(_note_of(self.writing), note)

    def _whole(self) -> bool:
        """The archive's size is the one it had when it was checked (a truncated archive crashes the JVM
        that maps it, checksums or not)."""
        try:
            return int(self._size_file.read_text()) == self.final.stat().st_size
        except (OSError, ValueError):
            return False

    @property
    def _size_file(self) -> Path:
        return self._folder / f"{self._key}.size"

    def _settle_candidates(self) -> bool:
        """Takes the first finished candidate that maps whole into use (when there is no archive yet) and
        removes the other finished ones; whether a candidate's JVM may still be writing."""
        someone_writing = False
        for note_path in sorted(self._folder.glob(f"{self._key}.*.json")):
            candidate = note_path.with_suffix(".part")
            note = _read_note(note_path)
            if _may_be_writing(note, note_path):
                someone_writing = True
                continue
            if candidate.exists() and not self.final.exists():
                if note is not None and "class_path" in note and _maps(candidate, note):
                    try:
                        self._size_file.write_text(str(candidate.stat().st_size))
                        os.replace(candidate, self.final)
                        log.info("class archive %s taken into use", self.final)
                    except OSError as err:
                        log.debug("could not take %s into use: %s", candidate, err)
                else:
                    log.info("class archive candidate %s was cut short; removed (a later run writes another)", candidate.name)
            _remove(candidate)
            _remove(note_path)
        return someone_writing

    def _remove_unused(self) -> None:
        """Archives unused for a month, and any class path's candidates whose writers are gone."""
        cutoff = time.time() - _UNUSED_DAYS * 86400
        for archive in self._folder.glob("*.jsa"):
            try:
                if archive.stat().st_mtime < cutoff:
                    archive.unlink()
                    _remove(archive.with_suffix(".size"))
            except OSError:
                pass
        for note_path in self._folder.glob("*.json"):
            if not _may_be_writing(_read_note(note_path), note_path):
                _remove(note_path.with_suffix(".part"))
                _remove(note_path)
        for orphan in [*self._folder.glob("*.part"), *self._folder.glob("*.tmp")]:  # (its note lost; a note cut off)
            if not _note_of(orphan).exists() and _age(orphan) > _WRITER_PATIENCE_SECONDS:
                _remove(orphan)


def _may_be_writing(note: dict | None, note_path: Path) -> bool:
    """Whether a candidate's writer may still write it: its JVM alive (however long it runs), or the process
    that started it alive and within its patience; a note not yet readable counts while young."""
    if note is None:
        return _age(note_path) <= _WRITER_PATIENCE_SECONDS
    if not _alive(note["pid"]):
        return False
    return "class_path" in note or _age(note_path) <= _WRITER_PATIENCE_SECONDS


def _note_of(candidate: Path) -> Path:
    return candidate.with_suffix(".json")


def _write_note(note_path: Path, note: dict) -> None:
    """Whole or not at all: a start reading it meanwhile must not take a half-written note for none."""
    partial = note_path.with_name(f"{note_path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(note))
    os.replace(partial, note_path)


def _read_note(note_path: Path) -> dict | None:
    try:
        note = json.loads(note_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(note, dict) or not isinstance(note.get("pid"), int) or not 0 < note["pid"] < 2**31:
        return None
    if "class_path" in note and not (
        isinstance(note["class_path"], str) and isinstance(note.get("java_home"), str)
        and isinstance(note.get("arguments"), list) and all(isinstance(a, str) for a in note["arguments"])
    ):
        return None
    return note


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie no longer writes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _maps(candidate: Path, note: dict) -> bool:
    """Whether a JVM with the writer's options and class path maps `candidate` whole (checksums verified)."""
    kept = [a for a in note["arguments"] if _matters_for_mapping(a)]
    command = [
        str(Path(note["java_home"]) / "bin" / "java"), *kept, "-Xshare:on", f"-XX:SharedArchiveFile={candidate}",
        "-XX:+VerifySharedSpaces", _QUIET, "-XX:-CreateCoredumpOnCrash", f"-XX:ErrorFile={os.devnull}",
        "-cp", note["class_path"], "-version",
    ]
    try:
        return subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError) as err:
        log.debug("could not check class archive %s: %s", candidate, err)
        return False


def _matters_for_mapping(argument: str) -> bool:
    """The writer's JVM options that can decide whether an archive maps (heap size, collector, modules);
    not its properties, agents (a debugger's would wait), logs or recordings (they would write files)."""
    if argument.startswith(("-XX:ArchiveClassesAtExit", "-XX:SharedArchiveFile", "-XX:StartFlightRecording",
                            "-XX:FlightRecorderOptions", "-Xlog", "-Xrun", "-Xdebug")):
        return False
    return argument.startswith(("-X", "--"))


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
