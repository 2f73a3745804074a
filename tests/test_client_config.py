"""Connection configuration: URL parsing, connect.json lookup and merge, TLS contexts, reconnect backoff.

The expectations follow python-qpid-proton 0.40 (``proton.Url``, ``Container.connect``, ``delay_iter``); where the
installed proton is importable, URL parsing is also checked against it directly.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from amqp_async.client import _config
from amqp_async.client._backoff import Backoff
from amqp_async.client._config import (
    CONNECT_FILE_ENV,
    ConnectConfigError,
    ResolvedOptions,
    connect_config_paths,
    find_connect_config,
    find_connect_config_file,
    load_connect_config,
    resolve_options,
)
from amqp_async.client._url import Address, InvalidURL, parse_url
from amqp_async.errors import AMQPError

# ------------------------------------------------------------------------------------------------------------------
# URLs


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port", "user", "password", "path"),
    [
        ("host", "amqp", "host", 5672, None, None, None),
        ("host:1234", "amqp", "host", 1234, None, None, None),
        ("amqp://host", "amqp", "host", 5672, None, None, None),
        ("amqps://host", "amqps", "host", 5671, None, None, None),
        ("AMQPS://Host.Example.COM", "amqps", "host.example.com", 5671, None, None, None),
        ("amqps://user:pass@host:5999/queue", "amqps", "host", 5999, "user", "pass", "queue"),
        ("amqps://us%40er:p%3As%2Fs@host/q", "amqps", "host", 5671, "us@er", "p:s/s", "q"),
        ("user:pw@host", "amqp", "host", 5672, "user", "pw", None),
        ("amqp://guest@host", "amqp", "host", 5672, "guest", None, None),
        ("amqp://user:@host", "amqp", "host", 5672, "user", None, None),
        ("[::1]:5673", "amqp", "::1", 5673, None, None, None),
        ("[::1]", "amqp", "::1", 5672, None, None, None),
        ("amqps://[fe80::1]", "amqps", "fe80::1", 5671, None, None, None),
        ("amqp://u:p@[2001:db8::7]:1/x", "amqp", "2001:db8::7", 1, "u", "p", "x"),
        ("host:amqps", "amqp", "host", 5671, None, None, None),
        ("amqps://host:amqp", "amqps", "host", 5672, None, None, None),
        ("amqp://host:", "amqp", "host", 5672, None, None, None),
        ("amqp://host/", "amqp", "host", 5672, None, None, None),
        ("amqp://host//queue/a", "amqp", "host", 5672, None, None, "/queue/a"),
        ("localhost/examples", "amqp", "localhost", 5672, None, None, "examples"),
        ("amqp://:5673", "amqp", "localhost", 5673, None, None, None),
        ("  amqp://host  ", "amqp", "host", 5672, None, None, None),
    ],
)
def test_parse_url(
    url: str, scheme: str, host: str, port: int, user: str | None, password: str | None, path: str | None
) -> None:
    a = parse_url(url)
    assert (a.scheme, a.host, a.port, a.user, a.password, a.path) == (scheme, host, port, user, password, path)
    assert a.tls is (scheme == "amqps")


@pytest.mark.parametrize(
    "url",
    [
        "host",
        "host:1234",
        "amqps://user:pass@host:5999/queue",
        "amqps://us%40er:p%3As@host/q",
        "user:pw@host",
        "[::1]:5673",
        "amqps://[fe80::1]",
        "host:amqps",
        "amqp://host//queue/a",
        "localhost/examples",
    ],
)
def test_parse_url_agrees_with_proton(url: str) -> None:
    proton = pytest.importorskip("proton")
    p = proton.Url(url)
    a = parse_url(url)
    assert (a.scheme, a.host, a.port, a.user, a.password) == (p.scheme, p.host, int(p.port), p.username, p.password)
    assert a.path == (p.path or None)


def test_address_hides_password() -> None:
    a = parse_url("amqps://bob:s3cret@[::1]:5000/q")
    assert str(a) == "amqps://bob:***@[::1]:5000/q"
    assert "s3cret" not in repr(a)
    assert a.to_url(show_password=True) == "amqps://bob:s3cret@[::1]:5000/q"
    assert a.host_port == "[::1]:5000"
    assert str(parse_url("host")) == "amqp://host:5672"
    assert parse_url(parse_url("u:p%2F@h").to_url(show_password=True)).password == "p/"


def test_parse_url_passes_address_through() -> None:
    a = Address(scheme="amqp", host="h", port=1)
    assert parse_url(a) is a


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "ftp://host",
        "http://host:80",
        "host:0",
        "host:65536",
        "host:99999",
        "host:nope",
        "amqp://h:12x",
        "amqp://[::1",
        "::1",
        "fe80::1:5672",
        "[::1]x",
    ],
)
def test_parse_url_errors(url: str) -> None:
    with pytest.raises(InvalidURL) as info:
        parse_url(url)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, AMQPError)
    assert info.value.condition == "amqp:invalid-field"


def test_parse_url_error_hides_password() -> None:
    with pytest.raises(InvalidURL) as info:
        parse_url("amqp://user:hunter2@host:bad")
    assert "hunter2" not in str(info.value)


def test_parse_url_type_error() -> None:
    with pytest.raises(TypeError):
        parse_url(5672)  # type: ignore[arg-type]


def test_address_validates() -> None:
    with pytest.raises(InvalidURL):
        Address(scheme="http", host="h", port=1)
    with pytest.raises(InvalidURL):
        Address(scheme="amqp", host="h", port=0)
    with pytest.raises(InvalidURL):
        Address(scheme="amqp", host="", port=1)


# ------------------------------------------------------------------------------------------------------------------
# connect.json lookup


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A cwd and a HOME of their own, no MESSAGING_CONNECT_FILE, and a fake /etc in place of the real one."""
    cwd, home, etc = tmp_path / "cwd", tmp_path / "home", tmp_path / "etc"
    for d in (cwd, home / ".config" / "messaging", etc / "messaging"):
        d.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(CONNECT_FILE_ENV, raising=False)
    real = _config.connect_config_paths

    def paths(env: Any = os.environ) -> list[str]:
        found = real(env)
        assert os.path.join("/etc", "messaging", "connect.json") in found or env.get(CONNECT_FILE_ENV)
        return [str(etc / "messaging" / "connect.json") if p.startswith("/etc/") else p for p in found]

    monkeypatch.setattr(_config, "connect_config_paths", paths)
    return {"cwd": cwd, "home": home, "etc": etc}


