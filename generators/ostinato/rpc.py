"""Our own client for drone's RPC protocol: message classes built from `ostinato.proto` at import.

Wire format (../shared/reference/ostinato-drone.md): plain TCP; every message is an 8-byte
big-endian header `type:u16 | method:u16 | length:u32` followed by `length` bytes. Types: 1
request, 2 response, 3 binary blob (getCaptureBuffer's pcap), 4 error (UTF-8 text), 5
notification (skipped). One call at a time; `checkVersion` must be the first call.

The `.proto` file is parsed here by a small reader for the subset it uses (proto2 messages,
nested enums, scalar/message/enum fields with labels and an optional `[default = X]`, one
service), so neither `protoc` nor generated code is needed.
"""

from __future__ import annotations

import re
import socket
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ntgcore.errors import NtgError

PROTO_FILE = Path(__file__).with_name("ostinato.proto")
CLIENT_VERSION = "1.2.0"
CLIENT_NAME = "ntg-testbed"
HEADER = struct.Struct(">HHI")
REQUEST, RESPONSE, BLOB, ERROR, NOTIFY = 1, 2, 3, 4, 5
MAX_MESSAGE = 512 * 1024 * 1024  # a capture buffer can be large; anything beyond is a broken peer


class DroneError(NtgError):
    """drone refused a call, replied with an error, or could not be reached in time."""


class ProtoSyntaxError(NtgError, ValueError):
    pass


# --------------------------------------------------------------------------------------------
# A reader for the .proto subset in ostinato.proto

_SCALARS = {
    "double": descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE,
    "float": descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT,
    "int32": descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
    "int64": descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
    "uint32": descriptor_pb2.FieldDescriptorProto.TYPE_UINT32,
    "uint64": descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
    "fixed32": descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32,
    "fixed64": descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64,
    "bool": descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
    "string": descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
    "bytes": descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
}
_LABELS = {
    "optional": descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    "required": descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED,
    "repeated": descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
}
_TOKEN = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|("[^"]*"|[A-Za-z_][\w.]*|-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?)|[{};=\[\](),<>])',
    re.S,
)


def _tokens(text: str) -> list[tuple[str, int]]:
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ProtoSyntaxError(f"line {line}: unexpected character {text[pos]!r}")
        if m.group(1):
            out.append((m.group(1), line))
        line += text.count("\n", pos, m.end())
        pos = m.end()
    return out


