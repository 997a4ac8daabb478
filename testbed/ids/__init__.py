"""The IDS side of the testbed, in three layers (a lower layer never imports a higher one).

1. `testbed.ids.rules`: the rule language and attack synthesis. Rule syntax (`syntax`), the
   meaning of the options (`semantics`, with `load_rules`), the variables Suricata's
   configuration defines (`variables`), payload layout and regex examples (`layout`,
   `regex_example`), packets and pcap writing (`packets`), one session per rule (`synth`), the
   scenario's `attacks:` section (`attacks`: selection, `write_attacks`, `merge_pcaps`) and the
   Snort 3 -> Suricata 7 text translation (`translate`). It imports only `ntgcore`.
2. `testbed.ids.suricata`: the Suricata driver: configuration, command line, offline runs,
   ``suricata -T`` load checks (`check_load`, `translate_file`), the live process
   (`LiveSuricata`) and its version. It imports `rules` (for the variables and the translation
   report) and `ntgcore`.
3. `testbed.ids.coverage`: detection coverage: `score`, `run_coverage`, `attack_coverage` and
   the reports. It imports `rules`, `suricata`, `analysis.capture` and `ntgcore` (the benign
   background load comes from the flowengine generator through `ntgcore.generator.get_generator`).
"""