def _write(path: Path, config: object) -> Path:
    path.write_text(json.dumps(config))
    return path


def test_search_path_order(monkeypatch: pytest.MonkeyPatch) -> None:
    assert connect_config_paths({"HOME": "/home/x"}) == [
        "./connect.json",
        "/home/x/.config/messaging/connect.json",
        "/etc/messaging/connect.json",
    ]
    assert connect_config_paths({"HOME": "/home/x", CONNECT_FILE_ENV: "/some/file.json"}) == ["/some/file.json"]
    # An empty variable counts as unset, as in proton.
    assert connect_config_paths({"HOME": "/h", CONNECT_FILE_ENV: ""})[0] == "./connect.json"


def test_lookup_none(isolated: dict[str, Path]) -> None:
    assert find_connect_config_file() is None
    assert find_connect_config() is None


def test_lookup_order(isolated: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    etc = _write(isolated["etc"] / "messaging" / "connect.json", {"host": "etc"})
    assert find_connect_config_file() == str(etc)
    assert find_connect_config() == {"host": "etc"}
    _write(isolated["home"] / ".config" / "messaging" / "connect.json", {"host": "home"})
    assert find_connect_config() == {"host": "home"}
    _write(isolated["cwd"] / "connect.json", {"host": "cwd"})
    assert find_connect_config() == {"host": "cwd"}
    env_file = _write(isolated["cwd"] / "elsewhere.json", {"host": "env"})
    monkeypatch.setenv(CONNECT_FILE_ENV, str(env_file))
    assert find_connect_config() == {"host": "env"}
    # The env argument is used, not only os.environ.
    assert find_connect_config({"HOME": str(isolated["home"])}) == {"host": "cwd"}


def test_env_file_missing_is_an_error(isolated: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    _write(isolated["cwd"] / "connect.json", {"host": "cwd"})
    monkeypatch.setenv(CONNECT_FILE_ENV, str(isolated["cwd"] / "typo.json"))
    with pytest.raises(ConnectConfigError, match=r"typo\.json"):
        find_connect_config()


def test_invalid_json_names_the_file(isolated: dict[str, Path]) -> None:
    bad = isolated["home"] / ".config" / "messaging" / "connect.json"
    bad.write_text('{"host": "x",}')
    with pytest.raises(ConnectConfigError) as info:
        find_connect_config()
    assert str(bad) in str(info.value)
    assert info.value.path == str(bad)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConnectConfigError, match="JSON object"):
        load_connect_config(str(_write(isolated["cwd"] / "list.json", [1, 2])))
    with pytest.raises(ConnectConfigError, match="JSON"):
        resolve_options(None, {})


def test_comments_are_allowed(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{\n  // the host\n  "host": "h", /* a "comment" */ "user": "a//b", "password": "/*x*/"\n}\n')
    assert load_connect_config(str(path)) == {"host": "h", "user": "a//b", "password": "/*x*/"}


# ------------------------------------------------------------------------------------------------------------------
# The merge


def test_defaults_without_url_or_file(isolated: dict[str, Path]) -> None:
    o = resolve_options(None, {})
    assert [str(a) for a in o.urls] == ["amqp://localhost:5672"]
    assert o.user is None and o.password is None
    assert o.sasl_enabled is True
    assert o.allowed_mechs is None
    assert o.allow_insecure_mechs is True  # as proton's Container
    assert o.max_frame_size is None
    # Nothing waits for ever by default (docs/client.md, "Defaults and their bounds"):
    assert o.heartbeat == 30.0  # our idle timeout: a peer silent for 30 s is gone
    assert o.connect_timeout == 30.0
    assert isinstance(o.reconnect, Backoff)
    assert (o.reconnect.max_tries, o.reconnect.max_time) == (None, 60.0)  # reconnecting gives up after 60 s
    assert o.ssl_context is None
    assert o.virtual_host is None and o.virtual_host_for(o.urls[0]) == "localhost"
    assert o.sni is None and o.sni_for(o.urls[0]) == "localhost"
    assert len(o.container_id) == 36
    assert resolve_options(None, {}).container_id != o.container_id


def test_url_and_kwargs(isolated: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"host": "ignored", "user": "file-user"})
    o = resolve_options(
        "amqp://broker:5000/q",
        {
            "user": "alice",
            "password": "pw",
            "sasl_enabled": False,
            "allowed_mechs": "PLAIN  ANONYMOUS",
            "allow_insecure_mechs": False,
            "heartbeat": 30,
            "max_frame_size": 65536,
            "virtual_host": "vh",
            "properties": {"product": "x"},
            "offered_capabilities": ["a", "b"],
            "desired_capabilities": "c",
            "sni": "sni.example",
            "container_id": "me",
        },
    )
    # With a URL, connect.json is not read (proton): its host and user do not appear.
    assert [a.host_port for a in o.urls] == ["broker:5000"]
    assert o.urls[0].path == "q"
    assert (o.user, o.password, o.sasl_enabled, o.allowed_mechs) == ("alice", "pw", False, "PLAIN ANONYMOUS")
    assert o.allow_insecure_mechs is False
    assert o.heartbeat == 30.0 and isinstance(o.heartbeat, float)
    assert o.max_frame_size == 65536
    assert o.virtual_host_for(o.urls[0]) == "vh"
    assert o.sni_for(o.urls[0]) == "sni.example"
    assert o.properties == {"product": "x"}
    assert o.offered_capabilities == ("a", "b") and o.desired_capabilities == ("c",)
    assert o.container_id == "me"
    assert "pw" not in repr(o)


def test_url_credentials_win_per_url(isolated: dict[str, Path]) -> None:
    o = resolve_options(None, {"urls": ["amqp://u1:p1@a", "amqp://u2@b", "c:1"], "user": "k", "password": "kp"})
    assert [a.host for a in o.urls] == ["a", "b", "c"]
    assert [o.credentials_for(a) for a in o.urls] == [("u1", "p1"), ("u2", "kp"), ("k", "kp")]


def test_sni_falls_back_to_virtual_host(isolated: dict[str, Path]) -> None:
    o = resolve_options("amqps://h", {"virtual_host": "vh"})
    assert o.sni_for(o.urls[0]) == "vh"
    o = resolve_options("amqps://h", {"virtual_host": ""})
    assert o.virtual_host_for(o.urls[0]) is None  # an empty virtual host sends no hostname, as in proton
    assert o.sni_for(o.urls[0]) == "h"


def test_file_makes_the_url(isolated: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "host": "Broker", "port": 6000})
    assert [str(a) for a in resolve_options(None, {}).urls] == ["amqp://broker:6000"]
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "port": "amqps"})
    assert [str(a) for a in resolve_options(None, {}).urls] == ["amqp://localhost:5671"]
    _write(isolated["cwd"] / "connect.json", {"host": "::1", "scheme": "amqp"})
    assert [a.host_port for a in resolve_options(None, {}).urls] == ["[::1]:5672"]
    # No scheme in the file: amqps, as the connect.json specification and proton say; port follows the scheme.
    _write(isolated["cwd"] / "connect.json", {"host": "h", "tls": {"verify": False}})
    o = resolve_options(None, {})
    assert [str(a) for a in o.urls] == ["amqps://h:5671"]
    assert o.ssl_context is not None