class _Reader:
    def __init__(self, text: str, name: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.name = name

    def peek(self) -> str:
        return self.toks[self.i][0] if self.i < len(self.toks) else ""

    def take(self, expect: str | None = None) -> str:
        if self.i >= len(self.toks):
            raise ProtoSyntaxError(f"{self.name}: unexpected end of file")
        tok, line = self.toks[self.i]
        if expect is not None and tok != expect:
            raise ProtoSyntaxError(f"{self.name}:{line}: expected {expect!r}, found {tok!r}")
        self.i += 1
        return tok

    def line(self) -> int:
        return self.toks[min(self.i, len(self.toks) - 1)][1]


def parse_proto(text: str, name: str = "ostinato.proto") -> descriptor_pb2.FileDescriptorProto:
    """A FileDescriptorProto for `text` (the subset described in the module docstring)."""
    r = _Reader(text, name)
    fd = descriptor_pb2.FileDescriptorProto(name=name, syntax="proto2")
    pending: list[tuple[descriptor_pb2.FieldDescriptorProto, str, str, int]] = []

    def enum(target) -> None:
        r.take("enum")
        e = target.add(name=r.take())
        r.take("{")
        while r.peek() != "}":
            value_name = r.take()
            r.take("=")
            e.value.add(name=value_name, number=int(r.take(), 0))
            r.take(";")
        r.take("}")

    def message(target, scope: str) -> None:
        r.take("message")
        m = target.add(name=r.take())
        full = f"{scope}.{m.name}"
        r.take("{")
        while r.peek() != "}":
            if r.peek() == "enum":
                enum(m.enum_type)
                continue
            if r.peek() == "message":
                message(m.nested_type, full)
                continue
            line = r.line()
            label = r.take()
            if label not in _LABELS:
                raise ProtoSyntaxError(
                    f"{name}:{line}: expected optional, required or repeated, found {label!r}"
                )
            type_name, field_name = r.take(), r.take()
            r.take("=")
            f = m.field.add(name=field_name, number=int(r.take()), label=_LABELS[label])
            if r.peek() == "[":
                r.take("[")
                r.take("default")
                r.take("=")
                f.default_value = r.take().strip('"')
                r.take("]")
            r.take(";")
            if type_name in _SCALARS:
                f.type = _SCALARS[type_name]
            else:
                pending.append((f, type_name, full, line))
        r.take("}")

    package = ""
    while r.peek():
        tok = r.peek()
        if tok == "syntax":
            r.take(), r.take("="), r.take(), r.take(";")
        elif tok == "package":
            r.take()
            package = fd.package = r.take()
            r.take(";")
        elif tok == "message":
            message(fd.message_type, package)
        elif tok == "enum":
            enum(fd.enum_type)
        elif tok == "service":
            r.take()
            s = fd.service.add(name=r.take())
            r.take("{")
            while r.peek() != "}":
                r.take("rpc")
                meth = s.method.add(name=r.take())
                r.take("(")
                meth.input_type = f".{package}.{r.take()}"
                r.take(")")
                r.take("returns")
                r.take("(")
                meth.output_type = f".{package}.{r.take()}"
                r.take(")")
                r.take(";")
            r.take("}")
        else:
            raise ProtoSyntaxError(f"{name}:{r.line()}: unexpected {tok!r}")

    # Resolve type names: innermost scope first, as protoc does.
    kinds: dict[str, int] = {}

    def collect(msgs, scope: str) -> None:
        for m in msgs:
            full = f"{scope}.{m.name}"
            kinds[full] = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
            for e in m.enum_type:
                kinds[f"{full}.{e.name}"] = descriptor_pb2.FieldDescriptorProto.TYPE_ENUM
            collect(m.nested_type, full)

    collect(fd.message_type, package)
    for e in fd.enum_type:
        kinds[f"{package}.{e.name}"] = descriptor_pb2.FieldDescriptorProto.TYPE_ENUM
    for f, type_name, scope, line in pending:
        parts = scope.split(".")
        for depth in range(len(parts), -1, -1):
            candidate = ".".join(parts[:depth] + [type_name]).lstrip(".")
            if candidate in kinds:
                f.type, f.type_name = kinds[candidate], "." + candidate
                break
        else:
            raise ProtoSyntaxError(f"{name}:{line}: unknown type {type_name!r}")
    return fd


def _build():
    fd = parse_proto(PROTO_FILE.read_text(encoding="utf-8"), PROTO_FILE.name)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    classes = {}
    for m in fd.message_type:
        classes[m.name] = message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{fd.package}.{m.name}")
        )
    for e in fd.enum_type:  # top-level enum values as plain constants: msg.kSequentialTransmit
        for v in e.value:
            classes[v.name] = v.number
    methods = {
        m.name: (i, m.input_type.rsplit(".", 1)[1], m.output_type.rsplit(".", 1)[1])
        for i, m in enumerate(fd.service[0].method)
    }
    return classes, methods


class _Messages:
    """Attribute access to the message classes: `msg.PortIdList()`."""

    def __init__(self, classes: dict[str, type]) -> None:
        self.__dict__.update(classes)

    if TYPE_CHECKING:  # the classes are set at run time, from our .proto

        def __getattr__(self, name: str) -> Any: ...


_CLASSES, METHODS = _build()
msg = _Messages(_CLASSES)


# --------------------------------------------------------------------------------------------
# The client


