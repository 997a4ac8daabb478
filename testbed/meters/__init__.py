"""Flow meters as devices under test (issue 26): the contract (base.py), the offline runner
(offline.py: a meter on a pcap), the live part (live.py), the collector (collector/) and one
folder per meter, each exposing `METER` (its testbed.meters.base.Meter) and `KIND` (its
ntgcore.parts.DutKind): softflowd/, pmacct/, nfpcapd/, argus/. pair/: the same meter at both DUTs
of method failover's VRRP pair (`failover.meter`, its part `meterpair`)."""