@pytest.mark.parametrize(
    "bad",
    [
        {"scheme": "http"},
        {"port": 0},
        {"port": "nope"},
        {"port": True},
        {"host": 5},
        {"user": ["x"]},
        {"sasl": "PLAIN"},
        {"sasl": {"enabled": "yes"}},
        {"sasl": {"mechanisms": 5}},
        {"scheme": "amqps", "tls": {"verify": "no"}},
        {"scheme": "amqps", "tls": {"key": "k.pem"}},
        {"scheme": "amqps", "tls": {"ca": "/nonexistent/ca.pem"}},
    ],
)
def test_file_bad_values(isolated: dict[str, Path], bad: dict[str, Any]) -> None:
    path = _write(isolated["cwd"] / "connect.json", bad)
    with pytest.raises(ConnectConfigError) as info:
        resolve_options(None, {})
    assert os.path.basename(str(path)) in str(info.value)


def test_file_overrides_user_and_password(isolated: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "user": "fu", "password": "fp"})
    o = resolve_options(None, {"user": "ku", "password": "kp"})
    assert (o.user, o.password) == ("fu", "fp")
    # The file's password counts only with its user (proton).
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "password": "fp"})
    o = resolve_options(None, {"user": "ku", "password": "kp"})
    assert (o.user, o.password) == ("ku", "kp")
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "user": "fu"})
    o = resolve_options(None, {"user": "ku", "password": "kp"})
    assert (o.user, o.password) == ("fu", "kp")