class DroneClient:
    """One connection to drone; `call(name, request)` returns the reply message.

    Every call is bounded by `timeout` seconds; an error frame from drone raises DroneError with
    drone's text; notification frames are skipped."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 7878,
        timeout: float = 10.0,
        version: str = CLIENT_VERSION,
        client_name: str = CLIENT_NAME,
        sock: socket.socket | None = None,
    ) -> None:
        """Connect to host:port, or use `sock` (already connected, e.g. inside a namespace)."""
        self.timeout = timeout
        peer = sock.getpeername() if sock else (host, port)
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "socket")
        if sock is None:
            try:
                sock = socket.create_connection((host, port), timeout=timeout)
            except OSError as exc:
                raise DroneError(f"cannot connect to drone at {self.address}: {exc}") from exc
        self.sock = sock
        self.sock.settimeout(timeout)
        try:
            self.check_version(version, client_name)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> DroneClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def check_version(self, version: str, client_name: str) -> None:
        reply = self.call("checkVersion", msg.VersionInfo(version=version, client_name=client_name))
        if reply.result != msg.VersionCompatibility.kCompatible:
            notes = reply.notes or "(no reason given)"
            raise DroneError(
                f"drone refused client version {version}: {notes!r}; this client speaks "
                f"drone protocol {CLIENT_VERSION} (drone 1.2.x); install drone 1.2 "
                f"(Debian's `ostinato` package) or a matching client"
            )

    def call(self, method: str, request: Any = None, timeout: float | None = None) -> Any:
        """Send `request` to `method` and return the reply (bytes for getCaptureBuffer)."""
        index, in_type, out_type = METHODS[method]
        if request is None:
            request = getattr(msg, in_type)()
        payload = request.SerializeToString()
        deadline = time.monotonic() + (timeout or self.timeout)
        try:
            self.sock.sendall(HEADER.pack(REQUEST, index, len(payload)) + payload)
            while True:
                kind, got, body = self._read_frame(deadline, method)
                if kind == NOTIFY:
                    continue
                if kind == ERROR:
                    raise DroneError(f"drone: {method} failed: {body.decode('utf-8', 'replace')}")
                if got != index:
                    raise DroneError(f"drone answered method {got} to {method} (index {index})")
                if kind == BLOB:
                    return body
                if kind != RESPONSE:
                    raise DroneError(f"drone sent frame type {kind} in reply to {method}")
                reply = getattr(msg, out_type)()
                reply.ParseFromString(body)
                return reply
        except OSError as exc:  # timeouts included
            self.close()
            raise DroneError(f"drone at {self.address}: {method}: {exc or 'timed out'}") from exc

    def _read_frame(self, deadline: float, method: str) -> tuple[int, int, bytes]:
        kind, index, length = HEADER.unpack(self._read(HEADER.size, deadline, method))
        if length > MAX_MESSAGE:
            raise DroneError(f"drone sent a {length}-byte message to {method}; refusing it")
        return kind, index, self._read(length, deadline, method)

    def _read(self, n: int, deadline: float, method: str) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no complete reply to {method} within {self.timeout:g}s")
            self.sock.settimeout(left)
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(f"drone closed the connection during {method}")
            buf += chunk
        return bytes(buf)

    # ---- conveniences --------------------------------------------------------------------

    def ports(self) -> dict[str, int]:
        """{port name: port id} of every port drone offers."""
        ids = self.call("getPortIdList")
        config = self.call("getPortConfig", ids)
        return {p.name: p.port_id.id for p in config.port}

    @staticmethod
    def port_list(*port_ids: int) -> Any:
        return msg.PortIdList(port_id=[msg.PortId(id=i) for i in port_ids])

    def ack(self, method: str, request: Any, timeout: float | None = None) -> None:
        reply = self.call(method, request, timeout)
        if reply.status != msg.Ack.kRpcSuccess:
            raise DroneError(f"drone: {method} failed: {reply.notes or '(no reason given)'}")
