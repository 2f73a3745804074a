"""Test certificates made with the ``openssl`` command-line tool: certificate authorities and the server and client
certificates they sign, as PEM files in a directory (a test's ``tmp_path``).

Typical use::

    ca = make_ca(tmp_path, "ca")
    server = make_cert(tmp_path, "server", ca, "localhost", san=["DNS:localhost", "IP:127.0.0.1"])
    client = make_cert(tmp_path, "client", ca, "test-client", client=True)
    context = ssl.create_default_context(cafile=ca.cert)

The certificates follow RFC 5280 closely enough for strict verifiers (``VERIFY_X509_STRICT``, the default of
Python 3.13's `ssl.create_default_context`): the CA has critical basic constraints and key usage, every leaf has
subject and authority key identifiers, a key usage and an extended key usage. Keys are unencrypted EC P-256 (fast
to make); a certificate is valid for 30 days from now.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OPENSSL", "CertFiles", "make_ca", "make_cert", "make_sub_ca", "openssl_available"]

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


def openssl_available() -> bool:
    return Path(OPENSSL).exists()


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its private key, as PEM file paths (str, ready for `ssl` and proton)."""

    cert: str
    key: str


def _run(*args: str, cwd: Path) -> None:
    result = subprocess.run([OPENSSL, *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")


def _new_key(directory: Path, name: str) -> Path:
    key = directory / f"{name}.key"
    _run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key), cwd=directory)
    return key


def make_ca(directory: Path, name: str, common_name: str | None = None) -> CertFiles:
    """A self-signed certificate authority ``<name>.pem`` / ``<name>.key`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key(directory, name)
    cert = directory / f"{name}.pem"
    config = directory / f"{name}.cnf"
    config.write_text(
        "[req]\n"
        "distinguished_name = dn\n"
        "x509_extensions = v3_ca\n"
        "prompt = no\n"
        "[dn]\n"
        f"CN = {common_name or f'amqp_async test CA {name}'}\n"
        "[v3_ca]\n"
        "basicConstraints = critical, CA:TRUE\n"
        "keyUsage = critical, keyCertSign, cRLSign\n"
        "subjectKeyIdentifier = hash\n"
    )
    _run(
        "req", "-new", "-x509", "-key", str(key), "-out", str(cert), "-days", "30", "-sha256",
        "-config", str(config), "-set_serial", "1", cwd=directory,
    )  # fmt: skip
    return CertFiles(str(cert), str(key))


def make_sub_ca(directory: Path, name: str, parent: CertFiles) -> CertFiles:
    """An intermediate certificate authority ``<name>.pem`` / ``<name>.key`` signed by ``parent``: a verifier that
    trusts only it accepts what it signs only with OpenSSL's partial-chain flag (as proton sets it)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key(directory, name)
    csr = directory / f"{name}.csr"
    cert = directory / f"{name}.pem"
    subject = f"/CN=amqp_async test sub-CA {name}"
    _run("req", "-new", "-key", str(key), "-out", str(csr), "-subj", subject, cwd=directory)
    extensions = directory / f"{name}.ext"
    extensions.write_text(
        "basicConstraints = critical, CA:TRUE\n"
        "keyUsage = critical, keyCertSign, cRLSign\n"
        "subjectKeyIdentifier = hash\n"
        "authorityKeyIdentifier = keyid, issuer\n"
    )
    _run(
        "x509", "-req", "-in", str(csr), "-CA", parent.cert, "-CAkey", parent.key, "-CAcreateserial",
        "-out", str(cert), "-days", "30", "-sha256", "-extfile", str(extensions), cwd=directory,
    )  # fmt: skip
    return CertFiles(str(cert), str(key))


def make_cert(
    directory: Path,
    name: str,
    ca: CertFiles,
    common_name: str,
    *,
    san: list[str] | None = None,
    client: bool = False,
) -> CertFiles:
    """A certificate ``<name>.pem`` / ``<name>.key`` for ``common_name``, signed by ``ca``.

    ``san``: subjectAltName entries such as ``"DNS:localhost"``, ``"IP:127.0.0.1"`` (none: no SAN extension, so a
    modern client matches no host name at all). ``client``: a client certificate (extended key usage
    ``clientAuth``) rather than a server one (``serverAuth``).
    """
    directory.mkdir(parents=True, exist_ok=True)
    key = _new_key(directory, name)
    csr = directory / f"{name}.csr"
    cert = directory / f"{name}.pem"
    _run("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={common_name}", cwd=directory)
    extensions = directory / f"{name}.ext"
    lines = [
        "basicConstraints = critical, CA:FALSE",
        "keyUsage = critical, digitalSignature, keyEncipherment",
        f"extendedKeyUsage = {'clientAuth' if client else 'serverAuth'}",
        "subjectKeyIdentifier = hash",
        "authorityKeyIdentifier = keyid, issuer",
    ]
    if san:
        lines.append("subjectAltName = " + ", ".join(san))
    extensions.write_text("\n".join(lines) + "\n")
    _run(
        "x509", "-req", "-in", str(csr), "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
        "-out", str(cert), "-days", "30", "-sha256", "-extfile", str(extensions), cwd=directory,
    )  # fmt: skip
    return CertFiles(str(cert), str(key))