def test_file_sasl_map_overrides(isolated: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "sasl": {"enabled": False, "mechanisms": "PLAIN"}})
    o = resolve_options(None, {"sasl_enabled": True, "allowed_mechs": "ANONYMOUS"})
    assert (o.sasl_enabled, o.allowed_mechs) == (False, "PLAIN")
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "sasl": {"mechanisms": ["SCRAM-SHA-256", "PLAIN"]}})
    o = resolve_options(None, {"sasl_enabled": False, "allowed_mechs": "ANONYMOUS"})
    assert (o.sasl_enabled, o.allowed_mechs) == (False, "SCRAM-SHA-256 PLAIN")
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "sasl": {"enable": False, "allow_insecure": False}})
    o = resolve_options(None, {"allowed_mechs": "ANONYMOUS"})
    assert (o.sasl_enabled, o.allowed_mechs, o.allow_insecure_mechs) == (False, "ANONYMOUS", False)
    # Other kwargs are kept.
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp"})
    o = resolve_options(None, {"heartbeat": 5, "virtual_host": "v", "sasl_enabled": False})
    assert (o.heartbeat, o.virtual_host, o.sasl_enabled) == (5.0, "v", False)


def test_env_file_is_used(isolated: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(isolated["cwd"] / "x.json", {"scheme": "amqp", "host": "fromenv", "port": "7000", "user": "u"})
    monkeypatch.setenv(CONNECT_FILE_ENV, str(path))
    o = resolve_options(None, {})
    assert (o.urls[0].host_port, o.user) == ("fromenv:7000", "u")
    # Or an explicit env mapping.
    monkeypatch.delenv(CONNECT_FILE_ENV)
    o = resolve_options(None, {}, env={CONNECT_FILE_ENV: str(path)})
    assert o.urls[0].host == "fromenv"


def test_config_injection() -> None:
    o = resolve_options(None, {}, config={"scheme": "amqp", "host": "injected"})
    assert o.urls[0].host == "injected"
    assert resolve_options(None, {}, config=None).urls[0].host_port == "localhost:5672"


# ------------------------------------------------------------------------------------------------------------------
# Option validation


def test_unknown_options_are_named() -> None:
    with pytest.raises(TypeError) as info:
        resolve_options("h", {"hearbeat": 3, "usr": "x", "user": "ok"})
    assert "hearbeat" in str(info.value) and "usr" in str(info.value) and "user," not in str(info.value)
    for proton_only in ("handler", "ssl_domain", "address"):
        with pytest.raises(TypeError, match=proton_only):
            resolve_options("h", {proton_only: None})


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"heartbeat": 0}, ValueError),
        ({"heartbeat": -1}, ValueError),
        ({"heartbeat": float("nan")}, ValueError),
        ({"heartbeat": "10"}, TypeError),
        ({"heartbeat": True}, TypeError),
        ({"heartbeat": 9e6}, ValueError),  # its half in ms passes the open frame's uint idle-time-out (§2.7.1)
        ({"heartbeat": 1e300}, ValueError),
        ({"max_frame_size": 511}, ValueError),
        ({"max_frame_size": 2**32}, ValueError),
        ({"max_frame_size": 1024.0}, TypeError),
        ({"user": 5}, TypeError),
        ({"password": b"x"}, TypeError),
        ({"sasl_enabled": 1}, TypeError),
        ({"allow_insecure_mechs": "yes"}, TypeError),
        ({"allowed_mechs": 5}, TypeError),
        ({"reconnect": 3}, TypeError),
        ({"reconnect": [0, 1]}, TypeError),
        ({"ssl_context": "ctx"}, TypeError),
        ({"properties": [1]}, TypeError),
        ({"properties": {1: 2}}, TypeError),
        ({"offered_capabilities": [1]}, TypeError),
        ({"container_id": 5}, TypeError),
        ({"urls": "amqp://h"}, TypeError),
        ({"urls": ["amqp://h", "ftp://x"]}, InvalidURL),
    ],
)
def test_option_validation(options: dict[str, Any], error: type[Exception]) -> None:
    url = None if "urls" in options else "h"
    with pytest.raises(error):
        resolve_options(url, options)


