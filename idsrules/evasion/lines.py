"""Application-level class `line-variants`: the command lines of an FTP or SMTP session written
otherwise: `line-lf` (bare LF line ends), `line-case` (verbs in another case), `line-space`
(extra spaces between verb and argument), `line-tab` (a tab there), and `line-split` (each
command line in two TCP segments: the same bytes, a wire trick). The first four set `app` and
`meant`: `appview.meaning` says whether the server read the same commands (by smtpd's rule a
bare LF ends no line and a tab is part of the verb; case and extra spaces are the same command).

Only TCP sessions whose server greets with 220 and whose client stream is whole command lines
(an SMTP message after DATA included); SMTP when a client verb is SMTP's, else FTP.
"""

from __future__ import annotations

from collections.abc import Callable

from .appview import CRLF, command_items, verb_arg
from .model import Seg, Step, WirePlan, evolve, plain_segs

CLS = "line-variants"
SMTP_VERBS = {"HELO", "EHLO", "MAIL", "RCPT", "DATA", "BDAT", "VRFY", "EXPN", "STARTTLS"}


def application(plan: WirePlan) -> str | None:
    """smtp or ftp when the session is such a dialogue, else None."""
    steps = plan.steps
    if plan.proto != "tcp" or not steps or steps[0].from_client:
        return None
    if not steps[0].data.startswith(b"220"):
        return None
    stream = plan.client_stream()
    items, _ = command_items(stream, smtp=True)
    if not items or any(kind == "tail" for kind, _line in items):
        return None
    verbs = {verb_arg(line)[0] for kind, line in items if kind == "command"}
    return "smtp" if verbs & SMTP_VERBS else "ftp"


def _rewrite(line: bytes, how: str) -> bytes:
    """One command line (with its CRLF) rewritten by `how`."""
    body = line.removesuffix(CRLF)
    verb, sep, arg = body.partition(b" ")
    if how == "lf":
        return body + b"\n"
    if how == "case":
        verb = verb.lower() if verb != verb.lower() else verb.upper()
        return verb + sep + arg + CRLF
    if not sep:
        return line
    gap = b"   " if how == "space" else b"\t"
    return verb + gap + arg + CRLF


def _lines(plan: WirePlan, app: str) -> list[list[tuple[str, bytes]]]:
    """The items (command_items) of each client step, the SMTP message state carried over."""
    out: list[list[tuple[str, bytes]]] = []
    in_data = False
    for step in plan.steps:
        if step.from_client:
            items, in_data = command_items(step.data, app == "smtp", in_data)
            out.append(items)
        else:
            out.append([])
    return out


def _rewritten(plan: WirePlan, app: str, how: str, name: str) -> WirePlan | None:
    steps = []
    for step, items in zip(plan.steps, _lines(plan, app)):
        if not step.from_client:
            steps.append(step)
            continue
        data = b""
        for kind, line in items:
            if kind == "command" or how == "lf":
                data += _rewrite(line, how)
            else:
                data += line
        steps.append(Step(True, data))
    new = evolve(
        plan, variant=name, cls=CLS, steps=tuple(steps), app=app, meant=plan.client_stream()
    )
    return new if new.client_stream() != plan.client_stream() else None


def _split(plan: WirePlan, app: str) -> WirePlan:
    """Each command line cut in the middle, the halves in two segments (a message as it is)."""
    steps = []
    off = 0
    for step, items in zip(plan.steps, _lines(plan, app)):
        if not step.from_client:
            steps.append(step)
            continue
        segs: list[Seg] = []
        run = b""  # message lines go together, as plain segments
        for kind, line in items:
            half = len(line) // 2
            if kind == "command" and half:
                segs += plain_segs(run, off - len(run))
                run = b""
                segs += [Seg(off, line[:half]), Seg(off + half, line[half:])]
            else:
                run += line
            off += len(line)
        segs += plain_segs(run, off - len(run))
        steps.append(evolve(step, segs=tuple(segs)))
    return evolve(plan, variant="line-split", cls=CLS, steps=tuple(steps))


KINDS: dict[str, Callable[[WirePlan, str], WirePlan | None]] = {
    "line-lf": lambda p, a: _rewritten(p, a, "lf", "line-lf"),
    "line-case": lambda p, a: _rewritten(p, a, "case", "line-case"),
    "line-space": lambda p, a: _rewritten(p, a, "space", "line-space"),
    "line-tab": lambda p, a: _rewritten(p, a, "tab", "line-tab"),
    "line-split": _split,
}


def line_variants(plan: WirePlan, seed: int) -> list[WirePlan]:
    """The line variants of an FTP or SMTP session (none for another session)."""
    app = application(plan)
    if app is None:
        return []
    out = [make(plan, app) for make in KINDS.values()]
    return [evolve(p, seed=seed) for p in out if p is not None]
