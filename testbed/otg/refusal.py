"""`OtgRefusal`: what the OTG front end answers instead of doing something, as OTG's Error.

OTG's Error object (snappi's `Error`) has a `code` (the HTTP status), a `kind` and a list of
`errors`, each one line naming the field as OTG spells its path
(`flows[0].packet[2].tcp.src_port.random: ...`). Codes: 400 bad input, 409 a state conflict
(a config set while traffic runs), 501 a part of the model we do not implement, 500 our fault.
"""

from __future__ import annotations

from typing import Any

from ntgcore.errors import EXIT_BAD_INPUT, NtgError

KINDS = ("validation", "unimplemented", "internal")


class OtgRefusal(NtgError):
    """A refused OTG request: `code`, `kind` ("validation", "unimplemented", "internal") and
    `errors` (one line each, naming the field path). `body()` is the OTG Error JSON."""

    exit_status = EXIT_BAD_INPUT

    def __init__(self, code: int, kind: str, errors: list[str]) -> None:
        if kind not in KINDS:
            raise ValueError(f"OtgRefusal kind {kind!r}: expected one of {', '.join(KINDS)}")
        super().__init__("; ".join(errors) if errors else f"refused ({code})")
        self.code = code
        self.kind = kind
        self.errors = list(errors)

    def body(self) -> dict[str, Any]:
        """The OTG Error object: `{"code": ..., "kind": ..., "errors": [...]}`. OTG 1.58's
        Error.kind has only "validation" and "internal" (a client refuses any other: snappi cannot
        even print the error): an unimplemented part of the model is said as "validation", its
        501 code telling it apart."""
        kind = "internal" if self.kind == "internal" else "validation"
        return {"code": self.code, "kind": kind, "errors": list(self.errors)}

    @classmethod
    def bad(cls, path: str, message: str) -> OtgRefusal:
        """400: `path: message` (the input cannot be used as it is)."""
        return cls(400, "validation", [f"{path}: {message}"])

    @classmethod
    def unsupported(cls, path: str, message: str) -> OtgRefusal:
        """501: `path: message` (a valid OTG setting that we do not implement)."""
        return cls(501, "unimplemented", [f"{path}: {message}"])