def test_url_and_urls_together() -> None:
    with pytest.raises(TypeError, match="not both"):
        resolve_options("a", {"urls": ["b"]})
    with pytest.raises(TypeError):
        resolve_options(5672, {})  # type: ignore[arg-type]


def test_boundary_values() -> None:
    o = resolve_options("h", {"max_frame_size": 512, "heartbeat": 0.5})
    assert (o.max_frame_size, o.heartbeat) == (512, 0.5)
    assert resolve_options("h", {"max_frame_size": 2**32 - 1}).max_frame_size == 2**32 - 1


def test_reconnect_option() -> None:
    assert isinstance(resolve_options("h", {}).reconnect, Backoff)
    assert isinstance(resolve_options("h", {"reconnect": None}).reconnect, Backoff)
    assert resolve_options("h", {"reconnect": False}).reconnect is False
    b = Backoff(max_tries=3)
    assert resolve_options("h", {"reconnect": b}).reconnect is b


def test_attempts_follow_proton() -> None:
    o = resolve_options(None, {"urls": ["a", "b"], "reconnect": Backoff(initial=1, jitter=0, max_tries=3)})
    assert [(d, a.host) for d, a in o.attempts()] == [(0, "a"), (0, "b"), (1, "a"), (1, "b"), (2, "a"), (2, "b")]
    # A second pass starts over: the options' Backoff is not consumed.
    assert len(list(o.attempts())) == 6
    o = resolve_options(None, {"urls": ["a", "b"], "reconnect": False})
    assert [(d, a.host) for d, a in o.attempts()] == [(0, "a"), (0, "b")]


def test_resolved_options_is_frozen() -> None:
    o = resolve_options("h", {})
    with pytest.raises(AttributeError):
        o.user = "x"  # type: ignore[misc]
    assert isinstance(o, ResolvedOptions)


# ------------------------------------------------------------------------------------------------------------------
# TLS


