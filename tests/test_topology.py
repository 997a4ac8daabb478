"""testbed.topology: the YAML model and its checks, and apply/remove on real network namespaces."""

import json
import secrets
import shutil
import subprocess
import sys
import textwrap

import pytest

from testbed.endpoints.netns.topology import TopologyError, load_topology, parse_topology

_needs_ip_tc = pytest.mark.skipif(
    shutil.which("ip") is None or shutil.which("tc") is None,
    reason="creating network namespaces needs root and iproute2 (ip, tc)",
)


def needs_netns(test):
    """root (the live lane) and iproute2's ip and tc."""
    return pytest.mark.usefixtures("root")(_needs_ip_tc(test))


def netns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.fixture
def topo():
    """The packaged default topology under a fresh name; whatever happens, removed afterwards."""
    t = load_topology("default").renamed(f"ntgt-{secrets.token_hex(3)}")
    try:
        yield t
    finally:
        t.remove()


def write(tmp_path, text: str):
    path = tmp_path / "topo.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
name: t1
namespaces: [gen, dut]
links:
  - a: {ns: gen, iface: gen0, address: 198.18.0.1/24}
    b: {ns: dut, iface: dut0, address: 198.18.0.2/24}
"""


# -- the model ---------------------------------------------------------------------------------


def test_default_topology_names_namespaces_and_interfaces():
    t = load_topology("default")
    assert [t.netns(r) for r in t.namespaces] == ["ntg-gen", "ntg-dut", "ntg-tap"]
    assert t.iface("dut") == ["dut0", "mir0"]
    assert t.exec_argv("gen", "ip", "link") == ["ip", "netns", "exec", "ntg-gen", "ip", "link"]
    r = t.renamed("ntg-1a2b")
    assert r.netns("tap") == "ntg-1a2b-tap" and r.links == t.links and r.mirrors == t.mirrors


def test_file_inline_and_relative_path_load_the_same(tmp_path):
    path = write(tmp_path, GOOD)
    from_file = load_topology(path)
    assert load_topology("topo.yaml", base_dir=tmp_path) == from_file
    assert load_topology(from_file.describe()) == from_file


def test_bad_interface_name_is_reported_with_its_line(tmp_path):
    path = write(tmp_path, GOOD.replace("iface: dut0", "iface: this-is-sixteen-c"))
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    assert exc.value.problems == [
        f"{path}:5: links[0].b.iface: interface names are 1-15 characters of A-Z a-z 0-9 _ . - "
        f"(not `lo`) (got 'this-is-sixteen-c')"
    ]


@pytest.mark.parametrize("kind", ["dev-zero", "not-utf8", "directory"])
def test_a_topology_file_is_read_bounded_and_named(tmp_path, kind):
    """/dev/zero was read until memory ran out (its st_size is 0); bytes that are not UTF-8 and a
    directory are named, with the line, as a topology problem."""
    path = {"dev-zero": "/dev/zero", "not-utf8": tmp_path / "t.yaml", "directory": tmp_path}[kind]
    if kind == "not-utf8":
        path.write_bytes(GOOD.encode() + b"# caf\xe9\n")
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    (problem,) = exc.value.problems
    assert (
        problem.startswith(f"{path}")
        and {
            "dev-zero": "longer than 32.0 MiB",
            "not-utf8": "not UTF-8",
            "directory": "is a directory",
        }[kind]
        in problem
    ), problem


def test_address_outside_the_benchmark_ranges_is_refused(tmp_path):
    path = write(tmp_path, GOOD.replace("198.18.0.1/24", "10.1.2.3/24"))
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    (problem,) = exc.value.problems
    assert problem.startswith(
        f"{path}:4: links[0].a.address: addresses must lie in 198.18.0.0/15 or 2001:db8::/32"
    )


def test_link_to_an_undeclared_namespace_is_reported_with_its_line(tmp_path):
    path = write(tmp_path, GOOD.replace("b: {ns: dut,", "b: {ns: ids,"))
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    assert exc.value.problems == [
        f"{path}:5: links[0].b.ns: namespace `ids` is not declared; declared: gen, dut "
        f"(add it to `namespaces`)"
    ]


def test_mirror_and_duplicate_problems_each_get_a_line(tmp_path):
    text = GOOD + textwrap.dedent("""\
          - a: {ns: gen, iface: gen0}
            b: {ns: dut, iface: d1, address: 198.18.0.2/24}
        mirrors:
          - {from: dut0, to: nope0, ns: dut}
        """)
    path = write(tmp_path, text)
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    assert [p.split(": ")[0:2] for p in exc.value.problems] == [
        [f"{path}:6", "links[1].a.iface"],
        [f"{path}:7", "links[1].b.address[0]"],
        [f"{path}:9", "mirrors[0].to"],
    ]


def test_unknown_key_suggests_the_known_one(tmp_path):
    path = write(tmp_path, GOOD.replace("namespaces:", "namespace:"))
    with pytest.raises(TopologyError) as exc:
        load_topology(path)
    assert (
        f"{path}:2: namespace: unknown key `namespace`; did you mean `namespaces`?"
        in exc.value.problems
    )


def test_offloads_accept_yaml_off_and_refuse_unknown_features():
    base = {"name": "t", "namespaces": ["a"], "links": []}
    assert parse_topology({**base, "offloads": {"tso": False, "gro": "on"}}).offloads == {
        "tso": False,
        "gro": True,
    }
    with pytest.raises(TopologyError, match="unknown offload `tsoo`"):
        parse_topology({**base, "offloads": {"tsoo": False}})


def test_renamed_checks_the_new_name():
    with pytest.raises(TopologyError, match=r"renamed:1: name: 1-32 characters of a-z 0-9"):
        load_topology("default").renamed("Bad_Name")


def test_cli_reports_bad_input_without_traceback(tmp_path):
    path = write(tmp_path, GOOD.replace("198.18.0.2/24", "192.168.1.1/24"))
    p = subprocess.run(
        [sys.executable, "-m", "testbed.topology", "show", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stderr.startswith(f"{path}:5: links[0].b.address: addresses must lie in")
    assert "Traceback" not in p.stderr


# -- live, on real namespaces ------------------------------------------------------------------


@needs_netns
def test_apply_builds_isolated_namespaces_and_remove_deletes_them(topo):
    names = {topo.netns(r) for r in topo.namespaces}
    assert topo.apply()
    assert names <= netns_list()
    for role in topo.namespaces:
        ns = topo.netns(role)
        links = json.loads(
            subprocess.run(
                ["ip", "-n", ns, "-j", "link", "show"], capture_output=True, text=True, check=True
            ).stdout
        )
        assert sorted(link["ifname"] for link in links) == sorted(["lo", *topo.iface(role)])
        assert all("UP" in link["flags"] for link in links)
        routes = subprocess.run(
            ["ip", "-n", ns, "route", "show", "default"], capture_output=True, text=True
        )
        assert routes.stdout.strip() == ""
        sysctl = subprocess.run(
            topo.exec_argv(
                role, "sysctl", "-n", "net.ipv4.ip_forward", "net.ipv6.conf.all.disable_ipv6"
            ),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert sysctl == ["0", "1"]
    c = topo.counters("gen", "gen0")
    assert set(c) == {
        "rx_packets",
        "rx_bytes",
        "rx_dropped",
        "tx_packets",
        "tx_bytes",
        "tx_dropped",
    }
    assert all(isinstance(v, int) and v >= 0 for v in c.values())
    assert topo.state()["namespaces"]["dut"]["interfaces"]["dut0"]["address"] == ["198.18.0.2/24"]
    assert len(topo.remove()) == 3
    assert not names & netns_list()


@needs_netns
def test_apply_and_remove_are_idempotent(topo):
    plan = topo.apply(dry_run=True)
    assert (
        plan and not {topo.netns(r) for r in topo.namespaces} & netns_list()
    )  # a dry run makes nothing
    first = topo.apply()
    assert "create veth {}/gen0 <-> {}/dut0".format(topo.netns("gen"), topo.netns("dut")) in first
    assert topo.apply() == []
    assert topo.apply(dry_run=True) == []
    assert topo.remove() and topo.remove() == []


@needs_netns
def test_apply_repairs_only_what_drifted(topo):
    topo.apply()
    gen, dut = topo.netns("gen"), topo.netns("dut")
    for argv in (
        ["ip", "-n", gen, "link", "set", "gen0", "down"],
        ["ip", "-n", dut, "addr", "del", "198.18.0.2/24", "dev", "dut0"],
        ["ip", "-n", dut, "addr", "add", "198.18.9.9/24", "dev", "dut0"],
        topo.exec_argv("dut", "ethtool", "-K", "mir0", "gso", "on"),
        topo.exec_argv("dut", "tc", "qdisc", "del", "dev", "dut0", "clsact"),
    ):
        subprocess.run(argv, check=True, capture_output=True)
    assert sorted(topo.apply()) == sorted(
        [
            f"{gen}/gen0: up",
            f"{dut}/dut0: delete address 198.18.9.9/24",
            f"{dut}/dut0: add address 198.18.0.2/24",
            f"{dut}/mir0: ethtool -K gso off",
            f"{dut}/dut0: add clsact qdisc",
            f"{dut}/dut0: mirror ingress to mir0",
        ]
    )
    assert topo.apply() == []


@needs_netns
def test_ipv6_is_on_only_where_an_ipv6_address_is_given():
    t = parse_topology(
        {
            "name": f"ntgt-{secrets.token_hex(3)}",
            "namespaces": ["a", "b"],
            "links": [
                {
                    "a": {"ns": "a", "iface": "a0", "address": "2001:db8::1/64"},
                    "b": {"ns": "b", "iface": "b0"},
                }
            ],
        }
    )
    with t.up():
        flags = [
            subprocess.run(
                t.exec_argv(r, "sysctl", "-n", "net.ipv6.conf.all.disable_ipv6"),
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            for r in ("a", "b")
        ]
        assert flags == ["0", "1"]
        assert t.state()["namespaces"]["a"]["interfaces"]["a0"]["address"] == ["2001:db8::1/64"]
        assert t.apply() == []
    assert not {t.netns("a"), t.netns("b")} & netns_list()


SEND = """
import socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = bytes.fromhex("020000000002" "020000000001" "88b5") + bytes(50)   # local experimental EtherType
for _ in range(int(sys.argv[2])):
    s.send(frame)
