"""The Ostinato adapter without drone: our .proto reader, the wire framing, the flow mapping.

Framing tests talk to a peer on the other end of a socketpair (no network); everything that
needs the real drone is in test_ostinato_live.py.
"""

import socket
import struct
import threading
from pathlib import Path

import pytest

from generators.ostinato import Ostinato, rpc
from generators.ostinato.rpc import DroneClient, DroneError, msg, parse_proto
from generators.ostinato.streams import ICMP, IP4, TCP, UDP, build_plan
from ntgcore.errors import GeneratorError
from ntgcore.generator import get_generator
from ntgcore.scenario import parse_scenario
from testbed.endpoints.netns import NetnsEndpoint as Endpoint

HEAD = "version: 1\nname: t\nseed: 7\nflows:\n"


def scenario(flows: str):
    return parse_scenario(HEAD + flows)


def proto_of(stream, pid):
    return next(p for p in stream.protocol if p.protocol_id.id == pid)


# ---- the .proto file and our reader --------------------------------------------------------


def test_method_indices_follow_the_service_declaration():
    assert rpc.METHODS["getPortIdList"][0] == 0
    assert rpc.METHODS["startTransmit"][0] == 8
    assert rpc.METHODS["getCaptureBuffer"][0] == 12
    assert rpc.METHODS["getStats"] == (13, "PortIdList", "PortStatsList")
    assert rpc.METHODS["checkVersion"] == (15, "VersionInfo", "VersionCompatibility")


def test_protocol_headers_use_drone_field_numbers():
    p = msg.Protocol()
    p.protocol_id.id = TCP
    p.tcp.src_port = 1
    # field 400, wire type 2 (length-delimited): varint key 400 << 3 | 2 = 3202 -> 0x82 0x19
    assert b"\x82\x19" in p.SerializeToString()
    ip = msg.Ip4(src_ip=0xC6120001)
    assert ip.SerializeToString() == b"\x75" + struct.pack("<I", 0xC6120001)  # fixed32 field 14


def test_proto_reader_reports_the_line_of_a_mistake():
    with pytest.raises(rpc.ProtoSyntaxError, match=r"x.proto:3: unknown type 'Nope'"):
        parse_proto("package P;\nmessage A {\n  optional Nope n = 1;\n}\n", "x.proto")
    with pytest.raises(rpc.ProtoSyntaxError, match=r"x.proto:2: expected optional"):
        parse_proto("message A {\n  uint32 n = 1;\n}\n", "x.proto")


def test_nested_enums_and_defaults_resolve():
    fd = parse_proto(
        "package P;\nmessage A { enum E { X = 0; Y = 1; } optional E e = 1 [default = Y];"
        ' optional string s = 2 [default = "hi"]; }\n'
    )
    f = fd.message_type[0].field
    assert f[0].type_name == ".P.A.E" and f[0].default_value == "Y"
    assert f[1].default_value == "hi"


# ---- framing against a peer on a socketpair ------------------------------------------------


def frame(kind, method, body=b""):
    return struct.pack(">HHI", kind, method, len(body)) + body


def read_frame(sock):
    head = b""
    while len(head) < 8:
        head += sock.recv(8 - len(head))
    kind, method, n = struct.unpack(">HHI", head)
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    return kind, method, body


def peer(sock, script):
    """Answer each request with the frames `script` gives for it."""
    try:
        for answer in script:
            kind, method, body = read_frame(sock)
            sock.sendall(answer(method, body))
    except OSError:
        pass


def compatible(method, body):
    req = msg.VersionInfo()
    req.ParseFromString(body)
    assert req.version == "1.2.0"
    return frame(2, method, msg.VersionCompatibility(result=1).SerializeToString())


def test_notifications_are_skipped_and_errors_raised():
    ours, theirs = socket.socketpair()
    script = [
        compatible,
        lambda m, b: (
            frame(5, 3, b"\x01\x02")
            + frame(2, m, msg.PortIdList(port_id=[msg.PortId(id=4)]).SerializeToString())
        ),
        lambda m, b: frame(4, m, b"Port Id 9 invalid"),
        lambda m, b: frame(3, m, b"\xd4\xc3\xb2\xa1pcap"),
    ]
    t = threading.Thread(target=peer, args=(theirs, script), daemon=True)
    t.start()
    client = DroneClient(sock=ours, timeout=5)
    assert [p.id for p in client.call("getPortIdList").port_id] == [4]
    with pytest.raises(DroneError, match="getStats failed: Port Id 9 invalid"):
        client.call("getStats", client.port_list(9))
    assert client.call("getCaptureBuffer", msg.PortId(id=4)) == b"\xd4\xc3\xb2\xa1pcap"
    client.close()
    theirs.close()


def test_every_call_has_a_timeout():
    ours, theirs = socket.socketpair()
    with pytest.raises(DroneError, match="checkVersion"):
        DroneClient(sock=ours, timeout=0.2)  # the peer never answers
    theirs.close()


# ---- mapping: what is expressed, and what is refused ---------------------------------------


def test_a_flow_of_n_packets_is_one_stream_of_n_packets_at_its_rate():
    s = scenario(
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 53,"
        " rate: 2000, packets: 500, payload: {size: 18}}\n"
    )
    plan = build_plan(s, 1)
    assert plan.transmit_mode == "sequential" and not plan.continuous and plan.packets == 500
    st = plan.streams[0].stream
    assert st.control.num_packets == 500 and st.control.packets_per_sec == 2000
    assert st.core.frame_len == 14 + 20 + 8 + 18 + 4
    assert st.control.next == msg.StreamControl.e_nw_stop
    ip = proto_of(st, IP4).ip4
    assert ip.src_ip == 0xC6120001 and ip.dst_ip == 0xC6130001 and ip.ttl == 64
    assert proto_of(st, UDP).udp.dst_port == 53