def test_amqps_url_gets_a_verifying_context(isolated: dict[str, Path]) -> None:
    o = resolve_options("amqps://h", {})
    assert isinstance(o.ssl_context, ssl.SSLContext)
    assert o.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert o.ssl_context.check_hostname is True
    # Any amqps URL in the failover list needs one.
    assert resolve_options(None, {"urls": ["amqp://a", "amqps://b"]}).ssl_context is not None
    assert resolve_options("amqp://h", {}).ssl_context is None


def test_explicit_ssl_context_wins(isolated: dict[str, Path]) -> None:
    mine = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    assert resolve_options("amqps://h", {"ssl_context": mine}).ssl_context is mine
    assert resolve_options("amqp://h", {"ssl_context": mine}).ssl_context is mine
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "tls": {"verify": False}})
    assert resolve_options(None, {"ssl_context": mine}).ssl_context is mine


def test_tls_map_verify_false(isolated: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "host": "h", "tls": {"verify": False}})
    ctx = resolve_options(None, {}).ssl_context
    assert ctx is not None
    assert ctx.check_hostname is False
    assert ctx.verify_mode == ssl.CERT_NONE
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "host": "h", "tls": {"verify": True}})
    ctx = resolve_options(None, {}).ssl_context
    assert ctx is not None and ctx.check_hostname is True and ctx.verify_mode == ssl.CERT_REQUIRED


def test_tls_map_ignored_for_amqp(isolated: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqp", "tls": {"verify": False}})
    assert resolve_options(None, {}).ssl_context is None


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate for localhost and its key, made by the openssl command."""
    openssl = shutil.which("openssl") or "/usr/bin/openssl"
    if not os.path.exists(openssl):
        pytest.skip("openssl command not available")
    d = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    return {"cert": d / "cert.pem", "key": d / "key.pem"}


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext, server_hostname: str) -> ssl.SSLObject:
    """A TLS handshake between two contexts through memory BIOs (no sockets)."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_side=False, server_hostname=server_hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, obj in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return c
    raise AssertionError("handshake did not finish")


def _server(certs: dict[str, Path], require_client_cert: bool) -> ssl.SSLContext:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(certs["cert"]), str(certs["key"]))
    if require_client_cert:
        server.verify_mode = ssl.CERT_REQUIRED
        server.load_verify_locations(cafile=str(certs["cert"]))
    return server


def test_tls_map_ca_cert_key(isolated: dict[str, Path], certs: dict[str, Path]) -> None:
    tls = {"ca": str(certs["cert"]), "cert": str(certs["cert"]), "key": str(certs["key"])}
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "host": "localhost", "tls": tls})
    o = resolve_options(None, {})
    ctx = o.ssl_context
    assert ctx is not None
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname is True
    assert any(("commonName", "localhost") in rdn for c in ctx.get_ca_certs() for rdn in c["subject"])
    # The server requires a client certificate signed by its CA: the handshake succeeds only with tls.cert/key.
    tls_obj = _handshake(ctx, _server(certs, require_client_cert=True), o.sni_for(o.urls[0]))
    peer = tls_obj.getpeercert()
    assert peer is not None and peer["subject"] == ((("commonName", "localhost"),),)
    # Without the client certificate the server refuses (TLS 1.3 reports it after the client's handshake).
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "tls": {"ca": str(certs["cert"])}})
    no_cert = resolve_options(None, {}).ssl_context
    assert no_cert is not None
    with pytest.raises(ssl.SSLError):
        _handshake(no_cert, _server(certs, require_client_cert=True), "localhost")


def test_tls_ca_directory(isolated: dict[str, Path], certs: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "tls": {"ca": str(certs["cert"].parent)}})
    assert resolve_options(None, {}).ssl_context is not None


def test_tls_verify_checks_the_host_name(isolated: dict[str, Path], certs: dict[str, Path]) -> None:
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "tls": {"ca": str(certs["cert"])}})
    verifying = resolve_options(None, {}).ssl_context
    assert verifying is not None
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(verifying, _server(certs, require_client_cert=False), "not-localhost")
    # The system CAs alone do not trust the self-signed certificate.
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(ssl.create_default_context(), _server(certs, require_client_cert=False), "localhost")
    _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "tls": {"verify": False}})
    lax = resolve_options(None, {}).ssl_context
    assert lax is not None
    _handshake(lax, _server(certs, require_client_cert=False), "not-localhost")


