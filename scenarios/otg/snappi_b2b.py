"""Drive an OTG server (such as `testbed otg serve`) with snappi: one UDP flow back to back.

    python scenarios/otg/snappi_b2b.py [--host https://127.0.0.1:8443] [--ports p1 p2]
                                       [--pcap rx.pcap] [--timeout 30]

The flow sends 1,000 frames of 128 bytes at 1,000 frames/s from the first port location to
the second, with flow metrics on and a capture on the receiving port. The script prints the
flow metrics and exits 0 when the flow sent and received exactly 1,000 frames, 1 when it did
not, and 2 when the server cannot be reached or refuses a request (one line on stderr).
Needs only snappi (pip install snappi==1.58.0); see scenarios/otg/README.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, NoReturn

import requests
import snappi

FRAMES = 1000
RATE_PPS = 1000
FRAME_SIZE = 128
FLOW = "udp-b2b"


class Refused(Exception):
    """A request the server refused or could not answer: one line for the user."""


def fail(status: int, message: str) -> NoReturn:
    print(f"snappi_b2b: {message}", file=sys.stderr)
    sys.exit(status)


def call(api: Any, what: str, method: Any, *args: Any) -> Any:
    """Run one snappi call; turn the server's OTG error (or no server) into Refused."""
    try:
        return method(*args)
    except requests.exceptions.ConnectionError:
        raise  # said once by main(), with the address
    except Exception as exc:
        error = api.from_exception(exc)
        if error is None:
            raise Refused(f"{what}: {exc}") from None
        raise Refused(f"{what}: server said {error.code}: {'; '.join(error.errors)}") from None


def build_config(api: Any, tx_location: str, rx_location: str) -> Any:
    config = api.config()
    tx = config.ports.add(name="tx", location=tx_location)
    rx = config.ports.add(name="rx", location=rx_location)
    capture = config.captures.add(name="rx-capture", port_names=[rx.name])
    capture.format = capture.PCAP

    flow = config.flows.add(name=FLOW)
    flow.tx_rx.port.tx_name = tx.name
    flow.tx_rx.port.rx_names = [rx.name]
    flow.duration.fixed_packets.packets = FRAMES
    flow.rate.pps = RATE_PPS
    flow.size.fixed = FRAME_SIZE
    flow.metrics.enable = True

    # Documentation addresses only (RFC 2544's 198.18.0.0/15, locally administered MACs).
    eth, ip, udp = flow.packet.ethernet().ipv4().udp()
    eth.src.value = "02:00:00:00:01:01"
    eth.dst.value = "02:00:00:00:01:02"
    ip.src.value = "198.18.0.1"
    ip.dst.value = "198.18.0.2"
    udp.src_port.value = 5000
    udp.dst_port.value = 6000
    return config


def set_state(api: Any, what: str, fill: Any) -> None:
    state = api.control_state()
    fill(state)
    warning = call(api, what, api.set_control_state, state)
    for text in warning.warnings or []:
        print(f"snappi_b2b: warning: {text}", file=sys.stderr)


def flow_metric(api: Any) -> Any:
    request = api.metrics_request()
    request.flow.flow_names = [FLOW]
    for metric in call(api, "get metrics", api.get_metrics, request).flow_metrics:
        if metric.name == FLOW:
            return metric
    raise Refused(f"get metrics: the server's answer has no metrics for flow {FLOW!r}")


def run(args: argparse.Namespace) -> int:
    api = snappi.api(location=args.host, verify=False, version_check=True)
    config = build_config(api, *args.ports)
    warning = call(api, "set config", api.set_config, config)
    for text in warning.warnings or []:
        print(f"snappi_b2b: warning: {text}", file=sys.stderr)

    def start_capture(s: Any) -> None:
        s.port.capture.state = s.port.capture.START

    def start_transmit(s: Any) -> None:
        s.traffic.flow_transmit.state = s.traffic.flow_transmit.START

    def stop_capture(s: Any) -> None:
        s.port.capture.state = s.port.capture.STOP

    set_state(api, "start capture", start_capture)
    set_state(api, "start transmit", start_transmit)
    deadline = time.monotonic() + args.timeout
    metric = flow_metric(api)
    while metric.transmit != metric.STOPPED or metric.frames_rx < metric.frames_tx:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
        metric = flow_metric(api)
    set_state(api, "stop capture", stop_capture)

    request = api.capture_request()
    request.port_name = "rx"
    pcap = call(api, "get capture", api.get_capture, request).read()
    if args.pcap:
        with open(args.pcap, "wb") as out:
            out.write(pcap)

    print(
        f"{'flow':10} {'state':8} {'frames_tx':>10} {'frames_rx':>10} {'bytes_tx':>12} {'bytes_rx':>12}"
    )
    print(
        f"{metric.name:10} {metric.transmit:8} {metric.frames_tx:>10} {metric.frames_rx:>10}"
        f" {metric.bytes_tx:>12} {metric.bytes_rx:>12}"
    )
    print(f"capture of port rx: {len(pcap)} bytes")
    if metric.frames_tx != FRAMES or metric.frames_rx != FRAMES:
        print(
            f"snappi_b2b: expected {FRAMES} frames sent and received,"
            f" got {metric.frames_tx} and {metric.frames_rx}",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="https://127.0.0.1:8443", help="the OTG server")
    parser.add_argument(
        "--ports", nargs=2, default=["p1", "p2"], metavar=("TX", "RX"), help="port locations"
    )
    parser.add_argument("--pcap", help="write the receiving port's capture to this file")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the flow")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except Refused as exc:
        fail(2, str(exc))
    except requests.exceptions.ConnectionError:
        fail(2, f"cannot reach an OTG server at {args.host} (is `testbed otg serve` running?)")
    except OSError as exc:
        fail(2, f"cannot write {args.pcap}: {exc.strerror}")


if __name__ == "__main__":
    sys.exit(main())
