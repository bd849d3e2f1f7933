"""When a start writes a class archive, maps one, or leaves it to another JVM (jobs.class_archive's decisions;
tests/e2e/test_class_archive.py makes and maps real ones)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ticdc_delta.jobs import class_archive
from ticdc_delta.jobs.class_archive import ClassArchive, archive_key


def _ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_first_start_writes_a_candidate_noted_as_its_own(tmp_path):
    archive = ClassArchive(tmp_path, "k")

    options = archive.options()

    assert archive.writing is not None and archive.writing.parent == tmp_path and archive.writing.suffix == ".part"
    assert f"-XX:ArchiveClassesAtExit={archive.writing}" in options and "-XX:+VerifySharedSpaces" in options
    assert json.loads(archive.writing.with_suffix(".json").read_text()) == {"pid": os.getpid()}


def test_a_start_while_another_jvm_may_write_leaves_the_archive_to_it(tmp_path):
    (tmp_path / "k.abc.json").write_text(json.dumps({"pid": os.getpid()}))  # a live writer
    archive = ClassArchive(tmp_path, "k")

    assert archive.options() == "" and archive.writing is None
    assert (tmp_path / "k.abc.json").exists()
    assert ClassArchive(tmp_path, "other").options() != ""  # another class path's archive is not that one


def test_a_writer_that_ended_without_an_archive_is_forgotten(tmp_path):
    (tmp_path / "k.abc.json").write_text(json.dumps({"pid": _ended_pid()}))  # killed before its exit's dump

    options = ClassArchive(tmp_path, "k").options()

    assert "ArchiveClassesAtExit" in options and not (tmp_path / "k.abc.json").exists()


def test_a_starting_process_past_its_patience_no_longer_holds_the_archive_but_a_live_jvm_does(tmp_path):
    old = time.time() - class_archive._WRITER_PATIENCE_SECONDS - 5
    starting, jvm = tmp_path / "k.abc.json", tmp_path / "j.abc.json"
    starting.write_text(json.dumps({"pid": os.getpid()}))  # a start that never got its JVM's pid noted
    jvm.write_text(json.dumps({"pid": os.getpid(), "java_home": "/j", "arguments": [], "class_path": "x"}))  # a long run
    for note in (starting, jvm):
        os.utime(note, (old, old))

    assert "ArchiveClassesAtExit" in ClassArchive(tmp_path, "k").options()
    assert ClassArchive(tmp_path, "j").options() == "" and jvm.exists()


def test_a_note_being_written_holds_the_archive_and_a_malformed_old_one_does_not(tmp_path):
    (tmp_path / "k.abc.json").write_text("")  # read between its creation and its content
    assert ClassArchive(tmp_path, "k").options() == ""

    for bad in ({"pid": 2**40}, {"pid": "1"}, {"pid": _ended_pid(), "class_path": 3, "java_home": "/j", "arguments": []}):
        note = tmp_path / "m.abc.json"
        note.write_text(json.dumps(bad))
        old = time.time() - class_archive._WRITER_PATIENCE_SECONDS - 5
        os.utime(note, (old, old))
        assert "ArchiveClassesAtExit" in ClassArchive(tmp_path, "m").options()
        assert not note.exists()
        for made in tmp_path.glob("m.*"):
            made.unlink()


def test_candidates_of_other_class_paths_whose_writers_ended_are_removed(tmp_path):
    (tmp_path / "old.abc.part").write_bytes(b"x")
    (tmp_path / "old.abc.json").write_text(json.dumps({"pid": _ended_pid()}))
    (tmp_path / "live.abc.json").write_text(json.dumps({"pid": os.getpid()}))

    ClassArchive(tmp_path, "k").options()

    assert not (tmp_path / "old.abc.part").exists() and not (tmp_path / "old.abc.json").exists()
    assert (tmp_path / "live.abc.json").exists()


def test_an_archive_whose_size_changed_since_its_check_is_removed_not_mapped(tmp_path, monkeypatch):
    monkeypatch.setattr(class_archive, "_maps", lambda candidate, note: True)
    (tmp_path / "k.a.part").write_bytes(b"whole archive")
    (tmp_path / "k.a.json").write_text(json.dumps({"pid": _ended_pid(), "java_home": "/j", "arguments": [], "class_path": "x"}))
    assert "SharedArchiveFile" in ClassArchive(tmp_path, "k").options()
    assert "SharedArchiveFile" in ClassArchive(tmp_path, "k").options()

    (tmp_path / "k.jsa").chmod(0o644)
    (tmp_path / "k.jsa").write_bytes(b"whole")  # truncated since (a copy cut off): mapping it would crash the JVM

    options = ClassArchive(tmp_path, "k").options()
    assert "ArchiveClassesAtExit" in options and not (tmp_path / "k.jsa").exists()


def test_a_cut_short_candidate_is_removed_and_another_written(tmp_path, monkeypatch):
    monkeypatch.setattr(class_archive, "_maps", lambda candidate, note: False)
    (tmp_path / "k.abc.part").write_bytes(b"truncated")
    (tmp_path / "k.abc.json").write_text(json.dumps({"pid": _ended_pid(), "java_home": "/j", "arguments": [], "class_path": "x"}))

    options = ClassArchive(tmp_path, "k").options()

    assert "ArchiveClassesAtExit" in options
    assert not (tmp_path / "k.abc.part").exists() and not (tmp_path / "k.jsa").exists()


def test_a_finished_candidate_that_maps_is_used_and_the_others_removed(tmp_path, monkeypatch):
    checked = []
    monkeypatch.setattr(class_archive, "_maps", lambda candidate, note: checked.append(candidate.name) or True)
    for name in ("a", "b"):
        (tmp_path / f"k.{name}.part").write_bytes(name.encode())
        (tmp_path / f"k.{name}.json").write_text(
            json.dumps({"pid": _ended_pid(), "java_home": "/j", "arguments": [], "class_path": "x"}))

    archive = ClassArchive(tmp_path, "k")
    options = archive.options()

    assert options.startswith(f"-XX:SharedArchiveFile={tmp_path / 'k.jsa'} ") and archive.writing is None
    assert checked == ["k.a.part"] and (tmp_path / "k.jsa").read_bytes() == b"a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.jsa", "k.size"]


def test_archives_unused_for_a_month_go_when_a_new_one_is_written(tmp_path):
    stale, recent = tmp_path / "old.jsa", tmp_path / "recent.jsa"
    stale.write_bytes(b"x")
    recent.write_bytes(b"y")
    old = time.time() - (class_archive._UNUSED_DAYS + 1) * 86400
    os.utime(stale, (old, old))

    ClassArchive(tmp_path, "k").options()

    assert not stale.exists() and recent.exists()


def test_the_key_follows_the_jars_and_the_jvm(tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"1")
    (tmp_path / "jdk" / "bin").mkdir(parents=True)
    (tmp_path / "jdk" / "lib").mkdir()
    (tmp_path / "jdk" / "lib" / "modules").write_bytes(b"m")
    java = tmp_path / "jdk" / "bin" / "java"
    java.touch()
    first = archive_key(java, [jar])

    assert archive_key(java, [jar]) == first
    jar.write_bytes(b"12")  # a jar replaced in place
    assert archive_key(java, [jar]) != first
    second = archive_key(java, [jar])
    (tmp_path / "jdk" / "lib" / "modules").write_bytes(b"m2")  # the JVM upgraded in place
    assert archive_key(java, [jar]) != second


def test_the_check_keeps_the_writers_options_that_decide_mapping_and_drops_those_with_effects(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(class_archive.subprocess, "run", lambda command, **kw: ran.append(command) or subprocess.CompletedProcess(command, 0))
    note = {"pid": 1, "java_home": "/jdk", "class_path": "a.jar:b.jar", "arguments": [
        "-Xmx2g", "-XX:+UseG1GC", "--add-opens=java.base/java.lang=ALL-UNNAMED", "-Dlog4j2.configurationFile=file:x",
        "-agentlib:jdwp=transport=dt_socket,server=y,suspend=y", "-javaagent:a.jar", "-Xlog:gc:file=gc.log",
        "-XX:StartFlightRecording=filename=r.jfr", f"-XX:ArchiveClassesAtExit={tmp_path / 'k.a.part'}",
    ]}

    assert class_archive._maps(tmp_path / "k.a.part", note)

    command = ran[0]
    assert command[0] == "/jdk/bin/java" and command[-3:] == ["-cp", "a.jar:b.jar", "-version"]
    assert command[1:4] == ["-Xmx2g", "-XX:+UseG1GC", "--add-opens=java.base/java.lang=ALL-UNNAMED"]
    assert "-Xshare:on" in command and f"-XX:SharedArchiveFile={tmp_path / 'k.a.part'}" in command
    assert not any(a.startswith(("-D", "-agentlib", "-javaagent", "-Xlog:gc", "-XX:StartFlight", "-XX:ArchiveClasses")) for a in command)