def test_tls_bad_cert_file_names_the_config(isolated: dict[str, Path], tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    path = _write(isolated["cwd"] / "connect.json", {"scheme": "amqps", "tls": {"cert": str(junk)}})
    with pytest.raises(ConnectConfigError) as info:
        resolve_options(None, {})
    assert info.value.path == "./connect.json" or os.path.samefile(info.value.path, path)


# ------------------------------------------------------------------------------------------------------------------
# Backoff


def test_backoff_proton_sequence() -> None:
    b = Backoff(jitter=0)
    assert [next(b) for _ in range(10)] == [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]


def test_backoff_matches_proton_delay_iter() -> None:
    reactor = pytest.importorskip("proton._reactor")
    ours = Backoff(initial=0.5, factor=3, maximum=20, jitter=0, max_tries=8)
    assert list(ours) == list(reactor.delay_iter(initial=0.5, factor=3, max_delay=20, max_tries=8))
    assert list(Backoff(jitter=0, max_tries=12)) == list(reactor.delay_iter(max_tries=12))


def test_backoff_max_tries_and_reset() -> None:
    b = Backoff(initial=1, jitter=0, max_tries=3)
    assert list(b) == [0.0, 1.0, 2.0]
    assert b.tries == 3
    with pytest.raises(StopIteration):
        b.next()
    b.reset()
    assert b.next() == 0.0 and b.next() == 1.0
    assert list(Backoff(max_tries=1)) == [0.0]
    assert iter(b) is b


def test_backoff_jitter_only_shortens() -> None:
    b = Backoff(initial=1, factor=2, maximum=4, jitter=0.25, rng=lambda: 1.0)
    assert [next(b) for _ in range(5)] == [0.0, 0.75, 1.5, 3.0, 3.0]
    b = Backoff(initial=1, factor=2, maximum=4, jitter=0.25, rng=lambda: 0.0)
    assert [next(b) for _ in range(5)] == [0.0, 1.0, 2.0, 4.0, 4.0]
    # The growth follows the nominal delays, not the jittered ones.
    values = iter([0.5, 0.9, 0.1, 0.7])
    b = Backoff(initial=2, maximum=100, jitter=0.5, rng=lambda: next(values))
    assert [next(b) for _ in range(5)] == [0.0, 2 - 0.5, 4 - 1.8, 8 - 0.4, 16 - 5.6]


def test_backoff_default_jitter_bounds() -> None:
    b = Backoff(initial=1, maximum=8)
    delays = [next(b) for _ in range(200)]
    assert delays[0] == 0.0
    assert all(0.9 * 8 <= d <= 8 for d in delays[5:])
    assert len(set(delays[5:])) > 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"initial": -1}, ValueError),
        ({"factor": 0.5}, ValueError),
        ({"maximum": -1}, ValueError),
        ({"jitter": 1.5}, ValueError),
        ({"jitter": -0.1}, ValueError),
        ({"max_tries": 0}, ValueError),
        ({"max_tries": 1.5}, TypeError),
        ({"initial": "1"}, TypeError),
        ({"factor": True}, TypeError),
        ({"max_time": 0}, ValueError),
        ({"max_time": -1}, ValueError),
        ({"max_time": "60"}, TypeError),
        ({"max_time": True}, TypeError),
    ],
)
def test_backoff_validation(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Backoff(**kwargs)


def test_backoff_repr() -> None:
    assert (
        repr(Backoff(max_tries=2))
        == "Backoff(initial=0.1, factor=2.0, maximum=10.0, jitter=0.1, max_tries=2, max_time=60.0)"
    )


def test_unlimited_reconnect_and_no_idle_timeout_are_explicit_choices() -> None:
    o = resolve_options("h", {"heartbeat": None, "connect_timeout": None, "reconnect": Backoff(max_time=None)})
    assert (o.heartbeat, o.connect_timeout) == (None, None)
    assert isinstance(o.reconnect, Backoff)
    assert (o.reconnect.max_tries, o.reconnect.max_time) == (None, None)
    assert Backoff(max_time=float("inf")).max_time is None
    assert resolve_options("h", {"reconnect": True}).reconnect.max_time == 60.0  # type: ignore[union-attr]
