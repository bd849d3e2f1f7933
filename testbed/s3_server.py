"""A real S3-compatible server for the tests: moto's standalone server (`moto[server]` from PyPI).

It speaks the S3 REST API (and DynamoDB's) over HTTP on 127.0.0.1, keeping objects in memory; it runs as
a child process of this Python (its package comes with the test dependencies, so it is cached like them).
Spark reaches it through Hadoop's s3a connector (hadoop-aws, from Maven Central, of pyspark's own Hadoop
release: `jobs.session.hadoop_aws_package`), delta-rs natively, and fsspec through s3fs.

    with S3Server() as s3:
        s3.create_bucket("lake")
        s3.hadoop_settings()   # fs.s3a.* for Spark
        s3.storage_options()   # for delta-rs
        s3.environment()       # AWS_* for boto-based clients (s3fs)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from testbed.ports import free_port

ACCESS_KEY, SECRET_KEY, REGION = "testing-key", "testing-secret", "us-east-1"


class S3SetupError(RuntimeError):
    """The S3 server could not be started."""


class S3Server:
    def __init__(self, log_path: Path | None = None) -> None:
        self.port = 0
        self._process: subprocess.Popen | None = None
        # Its request log goes to a file: a pipe nobody reads would fill and stop the server mid-request.
        self._log_path = log_path or Path(tempfile.mkstemp(prefix="moto-", suffix=".log")[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        self.port = free_port()
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise S3SetupError(f"moto's server exited: {self._log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()
        raise S3SetupError(f"moto's server did not answer on {self.endpoint} within {timeout:.0f} s")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._process = None

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        return list(self.sizes(bucket, prefix))

    def sizes(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Each object's key under `prefix` -> its bytes."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return {item["Key"]: item["Size"] for page in pages for item in page.get("Contents", [])}

    def hadoop_settings(self) -> dict[str, str]:
        """Hadoop's s3a settings for this server (set on a session's Hadoop configuration, or with a
        `spark.hadoop.` prefix in `spark.conf`)."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        }

    def storage_options(self) -> dict[str, str]:
        """delta-rs's options for this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ALLOW_HTTP": "true",
            # Reading needs no lock; delta-rs asks for one before writing without conditional puts.
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        }

    def environment(self) -> dict[str, str]:
        """The AWS_* variables boto-based clients (s3fs, for claim-check files) read."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}


def s3_spark_conf(server: S3Server, fast_listing: bool = True) -> dict[str, str]:
    """`server`'s s3a settings as a session's or a job's `spark.conf` (`spark.hadoop.` prefixed), with Delta's
    fast listing of `_delta_log` (S3's start-after) on or off."""
    conf = {f"spark.hadoop.{key}": value for key, value in server.hadoop_settings().items()}
    conf["spark.hadoop.delta.enableFastS3AListFrom"] = "true" if fast_listing else "false"
    return conf
