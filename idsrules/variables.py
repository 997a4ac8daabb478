"""The rule variables the testbed defines: address groups and port groups.

Rules name addresses and ports through variables (``$HOME_NET``, ``$HTTP_PORTS``). These are the
ones Suricata's configuration declares (`testbed.ids.suricata.write_config` writes them into
``suricata.yaml``), so a translated rule may use exactly the names in `CONFIG_VARS`
(`idsrules.translate`).
"""

from __future__ import annotations

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
# every variable name the configuration defines
CONFIG_VARS = frozenset({"HOME_NET", "EXTERNAL_NET", *SERVER_VARS, *PORT_GROUPS})
