"""The OTG API over HTTPS (JSON), as ixia-c serves it: `testbed otg serve` (docs/otg.md).

Routes map one-to-one onto `OtgService` methods; every refusal is OTG's Error object
(`{"code", "kind", "errors"}`) with the HTTP status of its code. The certificate is self-signed,
made at start for the names the server listens on (clients connect with verification off, as the
conformance suite does). Requests are read with a bounded size; a malformed one is a 400.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import queue
import ssl
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from .refusal import OtgRefusal
from .service import OtgService, version

MAX_BODY = 64 * 2**20  # a config of 64 MiB is far past any real one


def self_signed(host: str, folder: Path) -> tuple[Path, Path]:
    """A fresh key and a certificate for `host` (and localhost), valid for 30 days."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ntg-testbed otg serve")])
    alt: list[x509.GeneralName] = [x509.DNSName("localhost")]
    try:
        alt.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        alt.append(x509.DNSName(host))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path, cert_path = folder / "key.pem", folder / "cert.pem"
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


class MainLoop:
    """Runs the API's calls one at a time in the thread that calls `run_until` (the main thread):
    the transports' threads hand their calls over and wait. The processes a call starts (engines,
    tcpdumps) are then started by the main thread, whose death signal they carry
    (`ntgcore.proc.Process`): a killed server takes them with it. Calls are serialized anyway."""

    def __init__(self) -> None:
        self.calls: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...], Future[Any]]] = (
            queue.Queue()
        )

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        fut: Future[Any] = Future()
        self.calls.put((fn, args, fut))
        return fut.result()

    def run_until(self, stop: Callable[[], bool], tick: float = 0.2) -> None:
        while not stop():
            try:
                fn, args, fut = self.calls.get(timeout=tick)
            except queue.Empty:
                continue
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except Exception as exc:
                fut.set_exception(exc)


class OtgHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], service: OtgService, loop: MainLoop, tls: bool = True
    ) -> None:
        super().__init__(address, _Handler)
        self.service = service
        self.loop = loop
        self.tls = tls
        if tls:
            with tempfile.TemporaryDirectory(prefix="ntg-otg-tls-") as tmp:
                key, cert = self_signed(address[0], Path(tmp))
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                ctx.load_cert_chain(cert, key)
            self.socket = ctx.wrap_socket(self.socket, server_side=True)

    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="otg-http", daemon=True)
        t.start()
        return t


Route = Callable[[OtgService, bytes], Any]


def _json(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise OtgRefusal(400, "validation", [f"request body: not JSON: {exc}"]) from None
    if not isinstance(doc, dict):
        raise OtgRefusal(400, "validation", ["request body: a JSON object is expected"])
    return doc


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OtgRefusal(400, "validation", [f"request body: not UTF-8: {exc}"]) from None


def _unsupported(what: str) -> Route:
    def route(service: OtgService, body: bytes) -> Any:
        raise OtgRefusal(501, "unimplemented", [f"{what} is not supported by this server"])

    return route


ROUTES: dict[tuple[str, str], Route] = {
    ("POST", "/config"): lambda s, b: s.set_config(_text(b)),
    ("GET", "/config"): lambda s, b: s.get_config(),
    ("PATCH", "/config"): _unsupported("update_config (PATCH /config)"),
    ("PATCH", "/config/append"): _unsupported("append_config"),
    ("PATCH", "/config/delete"): _unsupported("delete_config"),
    ("POST", "/control/state"): lambda s, b: s.set_control_state(_json(b)),
    ("POST", "/control/action"): _unsupported("control/action (protocol actions)"),
    ("POST", "/monitor/metrics"): lambda s, b: s.get_metrics(_json(b)),
    ("POST", "/monitor/states"): _unsupported("monitor/states (protocol states)"),
    ("POST", "/monitor/capture"): lambda s, b: s.get_capture(_json(b)),
    ("GET", "/capabilities/version"): lambda s, b: version(),
}


class _Handler(BaseHTTPRequestHandler):
    server: OtgHttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the run folder keeps state
        pass

    def _reply(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, refusal: OtgRefusal) -> None:
        self._reply(refusal.code, json.dumps(refusal.body()).encode(), "application/json")

    def _handle(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            self._error(OtgRefusal(400, "validation", [f"request body: bad length ({n})"]))
            return
        body = self.rfile.read(n) if n else b""
        route = ROUTES.get((method, path))
        if route is None:
            known = sorted({p for m, p in ROUTES})
            what = "method not allowed" if path in known else "no such path"
            self._error(
                OtgRefusal(
                    404 if path not in known else 405, "validation", [f"{method} {path}: {what}"]
                )
            )
            return
        try:
            result = self.server.loop.call(route, self.server.service, body)
        except OtgRefusal as refusal:
            self._error(refusal)
            return
        except Exception as exc:  # the server's own fault: said as OTG's internal error
            self._error(OtgRefusal(500, "internal", [f"{type(exc).__name__}: {exc}"]))
            return
        if isinstance(result, bytes):
            self._reply(200, result, "application/octet-stream")
        else:
            self._reply(200, json.dumps(result).encode(), "application/json")

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")
