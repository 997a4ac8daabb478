"""The rule language and attack synthesis: the bottom layer of the IDS side (`testbed.ids`).

Parse Snort 2.9 / Snort 3 / Suricata rules (`syntax`), give each option its meaning (`semantics`;
`load_rules` reads whole files), build payloads and one session per rule into a pcap (`layout`,
`regex_example`, `packets`, `synth`; FTP/SMTP/POP3/IMAP dialogues, SIP messages and DNS over TCP
framing in `dialogue`), check the sessions with Wireshark's dissectors (`dissect`, tshark through
pyshark), turn a scenario's `attacks:` section into attack sessions (`attacks`), and rewrite
Snort 3 rules in Suricata 7 syntax (`translate`). The variables that Suricata's configuration
defines are in `variables`. Nothing here runs Suricata: that is `testbed.ids.suricata`; coverage
scoring is `testbed.ids.coverage`. Imports only `ntgcore`.
"""