def test_meta_flow_modes_become_ostinato_modes():
    s = scenario(
        "  - protocol: tcp\n    src: {cidr: 198.18.0.250/24, mode: increment}\n"
        "    dst: 198.19.0.0/28\n    src_port: random\n"
        "    dst_port: {range: 1000-1009, mode: increment}\n"
        "    rate: 1000\n    packets: 1\n    repeat: {count: 100, period: 1ms}\n"
    )
    st = build_plan(s, 1).streams[0]
    assert st.packets == 100 and st.pps == 1000
    ip = proto_of(st.stream, IP4).ip4
    assert ip.src_ip_mode == msg.Ip4.e_im_inc_host and ip.src_ip_count == 256
    assert ip.src_ip_mask == 0xFFFFFF00 and ip.src_ip == 0xC61200FA
    assert ip.dst_ip_mode == msg.Ip4.e_im_random_host and ip.dst_ip_mask == 0xFFFFFFF0
    tcp = proto_of(st.stream, TCP)
    fields = {vf.offset: vf for vf in tcp.variable_field}
    assert fields[0].mode == msg.VariableField.kRandom and fields[0].mask == 0x3FFF
    assert tcp.tcp.src_port == 49152
    assert fields[2].mode == msg.VariableField.kIncrement and (
        fields[2].value,
        fields[2].count,
    ) == (1000, 10)


def test_flows_chain_when_each_starts_as_the_previous_ends():
    s = scenario(
        "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 100, packets: 10}\n"
        "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.2, rate: 100, packets: 5,"
        " start: 100ms}\n"
    )
    plan = build_plan(s, 1)
    a, b = (x.stream for x in plan.streams)
    assert a.control.next == msg.StreamControl.e_nw_goto_next
    assert b.control.next == msg.StreamControl.e_nw_stop
    assert proto_of(a, ICMP).icmp.type == 8 and plan.packets == 15


def test_a_start_that_breaks_the_chain_is_refused_with_the_start_it_needs():
    s = scenario(
        "  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 100, packets: 10}\n"
        "  - {name: late, protocol: icmp, src: 198.18.0.1, dst: 198.19.0.2, rate: 100,"
        " packets: 5, start: 2s}\n"
    )
    with pytest.raises(GeneratorError, match=r"flows\[1\] \(late\): start: .* at 0\.1s \(got 2s\)"):
        build_plan(s, 1)


def test_meta_flow_with_several_packets_per_instance_is_refused():
    s = scenario(
        "  - {name: dns, protocol: udp, src: 198.18.0.1, dst: 198.19.0.0/24, dst_port: 53,"
        " rate: 1000, packets: 2, repeat: {count: 10, period: 10ms}}\n"
    )
    with pytest.raises(GeneratorError, match=r"flows\[0\] \(dns\): repeat: .*2 packets"):
        build_plan(s, 1)


def test_random_ports_outside_an_aligned_block_are_refused():
    s = scenario(
        "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 1000-1999,"
        " rate: 1000, packets: 1, repeat: {count: 10, period: 1ms}}\n"
    )
    with pytest.raises(GeneratorError, match=r"flows\[0\]: dst_port: .*1000-1999.*1024-1535"):
        build_plan(s, 1)


def test_concurrent_flows_need_equal_durations():
    base = "  - {protocol: udp, src: 198.18.0.1, dst: 198.19.0.1, dst_port: 9, rate: 100, "
    plan = build_plan(scenario(base + "duration: 2s}\n" + base + "duration: 2s}\n"), 1)
    assert plan.transmit_mode == "interleaved" and plan.continuous and plan.duration_s == 2
    with pytest.raises(GeneratorError, match=r"flows\[1\]: duration: .*1s, 2s"):
        build_plan(scenario(base + "duration: 2s}\n" + base + "duration: 1s}\n"), 1)
    with pytest.raises(GeneratorError, match=r"flows\[0\]: packets: concurrent"):
        build_plan(scenario(base + "packets: 5}\n" + base + "duration: 1s}\n"), 1)


def test_topspeed_is_packets_per_sec_zero_looped_for_the_duration():
    path = Path(__file__).resolve().parent.parent / "scenarios" / "seed001-ostinato.yaml"
    s = parse_scenario(path.read_text(), path.name)
    plan = build_plan(s, 1, "topspeed", 5.0)
    st = plan.streams[0].stream
    assert st.control.packets_per_sec == 0 and plan.continuous and plan.duration_s == 5.0
    assert st.control.next == msg.StreamControl.e_nw_goto_id
    assert st.core.frame_len == 64
    assert any("topspeed" in a for a in plan.approximations)


def test_without_an_endpoint_the_adapter_asks_for_a_testbed_section(tmp_path):
    s = scenario("  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 100, packets: 1}\n")
    with pytest.raises(GeneratorError, match="`testbed:` section"):
        Ostinato().prepare(s, tmp_path, 1, None)


def test_drone_missing_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no drone on PATH
    s = scenario("  - {protocol: icmp, src: 198.18.0.1, dst: 198.19.0.1, rate: 100, packets: 1}\n")
    with pytest.raises(GeneratorError, match=r"apt-get install ostinato.*bootstrap.sh test"):
        Ostinato().prepare(s, tmp_path, 1, Endpoint("nowhere", "veth0"))


def test_registered_and_accepts_a_spec():
    g = get_generator("ostinato", {"capture_port": "veth1", "unknown": 1})
    assert isinstance(g, Ostinato) and g.capture_port == "veth1"
