"""``python -m amqp_async.broker --tls-cert/--tls-key``: TLS files that cannot serve are named, with what is wrong.

Before, ``ssl.SSLContext.load_cert_chain`` spoke for them: a file holding no certificate (a DER file, the key given
as the certificate) or a key file holding no key ended with "[SSL] PEM lib (_ssl.c:3905)"; a file of garbage given
alone was said to hold "a certificate and no private key"; a key of another certificate was "KEY_VALUES_MISMATCH";
a DER certificate was "'utf-8' codec can't decode byte 0x82". Each test runs the command as a subprocess.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_broker_cli import TIMEOUT, broker_process, one_error_line, run_cli

try:
    from tls_certs import CertFiles, make_ca, make_cert, openssl_available
except ImportError:  # pragma: no cover - tests/ imported as a package
    from tests.tls_certs import CertFiles, make_ca, make_cert, openssl_available

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
    pytest.mark.skipif(not openssl_available(), reason="the openssl command makes the test certificates"),
]


def _server(tmp_path: Path, name: str = "server") -> CertFiles:
    ca = make_ca(tmp_path, f"{name}-ca")
    return make_cert(tmp_path, name, ca, "localhost", san=["IP:127.0.0.1"])


def _error(tmp_path: Path, *arguments: str) -> str:
    result = run_cli("--port", "0", *arguments, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    return one_error_line(result)


def test_a_file_without_a_certificate_is_named(tmp_path: Path) -> None:
    server = _server(tmp_path)
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    # before: "garbage.pem holds a certificate and no private key: give the key's file too"
    assert _error(tmp_path, "--tls-cert", "garbage.pem") == (
        "cannot load --tls-cert garbage.pem: garbage.pem holds no PEM certificate (-----BEGIN CERTIFICATE----- "
        "...): give the certificate chain in PEM"
    )
    # before: "[SSL] PEM lib (_ssl.c:3905)"
    assert _error(tmp_path, "--tls-cert", server.key, "--tls-key", server.key) == (
        f"cannot load --tls-cert {server.key} with --tls-key {server.key}: {server.key} holds no PEM certificate "
        "(-----BEGIN CERTIFICATE----- ...): give the certificate chain in PEM"
    )


def test_a_der_certificate_is_said_not_to_be_pem(tmp_path: Path) -> None:
    server = _server(tmp_path)
    der = tmp_path / "server.der"
    subprocess.run(
        ["openssl", "x509", "-in", server.cert, "-outform", "DER", "-out", str(der)],
        check=True,
        capture_output=True,
        timeout=TIMEOUT,
    )
    # before: "cannot read --tls-cert server.der: 'utf-8' codec can't decode byte 0x82 in position 1"
    assert _error(tmp_path, "--tls-cert", "server.der", "--tls-key", server.key) == (
        f"cannot load --tls-cert server.der with --tls-key {server.key}: server.der holds no PEM certificate "
        "(-----BEGIN CERTIFICATE----- ...): give the certificate chain in PEM"
    )


def test_a_key_file_without_a_key_is_named(tmp_path: Path) -> None:
    server = _server(tmp_path)
    # before: "[SSL] PEM lib (_ssl.c:3926)"
    assert _error(tmp_path, "--tls-cert", server.cert, "--tls-key", server.cert) == (
        f"cannot load --tls-cert {server.cert} with --tls-key {server.cert}: {server.cert} holds no PEM private "
        "key (-----BEGIN PRIVATE KEY----- ...): give the key of the certificate"
    )


def test_the_key_of_another_certificate_is_said_so(tmp_path: Path) -> None:
    server = _server(tmp_path)
    other = _server(tmp_path, "other")
    # before: "KEY_VALUES_MISMATCH"
    assert _error(tmp_path, "--tls-cert", server.cert, "--tls-key", other.key) == (
        f"cannot load --tls-cert {server.cert} with --tls-key {other.key}: the private key does not match the "
        "certificate (the key of another certificate?)"
    )


def test_a_certificate_and_key_in_one_file_still_serve(tmp_path: Path) -> None:
    server = _server(tmp_path)
    both = tmp_path / "both.pem"
    both.write_text(Path(server.cert).read_text() + Path(server.key).read_text())
    with broker_process(tmp_path, "--tls-cert", str(both)) as broker:
        assert broker.first_line == f"listening on amqps://127.0.0.1:{broker.port}"
        assert broker.signal(signal.SIGTERM) == 0
