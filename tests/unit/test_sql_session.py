"""The job's SQL session: per-statement tags, and commits that lost a race retried, then given up."""

from __future__ import annotations

import pytest
from delta.exceptions import ConcurrentAppendException

from ticdc_delta.apply.base.session import CommitTags, SqlSession, is_commit_conflict
from ticdc_delta.exceptions import ConcurrentCommitError, LeaseLostError


class _Conflict(ConcurrentAppendException):
    # Delta's own class, built without a JVM (Spark 3.5's constructor and __str__ ask the JVM).
    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.desc, self.stackTrace, self.cause, self._origin = message, "", None, None

    def __str__(self) -> str:
        return self.desc


def _conflict(message: str) -> ConcurrentAppendException:
    return _Conflict(message)


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        del self.values[key]

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Session:
    """Only what `run` touches: the configuration tags are set on."""

    def __init__(self) -> None:
        self.conf = _Conf()


def test_a_commit_conflict_is_retried_with_the_same_tags_and_then_succeeds():
    session = _Session()
    sql = SqlSession(session, isolate=False, sleep=lambda _: None)
    attempts = []

    def merge():
        attempts.append(dict(session.conf.values))
        if len(attempts) < 3:
            raise _conflict("files were added to the table by a concurrent update")
        return "done"

    tags = CommitTags({"ticdc_delta": {"appliedTs": 7}}, ("ticdc-delta", 7))
    assert sql.run(merge, tags, what="merge t") == "done"
    assert len(attempts) == 3 and all(a == tags.settings() for a in attempts)
    assert session.conf.values == {}  # tags never outlive their statement


def test_conflicts_past_the_retries_become_a_typed_error_and_other_errors_pass_through():
    sql = SqlSession(_Session(), isolate=False, sleep=lambda _: None)

    def always_conflicts():
        raise _conflict("concurrent update")

    with pytest.raises(ConcurrentCommitError, match=r"merge t: another writer committed first 5 times in a row"):
        sql.run(always_conflicts, what="merge t")

    def broken():
        raise ValueError("not a conflict")

    with pytest.raises(ValueError, match="not a conflict"):
        sql.run(broken)
    assert is_commit_conflict(_conflict("x")) and not is_commit_conflict(ValueError("x"))


def test_the_write_guard_is_asked_before_every_attempt_and_can_refuse_the_write():
    # Setup: a guard that records what it is asked and refuses after two questions; a statement
    # that loses one race. Expect: asked before the first attempt and before the retry; a refused
    # write never runs; the lease's own writes (`run_unguarded`) are not asked about.
    sql = SqlSession(_Session(), isolate=False, sleep=lambda _: None)
    asked, ran = [], []

    def guard(what):
        asked.append(what)
        if len(asked) > 2:
            raise LeaseLostError("lost")

    sql.guard_writes(guard)

    def loses_once():
        ran.append("merge")
        if len(ran) == 1:
            raise _conflict("concurrent update")

    sql.run(loses_once, what="merge t")
    assert asked == ["merge t", "merge t"] and ran == ["merge", "merge"]
    with pytest.raises(LeaseLostError):
        sql.run(lambda: ran.append("checkpoint"), what="save checkpoint")
    with pytest.raises(LeaseLostError):
        sql.check_write("drop t")
    assert "checkpoint" not in ran
    sql.run_unguarded(lambda: ran.append("lease"))
    assert ran[-1] == "lease"


def test_settings_hold_for_their_block_and_what_the_session_had_comes_back_even_after_a_failure():
    session = _Session()
    session.conf.values["spark.sql.adaptive.enabled"] = "true"  # the user's own
    sql = SqlSession(session)
    with pytest.raises(RuntimeError), sql.settings({"spark.sql.adaptive.enabled": "false", "x.materialize": "none"}):
        assert session.conf.values == {"spark.sql.adaptive.enabled": "false", "x.materialize": "none"}
        raise RuntimeError("the statement failed")
    assert session.conf.values == {"spark.sql.adaptive.enabled": "true"}


def test_a_setting_named_unless_set_keeps_the_sessions_own_value():
    # Setup: the user's session says how to run expressions (one of the two keys); a small MERGE's settings
    # interpret them unless the session says otherwise.
    # Expect: the user's key kept as it is during the block, the unset one applied, both as before after it.
    session = _Session()
    session.conf.values["spark.sql.codegen.factoryMode"] = "FALLBACK"
    sql = SqlSession(session)
    interpreted = {"spark.sql.codegen.factoryMode": "NO_CODEGEN", "spark.sql.codegen.wholeStage": "false"}
    with sql.settings({**interpreted, "x.materialize": "none"}, unless_set=interpreted):
        assert session.conf.values == {"spark.sql.codegen.factoryMode": "FALLBACK",
                                       "spark.sql.codegen.wholeStage": "false", "x.materialize": "none"}
    assert session.conf.values == {"spark.sql.codegen.factoryMode": "FALLBACK"}


def test_a_setting_the_runtime_refuses_is_left_as_it_is_and_the_others_still_apply():
    session = _Session()
    refused = "spark.sql.adaptive.enabled"
    original_set = session.conf.set

    def set_unless_refused(key: str, value: str) -> None:
        if key == refused:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] Configuration {key} is not available")
        original_set(key, value)

    session.conf.set = set_unless_refused
    sql = SqlSession(session)
    with sql.settings({refused: "false", "x.materialize": "none"}):
        assert session.conf.values == {"x.materialize": "none"}
    assert session.conf.values == {}


class _Context:
    """An application: what a new session of it starts with."""

    def __init__(self, started_with: dict[str, str]) -> None:
        self.started_with = started_with


class _ForkableConf(_Conf):
    def __init__(self, values: dict[str, str], reads: list[str], name: str) -> None:
        super().__init__()
        self.values, self._reads, self._name = dict(values), reads, name

    @property
    def getAll(self) -> dict[str, str]:  # PySpark 4's property: a JVM call per setting, counted here
        self._reads.append(self._name)
        return dict(self.values)


class _ForkableSession:
    def __init__(self, context: _Context, values: dict[str, str], reads: list[str], name: str) -> None:
        self.sparkContext, self._reads = context, reads
        self.conf = _ForkableConf(values, reads, name)

    def newSession(self) -> _ForkableSession:
        return _ForkableSession(self.sparkContext, self.sparkContext.started_with, self._reads, "new")


def test_forks_carry_the_users_settings_read_once_and_a_new_sessions_read_once_per_application():
    # Setup: a user's session with a setting of their own; a job's SqlSession on it, forked three times
    # (the lease's heartbeat, table-pool helpers); then the user changes the setting and a second job starts.
    # Expect: every session carries the user's setting; the user's settings are read once per job, a new
    # session's once for the application; the second job carries the changed value.
    reads: list[str] = []
    user = _ForkableSession(_Context({"spark.app.name": "app"}), {"spark.app.name": "app"}, reads, "user")
    user.conf.set("spark.sql.shuffle.partitions", "7")
    job = SqlSession(user)
    forks = [job.fork() for _ in range(3)]
    assert all(s.spark.conf.values["spark.sql.shuffle.partitions"] == "7" for s in [job, *forks])
    assert all(s.spark is not user for s in [job, *forks])
    assert reads.count("user") == 1 and reads.count("new") == 1
    user.conf.set("spark.sql.shuffle.partitions", "9")
    assert SqlSession(user).spark.conf.values["spark.sql.shuffle.partitions"] == "9"
    assert reads.count("user") == 2 and reads.count("new") == 1
