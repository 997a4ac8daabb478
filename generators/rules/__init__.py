"""Attack traffic from IDS rules: parse Snort 2.9 / Snort 3 / Suricata rules (`syntax`), give each
option its meaning (`semantics`), synthesize one session per rule into a pcap (`synth`), and measure
detection coverage with an IDS (`coverage`)."""
