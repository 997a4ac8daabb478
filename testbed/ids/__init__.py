"""The IDS side of the testbed, in three layers (a lower layer never imports a higher one).

1. `idsrules`: the rule language and attack synthesis. Rule syntax (`syntax`), the
   meaning of the options (`semantics`, with `load_rules`), the variables Suricata's
   configuration defines (`variables`), payload layout and regex examples (`layout`,
   `regex_example`), packets and pcap writing (`packets`), one session per rule (`synth`, with
   the text-protocol dialogues of `dialogue`), the dissector check of the sessions (`dissect`,
   tshark through pyshark), the scenario's `attacks:` section (`attacks`: selection,
   `write_attacks`, `merge_pcaps`) and the Snort 3 -> Suricata 7 text translation (`translate`).
   It imports only `ntgcore`. Beside it, `testbed.ids.report`: the HTML form of the reports'
   Markdown; it imports nothing; and `testbed.ids.regression`: a coverage document compared with
   a baseline one per sid (`compare_coverage`, pure) and the allow file; it imports `ntgcore`.
2. `testbed.ids.suricata`: the Suricata driver: configuration, command line, offline runs (the
   one runner, `run_offline`, with the addresses, checksum mode and configuration as parameters),
   ``suricata -T`` load checks (`check_load`, `translate_file`), the live process
   (`LiveSuricata`), its version, and the DUTs of a comparison (`Dut`, `make_duts`: a binary and a
   configuration each). It imports `rules` (for the variables and the translation
   report) and `ntgcore`. Beside it, `testbed.ids.expect`: expect files (checks on EVE events,
   suricata-verify's shape) and their evaluation; it imports `ntgcore`.
3. `testbed.ids.coverage`: detection coverage: `score`, `run_coverage`, `run_coverage_duts`
   (several DUTs on the same sessions), `attack_coverage` and the reports (and the `coverage` run
   table). It imports `rules`, `suricata`, `report`, `regression`, `analysis.capture`,
   `analysis.tables` and
   `ntgcore` (the benign background load comes from the flowengine generator through
   `ntgcore.generator.get_generator`). Beside it, independent of it, `testbed.ids.detect`: what
   Suricata detects in a capture the user has (`testbed detect`, docs/detect.md).
"""