"""


@needs_netns
def test_mirror_copies_every_frame_arriving_at_the_dut_to_the_tap(topo):
    with topo.up():
        where = {"gen": "gen0", "dut": "dut0", "tap": "tap0"}
        before = {r: topo.counters(r, i) for r, i in where.items()}
        subprocess.run(
            topo.exec_argv("gen", sys.executable, "-c", SEND, "gen0", "5"), check=True, timeout=30
        )
        after = {r: topo.counters(r, i) for r, i in where.items()}
        delta = {
            r: (
                after[r]["tx_packets"] - before[r]["tx_packets"],
                after[r]["rx_packets"] - before[r]["rx_packets"],
            )
            for r in where
        }
        assert delta == {"gen": (5, 0), "dut": (0, 5), "tap": (0, 5)}
        assert after["tap"]["rx_bytes"] - before["tap"]["rx_bytes"] == 5 * 64


@needs_netns
def test_up_removes_everything_when_the_body_fails(topo):
    with pytest.raises(KeyboardInterrupt):
        with topo.up():
            assert topo.netns("gen") in netns_list()
            raise KeyboardInterrupt
    assert not {topo.netns(r) for r in topo.namespaces} & netns_list()


@needs_netns
def test_cli_up_show_down(tmp_path):
    name = f"ntgt-{secrets.token_hex(3)}"
    run = [sys.executable, "-m", "testbed.topology"]
    try:
        up = subprocess.run(
            [*run, "up", "default", "--name", name, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert up.returncode == 0, up.stderr
        assert f"create namespace {name}-gen" in json.loads(up.stdout)
        show = subprocess.run(
            [*run, "show", "default", "--name", name], capture_output=True, text=True, timeout=60
        )
        assert f"{name}-tap (tap): present" in show.stdout and "tap0: up mtu 1500" in show.stdout
        down = subprocess.run(
            [*run, "down", "default", "--name", name], capture_output=True, text=True, timeout=60
        )
        assert down.returncode == 0 and down.stdout.count("delete namespace") == 3
    finally:
        load_topology("default").renamed(name).remove()
    assert not {f"{name}-{r}" for r in ("gen", "dut", "tap")} & netns_list()


@needs_netns
def test_a_namespace_made_by_someone_else_is_never_adopted_or_deleted():
    import subprocess as sp

    from testbed.endpoints.netns.topology import TopologyCommandError

    t = load_topology("pair").renamed(f"ntgt-{secrets.token_hex(3)}")
    theirs = t.netns("gen")
    sp.run(["ip", "netns", "add", theirs], check=True)  # same name, not ours
    try:
        with pytest.raises(TopologyCommandError, match="was not made by ntg-testbed"):
            t.apply()
        assert t.netns("peer") not in netns_list()  # refused before making anything
        with pytest.raises(TopologyCommandError, match="left alone"):
            t.remove()
        assert theirs in netns_list()
    finally:
        sp.run(["ip", "netns", "del", theirs], check=False)
