"""A throwaway MariaDB server on loopback, for capturing its binlog with Debezium (tests only).

Debian's `mariadb-server` (scripts/setup-mariadb installs it) runs as a child process on a
temporary data directory and a free loopback port, with the binary log on in ROW format, a
server id, the server's time zone UTC, and a user with the privileges Debezium's MariaDB
connector documents. SQL runs through PyMySQL (a pure-Python client).

Command line: ``python -m testbed.mariadb [--data-dir DIR] [--port N]`` runs one in the
foreground until interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from testbed.ports import free_port

log = logging.getLogger(__name__)

DEBEZIUM_USER = "debezium"
DEBEZIUM_PASSWORD = "dbz-secret"
SERVER_ID = 1
# What Debezium's MariaDB connector documents for its user (BINLOG MONITOR is MariaDB's name
# for REPLICATION CLIENT since 10.5).
_DEBEZIUM_GRANTS = "SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, BINLOG MONITOR"


class MariaDbSetupError(RuntimeError):
    """The MariaDB server could not be found or started."""


def _program(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (os.path.exists(f"/usr/sbin/{name}") and f"/usr/sbin/{name}")
        if found:
            return found
    raise MariaDbSetupError(f"{names[0]} not found: install Debian's mariadb-server (scripts/setup-mariadb)")


class MariaDb:
    """One server; `start()` returns once it accepts connections, `stop()` ends it."""

    def __init__(self, data_dir: Path | str | None = None, port: int | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="mariadb-")).resolve()
        self.port = port or free_port()
        self._process: subprocess.Popen | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    def _user_args(self) -> list[str]:
        # mariadbd refuses to run as root unless told to; the data directory stays ours.
        return ["--user=root"] if os.geteuid() == 0 else []

    def start(self, timeout: float = 60.0) -> None:
        data = self.data_dir / "data"
        if not (data / "mysql").exists():
            data.mkdir(parents=True, exist_ok=True)
            installed = subprocess.run(
                [
                    _program("mariadb-install-db", "mysql_install_db"),
                    "--no-defaults",
                    f"--datadir={data}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--skip-name-resolve",
                    *self._user_args(),
                ],
                capture_output=True,
                text=True,
            )
            if installed.returncode != 0:
                raise MariaDbSetupError(f"mariadb-install-db failed:\n{installed.stdout}{installed.stderr}")
        output = open(self.data_dir / "server.out", "ab")
        self._process = subprocess.Popen(
            [
                _program("mariadbd", "mysqld"),
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={self.data_dir / 'mariadb.sock'}",
                f"--pid-file={self.data_dir / 'mariadb.pid'}",
                f"--log-error={self.data_dir / 'error.log'}",
                "--bind-address=127.0.0.1",
                f"--port={self.port}",
                f"--server-id={SERVER_ID}",
                f"--log-bin={data / 'binlog'}",
                "--binlog-format=ROW",
                "--binlog-row-image=FULL",
                "--default-time-zone=+00:00",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_general_ci",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--performance-schema=OFF",
                *self._user_args(),
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output.close()
        self._wait_ready(timeout)
        self.execute(
            f"CREATE USER IF NOT EXISTS '{DEBEZIUM_USER}'@'%' IDENTIFIED BY '{DEBEZIUM_PASSWORD}'",
            f"GRANT {_DEBEZIUM_GRANTS} ON *.* TO '{DEBEZIUM_USER}'@'%'",
        )
        log.info("MariaDB ready at %s:%d (data in %s)", self.host, self.port, self.data_dir)

    def _wait_ready(self, timeout: float) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise MariaDbSetupError(
                    f"mariadbd exited with code {self._process.returncode}; see {self.data_dir / 'error.log'}"
                )
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.2)
        self.stop()
        raise MariaDbSetupError(f"MariaDB did not accept connections within {timeout:g}s; see {self.data_dir}")

    def connect(self, database: str | None = None):
        """A PyMySQL connection as root, autocommit on."""
        import pymysql

        return pymysql.connect(
            host=self.host, port=self.port, user="root", password="", database=database,
            autocommit=True, charset="utf8mb4", connect_timeout=5,
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements in order, each committed on its own."""
        with self.connect(database) as connection, connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)

    def executemany(self, statement: str, rows: Iterable[Sequence[object]], database: str | None = None) -> None:
        with self.connect(database) as connection, connection.cursor() as cursor:
            cursor.executemany(statement, list(rows))

    def query(self, statement: str, database: str | None = None) -> tuple[list[str], list[tuple]]:
        """Column names and rows, values as PyMySQL types them."""
        with self.connect(database) as connection, connection.cursor() as cursor:
            cursor.execute(statement)
            return [d[0] for d in cursor.description], list(cursor.fetchall())

    def stop(self, timeout: float = 30.0) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> MariaDb:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.mariadb", description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = MariaDb(args.data_dir, args.port)
    server.start()
    print(f"MariaDB at {server.host}:{server.port} (root, no password; {DEBEZIUM_USER}/{DEBEZIUM_PASSWORD}); "
          "Ctrl-C stops it", flush=True)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
