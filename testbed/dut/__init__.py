"""Devices under test: IDSs driven by the testbed (Suricata)."""
