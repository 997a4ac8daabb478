"""The rule variables the testbed defines: address groups and port groups.

Rules name addresses and ports through variables (``$HOME_NET``, ``$HTTP_PORTS``). These are the
ones Suricata's configuration declares (`testbed.ids.suricata.write_config` writes them into
``suricata.yaml``), so a translated rule may use exactly the names in `CONFIG_VARS`
(`idsrules.translate`).
"""

from __future__ import annotations

import ipaddress

HOME_NET = "[198.18.0.0/16,2001:db8::/48]"
EXTERNAL_NET = "!$HOME_NET"
# address groups that all stand for $HOME_NET
SERVER_VARS = (
    "HTTP_SERVERS",
    "SMTP_SERVERS",
    "SQL_SERVERS",
    "DNS_SERVERS",
    "TELNET_SERVERS",
    "AIM_SERVERS",
    "DC_SERVERS",
    "DNP3_SERVER",
    "DNP3_CLIENT",
    "MODBUS_CLIENT",
    "MODBUS_SERVER",
    "ENIP_CLIENT",
    "ENIP_SERVER",
)
PORT_GROUPS = {
    "HTTP_PORTS": "80",
    "SHELLCODE_PORTS": "!80",
    "ORACLE_PORTS": "1521",
    "SSH_PORTS": "22",
    "DNP3_PORTS": "20000",
    "MODBUS_PORTS": "502",
    "FILE_DATA_PORTS": "[$HTTP_PORTS,110,143]",
    "FTP_PORTS": "21",
    "GENEVE_PORTS": "6081",
    "VXLAN_PORTS": "4789",
    "TEREDO_PORTS": "3544",
}
# the only addresses live packets may carry (the network-safety rules, docs/scenario.md): the
# benchmarking range of RFC 2544 and the IPv6 documentation prefix. A pcap may hold any address.
TEST_NETS = (ipaddress.ip_network("198.18.0.0/15"), ipaddress.ip_network("2001:db8::/32"))
# every variable name the configuration defines
CONFIG_VARS = frozenset({"HOME_NET", "EXTERNAL_NET", *SERVER_VARS, *PORT_GROUPS})


def in_test_ranges(address: str) -> bool:
    """Whether `address` lies in TEST_NETS (may be sent live)."""
    a = ipaddress.ip_address(address)
    return any(a.version == n.version and a in n for n in TEST_NETS)
