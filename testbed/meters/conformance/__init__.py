"""The flow meters' conformance suite: traffic patterns that expose the known artifacts of flow
export, as data folders (patterns/<name>/pattern.yaml and expected.yaml), their captures
(patterns.py) and the meter x pattern matrix (matrix.py)."""

from .matrix import MATRIX_SCHEMA, run_matrix
from .patterns import (
    Pattern,
    PatternError,
    expected_records,
    load_pattern,
    pattern_folders,
    write_pcap,
)

__all__ = [
    "MATRIX_SCHEMA",
    "Pattern",
    "PatternError",
    "expected_records",
    "load_pattern",
    "pattern_folders",
    "run_matrix",
    "write_pcap",
]
