"""The native wire renderer (ntgcore/native/wirerender.h, idsrules/evasion/native.py) lays out
every variant session exactly as `idsrules.evasion.model.render` defines it: the same frames, byte
for byte, the same timestamps; a malformed program is an error, never a crash."""

from __future__ import annotations

import ctypes
import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idsrules.evasion import CLASSES, variants
from idsrules.evasion.model import Frag, Seg, Step, WirePlan, plain_plan, render
from idsrules.evasion.native import Renderer, WireLibraryError, session_program
from ntgcore import packets as P

REQUEST = b"GET /cgi-bin/a.cgi?cmd=cat%20/etc/passwd HTTP/1.1\r\nHost: h\r\n\r\n"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n" + b"o" * 3000
TCP = plain_plan("tcp", [(True, REQUEST), (False, ANSWER), (True, b"x" * 3000)], 5)
SMTP = plain_plan("tcp", [(False, b"220 mx\r\n"), (True, b"HELO a\r\nMAIL FROM:<a@b>\r\n")], 6)
UDP = plain_plan("udp", [(True, b"q" * 100 + b"attack-datagram"), (False, b"a")], 5)
ADDRS = {4: ("198.19.0.7", "198.18.0.1"), 6: ("2001:db8:1::7", "2001:db8::1")}
T0, GAP, SESSION_GAP = 1_700_000_000_123_456_789, 20_000, 1_000_000


def python_records(sessions, t=T0, session_gap=SESSION_GAP, nanosecond=False) -> tuple[bytes, int]:
    """The reference: model.render's frames through the PcapWriter, without its file header."""
    f = io.BytesIO()
    w = P.PcapWriter(f, nanosecond=nanosecond)
    for plan, client, server, cport, sport, seed in sessions:
        for _fc, frame in render(plan, client, server, cport, sport, seed):
            w.write(t, frame)
            t += GAP
        t += session_gap
    return f.getvalue()[P.PCAP_GLOBAL.size :], t


def native_records(sessions, t=T0, session_gap=SESSION_GAP, nanosecond=False):
    program = b"".join(session_program(*s) for s in sessions)
    return Renderer(nanosecond=nanosecond).render(program, t, GAP, session_gap)


def sessions_of(plans, family: int, sport: int = 80):
    out = []
    for k, plan in enumerate(plans):
        six = family == 6 or plan.family == 6
        client, server = ADDRS[6 if six else 4]
        out.append((plan, client, server, 40000 + k, sport, k + 1))
    return out


@pytest.mark.parametrize("family", [4, 6])
@pytest.mark.parametrize("base", [TCP, SMTP, UDP], ids=["http", "smtp", "udp"])
def test_every_variant_of_every_class_renders_as_the_python_reference(wirelib, base, family):
    plans = [base, *variants(base, list(CLASSES), 11)]
    if family == 6:
        plans = [p for p in plans if p.cls != "ip4-frag"]
    sessions = sessions_of(plans, family, 25 if base is SMTP else 80)
    want, t_end = python_records(sessions)
    got = native_records(sessions)
    assert got.records == want
    assert got.t_ns == t_end
    assert got.packets == sum(1 for s in sessions for _ in render(*s))
    assert "ip6-frag" in {p.cls for p in plans}  # fragments, extension headers, tricks


def test_nanosecond_records_and_a_session_gap_of_zero(wirelib):
    sessions = sessions_of([TCP, UDP], 4)
    want, _t = python_records(sessions, session_gap=0, nanosecond=True)
    assert native_records(sessions, session_gap=0, nanosecond=True).records == want


# --- any plan at all: the fields in their whole ranges ------------------------------------------

frags = st.lists(
    st.builds(
        Frag,
        st.integers(0, 300).map(lambda n: n * 8),
        st.integers(0, 2000),
        st.one_of(st.none(), st.binary(max_size=40)),
    ),
    max_size=4,
)
segs = st.builds(
    Seg,
    off=st.integers(0, 5000),
    data=st.binary(max_size=1600),
    flags=st.integers(0, 255),
    hops=st.integers(0, 255),
    bad_checksum=st.booleans(),
    urgent=st.integers(0, 65535),
    ts_back=st.integers(0, 2**33),
    seq_shift=st.integers(-(2**33), 2**33),
    frags=frags.map(tuple),
    ext=st.lists(st.sampled_from([0, 43, 60, 99]), max_size=3).map(tuple),
    atomic=st.booleans(),
)
steps = st.builds(
    Step, st.booleans(), st.binary(max_size=3000), st.lists(segs, max_size=4).map(tuple)
)
plans = st.builds(
    WirePlan,
    variant=st.just("any"),
    cls=st.just("any"),
    seed=st.just(0),
    proto=st.sampled_from(["tcp", "udp"]),
    steps=st.lists(steps, max_size=4).map(tuple),
    timestamps=st.booleans(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans, st.sampled_from([4, 6]), st.integers(0, 2**40))
def test_any_plan_renders_as_the_python_reference(wirelib, plan, family, seed):
    client, server = ADDRS[family]
    sessions = [(plan, client, server, 1234, 80, seed), (plan, client, server, 1235, 80, seed + 1)]
    want, t_end = python_records(sessions)
    got = native_records(sessions)
    assert got.records == want and got.t_ns == t_end


# --- bad programs -------------------------------------------------------------------------------


def test_a_cut_or_damaged_program_is_an_error_that_says_where(wirelib):
    client, server = ADDRS[4]
    program = session_program(variants(TCP, ["ip4-frag"], 3)[0], client, server, 1, 80, 1)
    r = Renderer()
    for cut in range(1, len(program), 7):
        with pytest.raises(WireLibraryError, match="malformed program"):
            r.render(program[:cut], T0, GAP, 0)
    bad = bytearray(program)
    bad[0] = 1  # no such protocol
    with pytest.raises(WireLibraryError, match="byte 0 of its program: a malformed program"):
        r.render(bytes(bad), T0, GAP, 0)
    huge = struct.pack("<I", 0xFFFFFFF0)  # a step's data length past the end
    with pytest.raises(WireLibraryError, match="malformed"):
        r.render(program[:48] + b"\x01\0\0\0" + huge + b"\xff" * 4, T0, GAP, 0)


def test_a_packet_over_64_kib_is_refused_as_the_python_builder_refuses_it(wirelib):
    big = plain_plan("udp", [(True, b"x" * 70_000)])
    client, server = ADDRS[4]
    with pytest.raises(struct.error):
        list(render(big, client, server, 1, 53, 1))
    with pytest.raises(WireLibraryError, match="over 64 KiB"):
        Renderer().render(session_program(big, client, server, 1, 53, 1), T0, GAP, 0)


def test_the_output_buffer_grows_for_a_large_session(wirelib):
    r = Renderer()
    r.buf = ctypes.create_string_buffer(64)  # far too small: the renderer asks again with more room
    sessions = sessions_of([TCP], 4)
    assert native_records(sessions).records == python_records(sessions)[0]
    got = r.render(b"".join(session_program(*s) for s in sessions), T0, GAP, SESSION_GAP)
    assert got.records == python_records(sessions)[0] and len(r.buf) > 64
