"""``SSLDomain`` settings refused where python-qpid-proton 0.40 refuses them: at the call, with its exception.

proton's ``SSLDomain`` hands each setting to OpenSSL at once: a certificate or key file that is missing or not PEM,
a key that does not match its certificate or whose password is wrong, a CA file that cannot be read, a server told
to verify its clients without a certificate or a CA list of its own, an unknown verify mode, or
``allow_unsecured_client`` on a client, raise ``SSLException("SSL failure.")`` from the call; what was accepted
returns 0. Each case runs on both implementations, in this process (no connection is made), and ours must give what
proton gives.

Not compared: an encrypted key given no password (proton's OpenSSL asks for one on the terminal; ours refuses it at
once, without prompting), and ``None`` for a file (proton crashes).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from tls_certs import OPENSSL, make_ca, make_cert, openssl_available

import amqp_async.proton

pytestmark = [pytest.mark.interop]
proton = pytest.importorskip("proton")

if not openssl_available():  # pragma: no cover - the image has it
    pytest.skip("the openssl tool makes the test certificates", allow_module_level=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Certificates and keys, good and bad: name -> path."""
    directory = tmp_path_factory.mktemp("ssl-parity")
    ca = make_ca(directory, "ca")
    server = make_cert(directory, "server", ca, "localhost", san=["DNS:localhost"])
    encrypted = directory / "encrypted.key"
    subprocess.run(
        [OPENSSL, "pkey", "-in", server.key, "-out", str(encrypted), "-aes256", "-passout", "pass:secret"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    garbage = directory / "garbage.pem"
    garbage.write_text("not a certificate\n")
    empty = directory / "empty.pem"
    empty.write_text("")
    ca_dir = directory / "ca-dir"
    ca_dir.mkdir()
    return {
        "ca": ca.cert,
        "ca key": ca.key,
        "cert": server.cert,
        "key": server.key,
        "encrypted key": str(encrypted),
        "garbage": str(garbage),
        "empty": str(empty),
        "ca dir": str(ca_dir),
        "missing": str(directory / "missing.pem"),
    }


#: Each case: the calls made in turn on a fresh domain, as (method, arguments); file names are keys of ``files``.
CASES: dict[str, list[tuple[str, tuple[Any, ...]]]] = {
    "credentials": [("set_credentials", ("cert", "key", None))],
    "credentials, missing certificate": [("set_credentials", ("missing", "key", None))],
    "credentials, missing key": [("set_credentials", ("cert", "missing", None))],
    "credentials, certificate not PEM": [("set_credentials", ("garbage", "key", None))],
    "credentials, key of another certificate": [("set_credentials", ("cert", "ca key", None))],
    "credentials, encrypted key, right password": [("set_credentials", ("cert", "encrypted key", "secret"))],
    "credentials, encrypted key, wrong password": [("set_credentials", ("cert", "encrypted key", "wrong"))],
    "credentials refused, then good ones": [
        ("set_credentials", ("missing", "key", None)),
        ("set_credentials", ("cert", "key", None)),
    ],
    "trusted CA file": [("set_trusted_ca_db", ("ca",))],
    "trusted CA, missing": [("set_trusted_ca_db", ("missing",))],
    "trusted CA, not PEM": [("set_trusted_ca_db", ("garbage",))],
    "trusted CA, empty file": [("set_trusted_ca_db", ("empty",))],
    "trusted CA, a directory": [("set_trusted_ca_db", ("ca dir",))],
    "unknown verify mode": [("set_peer_authentication", (99,))],
    "allow unsecured client": [("allow_unsecured_client", ())],
}
for _mode in ("VERIFY_PEER", "VERIFY_PEER_NAME", "ANONYMOUS_PEER"):
    CASES[f"{_mode}, CA and certificate set, CA list given"] = [
        ("set_trusted_ca_db", ("ca",)),
        ("set_credentials", ("cert", "key", None)),
        ("set_peer_authentication", (_mode, "ca")),
    ]
    CASES[f"{_mode}, certificate set, CA list given"] = [
        ("set_credentials", ("cert", "key", None)),
        ("set_peer_authentication", (_mode, "ca")),
    ]
    CASES[f"{_mode}, no certificate"] = [("set_trusted_ca_db", ("ca",)), ("set_peer_authentication", (_mode, "ca"))]
    CASES[f"{_mode}, no CA list"] = [("set_credentials", ("cert", "key", None)), ("set_peer_authentication", (_mode,))]
    CASES[f"{_mode}, CA list not PEM"] = [
        ("set_credentials", ("cert", "key", None)),
        ("set_peer_authentication", (_mode, "garbage")),
    ]
    CASES[f"{_mode}, CA list missing"] = [
        ("set_credentials", ("cert", "key", None)),
        ("set_peer_authentication", (_mode, "missing")),
    ]
    CASES[f"{_mode}, nothing set"] = [("set_peer_authentication", (_mode,))]


def outcomes(module: Any, mode: str, calls: list[tuple[str, tuple[Any, ...]]], files: dict[str, str]) -> list[str]:
    """What each call returned or raised (the exception's class name and message), on a fresh domain."""
    domain_class = module.SSLDomain
    domain = domain_class(getattr(domain_class, mode))
    results = []
    for method, arguments in calls:
        resolved = [
            getattr(domain_class, a)
            if isinstance(a, str) and a.isupper()
            else files.get(a, a)
            if isinstance(a, str)
            else a
            for a in arguments
        ]
        try:
            results.append(repr(getattr(domain, method)(*resolved)))
        except Exception as exc:  # what proton raises, whatever it is, is compared
            results.append(f"{type(exc).__name__}: {exc}")
    return results


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("mode", ["MODE_CLIENT", "MODE_SERVER"])
def test_ssl_domain_refuses_at_the_call_as_proton(mode: str, case: str, files: dict[str, str]) -> None:
    reference = outcomes(proton, mode, CASES[case], files)
    assert outcomes(amqp_async.proton, mode, CASES[case], files) == reference


def test_a_refused_setting_keeps_the_previous_one(files: dict[str, str]) -> None:
    """A refused call leaves the domain as it was: its context still loads the credentials given before."""
    domain = amqp_async.proton.SSLDomain(amqp_async.proton.SSLDomain.MODE_SERVER)
    domain.set_credentials(files["cert"], files["key"], None)
    with pytest.raises(amqp_async.proton.SSLException, match=r"^SSL failure\.$") as refused:
        domain.set_credentials(files["missing"], files["key"], None)
    assert isinstance(refused.value.__cause__, OSError)  # the reason, for a traceback to show
    assert domain.context().cert_store_stats() is not None
    assert domain._cert == (files["cert"], files["key"], None)


def test_encrypted_key_without_password_refused_without_prompting(files: dict[str, str]) -> None:
    """Ours refuses an encrypted key without a password at the call, without prompting (proton's OpenSSL asks on
    the terminal, and refuses it when there is none)."""
    domain = amqp_async.proton.SSLDomain(amqp_async.proton.SSLDomain.MODE_CLIENT)
    with pytest.raises(amqp_async.proton.SSLException, match=r"^SSL failure\.$"):
        domain.set_credentials(files["cert"], files["encrypted key"], None)
    assert Path(files["encrypted key"]).exists()


def _untrusted_server_events(module_name: str, url: str, ca: str) -> list[Any]:
    """A container's client reaches a TLS server whose certificate its CA list does not vouch for: the callbacks
    it gets and the transport's condition (name, and whether its words say why)."""
    import importlib

    base = importlib.import_module(module_name)
    handlers = importlib.import_module(module_name + ".handlers")
    reactor = importlib.import_module(module_name + ".reactor")
    record: list[Any] = []

    class Client(handlers.MessagingHandler):  # type: ignore[misc]
        def on_start(self, event: Any) -> None:
            domain = base.SSLDomain(base.SSLDomain.MODE_CLIENT)
            domain.set_trusted_ca_db(ca)  # another CA than the server's
            domain.set_peer_authentication(base.SSLDomain.VERIFY_PEER_NAME)
            event.container.connect(url, ssl_domain=domain, reconnect=False)

        def _note(self, name: str, event: Any) -> None:
            condition = event.transport.condition
            described = None
            if condition is not None:
                words = condition.description or ""
                described = [condition.name, words.startswith("SSL Failure:"), "certificate verify failed" in words]
            record.append([name, described])

        def on_transport_error(self, event: Any) -> None:
            self._note("transport_error", event)

        def on_disconnected(self, event: Any) -> None:
            self._note("disconnected", event)

    reactor.Container(Client()).run()
    return record


def test_a_server_certificate_not_trusted_is_reported_as_protons(files: dict[str, str], tmp_path: Path) -> None:
    """Ours reported it as a socket error ("proton.pythonio", the Python exception's text) in the order of a
    refused connection; proton's SSL layer reports amqp:connection:framing-error, "SSL Failure: ...", first."""
    import ssl

    from tls_certs import make_ca as another_ca

    from amqp_async.broker import BrokerThread

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(files["cert"], files["key"])
    stranger = another_ca(tmp_path, "stranger").cert
    with BrokerThread(ssl_context=context) as broker:
        url = broker.url.replace("amqp://", "amqps://").replace("127.0.0.1", "localhost")
        reference = _untrusted_server_events("proton", url, stranger)
        assert reference[0] == ["transport_error", ["amqp:connection:framing-error", True, True]]
        assert _untrusted_server_events("amqp_async.proton", url, stranger) == reference
