"""Throwaway TLS material for the local broker and the registry emulator: a self-signed CA and
server certificates for 127.0.0.1 / localhost signed by it, made with the `openssl` command line.

Nothing here is fit for anything but loopback tests: keys are unencrypted PEM files (the broker's
PKCS12 keystore has a password only because the JVM wants one).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

_DAYS = "30"
_SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"


class TlsSetupError(RuntimeError):
    """The certificates could not be made (no openssl, or it failed)."""


class ServerCertificate(NamedTuple):
    certificate: Path  # PEM, the leaf certificate
    key: Path  # PEM, unencrypted private key


@dataclass(frozen=True)
class Pkcs12Keystore:
    path: Path
    password: str


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsSetupError("the openssl command is needed to make the test certificates")
    done = subprocess.run([openssl, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise TlsSetupError(f"openssl {args[0]} failed:\n{done.stdout}{done.stderr}")


class LocalCa:
    """A self-signed CA in `directory` (made on construction); `issue` signs server certificates."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.certificate = self.directory / "ca.pem"  # what clients trust (ssl.ca.location)
        self._key = self.directory / "ca.key"
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256", "-days", _DAYS,
            "-subj", "/CN=ticdc-delta test CA", "-keyout", str(self._key), "-out", str(self.certificate),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )

    def issue(self, name: str) -> ServerCertificate:
        """A server certificate for 127.0.0.1 and localhost (subject alternative names)."""
        key, request, cert = (self.directory / f"{name}{suffix}" for suffix in (".key", ".csr", ".pem"))
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", f"/CN={name}",
                 "-keyout", str(key), "-out", str(request))
        extensions = self.directory / f"{name}.ext"
        extensions.write_text(f"{_SAN}\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n")
        _openssl(
            "x509", "-req", "-sha256", "-days", _DAYS, "-in", str(request), "-CA", str(self.certificate),
            "-CAkey", str(self._key), "-CAcreateserial", "-extfile", str(extensions), "-out", str(cert),
        )
        return ServerCertificate(cert, key)

    def keystore(self, server: ServerCertificate, password: str = "keystore-pass") -> Pkcs12Keystore:
        """`server`'s key and certificate chain as a PKCS12 keystore (what a JVM server reads)."""
        path = server.certificate.with_suffix(".p12")
        _openssl(
            "pkcs12", "-export", "-in", str(server.certificate), "-inkey", str(server.key),
            "-certfile", str(self.certificate), "-name", "server", "-out", str(path), "-passout", f"pass:{password}",
        )
        return Pkcs12Keystore(path, password)
