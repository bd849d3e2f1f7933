"""A real Schema Registry for the tests: Apicurio Registry, speaking the Confluent API at /apis/ccompat/v7.

`testbed/apicurio/` holds a pom that takes Apicurio Registry's app module (2.4.2.Final) from
Maven Central and builds it with the Quarkus Maven plugin into a runnable application in the
cache folder, once (about a minute, 130 MB of jars); it runs as a child `java` process with its
in-memory storage (a few seconds to start, about 200 MB). The product reads it with
confluent-kafka's SchemaRegistryClient exactly as it reads Confluent's own registry.

Maven is pointed at Maven Central alone: every repository a pom names is mirrored to Maven's
own default (the URL its super POM gives "central"), as some of Apicurio's poms name others
this machine cannot reach. No registry host is written here.

    with ApicurioRegistry(work_dir) as registry:
        registry.url  # http://127.0.0.1:<port>/apis/ccompat/v7
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from testbed.ports import free_port
from testbed.processes import SERVER_JVM_OPTIONS, maven_environment, one_builder
from ticdc_delta.jobs.paths import cache_dir

log = logging.getLogger(__name__)

APICURIO_VERSION = "2.4.2.Final"
_SOURCE = Path(__file__).resolve().parent / "apicurio"
_CCOMPAT = "/apis/ccompat/v7"


class RegistrySetupError(RuntimeError):
    """The registry could not be built or started."""


def _source_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in _SOURCE.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(_SOURCE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _maven_central_url(mvn: str) -> str:
    """The URL Maven itself uses for "central": read from the super POM in Maven's own jars."""
    version = subprocess.run([mvn, "-v"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"Maven home: (.+)", version)
    if found is None:
        raise RegistrySetupError(f"cannot find Maven's home in `mvn -v`:\n{version}")
    for jar in sorted((Path(found.group(1).strip()) / "lib").glob("maven-model-builder-*.jar")):
        with zipfile.ZipFile(jar) as archive:
            pom = archive.read("org/apache/maven/model/pom-4.0.0.xml").decode()
        url = re.search(r"<id>central</id>.*?<url>([^<]+)</url>", pom, re.S)
        if url:
            return url.group(1).strip()
    raise RegistrySetupError("Maven's super POM names no central repository")


def _central_only_settings(mvn: str) -> Path:
    settings = cache_dir() / "maven-central-only.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>central-only</id><mirrorOf>*</mirrorOf>"
        f"<url>{_maven_central_url(mvn)}</url></mirror></mirrors></settings>\n"
    )
    return settings


@one_builder("apicurio")  # (CI's set-up builds it in the background: scripts/test)
def build_registry() -> Path:
    """Build the registry application once (per pom); return its runnable jar (beside it: `lib/`)."""
    home = cache_dir() / f"apicurio-registry-{APICURIO_VERSION}-{_source_digest()}"
    # Apicurio's own build settings ask Quarkus for a "legacy" jar: the runner and a lib/ folder.
    runner = home / "apicurio-registry-local-1-runner.jar"
    if (home / ".complete").exists() and runner.exists():
        return runner
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RegistrySetupError("Maven (mvn) is needed to build Apicurio Registry")
    started = time.monotonic()
    log.info("building Apicurio Registry %s into %s", APICURIO_VERSION, home)
    result = subprocess.run(
        [
            mvn, "-q", "-B",
            "-s", str(_central_only_settings(mvn)),
            # a local repository of its own: CI fetches it beside the broker's jars, not after them
            f"-Dmaven.repo.local={cache_dir() / 'm2-apicurio'}",
            f"-Dregistry.build.dir={home}",
            "-f", str(_SOURCE / "pom.xml"),
            "package",
        ],
        capture_output=True,
        text=True,
        env=maven_environment(),
    )
    if result.returncode != 0 or not runner.exists():
        raise RegistrySetupError(f"mvn could not build Apicurio Registry:\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    (home / ".complete").touch()
    log.info("Apicurio Registry built in %.0fs", time.monotonic() - started)
    return runner


class ApicurioRegistry:
    """One registry process on loopback, its data in memory (gone when it stops)."""

    def __init__(self, work_dir: Path | str, port: int | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.port = port or free_port()
        self._process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what `registry.url` names."""
        return f"http://127.0.0.1:{self.port}{_CCOMPAT}"

    def start(self, timeout: float = 180.0) -> str:
        runner = build_registry()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.work_dir / "registry.log", "ab")  # noqa: SIM115 - kept open for the process's life
        java = shutil.which("java") or "java"
        self._process = subprocess.Popen(
            [
                java, *SERVER_JVM_OPTIONS, "-Xms64m", "-Xmx384m",
                f"-Dquarkus.http.port={self.port}",
                "-Dquarkus.http.host=127.0.0.1",
                "-Dquarkus.log.level=WARN",
                "-jar", str(runner),
            ],
            cwd=self.work_dir,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
        log_file.close()
        self._wait_ready(timeout)
        return self.url

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RegistrySetupError(
                    f"Apicurio Registry exited with {self._process.returncode}; see {self.work_dir / 'registry.log'}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as answer:
                    json.load(answer)
                return
            except (urllib.error.URLError, OSError, ValueError):
                if time.monotonic() > deadline:
                    self.stop()
                    raise RegistrySetupError(f"Apicurio Registry did not answer within {timeout:g}s") from None
                time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def __enter__(self) -> ApicurioRegistry:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
