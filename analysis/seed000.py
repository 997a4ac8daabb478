"""Seed 000's published numbers (flow matching: lists vs trees, hashes, sizes), in one place, each
with where the paper gives it. Line numbers are those of /work/shared/seeds/000_*.txt.

Only Table 1 prints exact rates; Figs. 2-5 are drawn without printed values, so what is kept of
them is what the text says about them. These are the seed's results, drawn beside ours, never the
expected values of our runs (a 3.6 GHz Xeon E5-1620 of 2013, STL red-black trees, a CAIDA trace).
"""

from __future__ import annotations

# Table 1 (lines ~281-287): "Bounds to the flow matching rates, CoralReef (54M elements)", Mpps.
TABLE1 = {
    "chain": {"deterministic": 58.1, "trace": 14.6, "random": 3.1},  # "List"
    "tree": {"deterministic": 44.6, "trace": 19.7, "random": 4.6},  # "Trees"
}
TABLE1_SIZE = 54_000_000  # "54M elements"
TABLE1_HASH = "coralreef"
TRACE = "CAIDA PAIX 2005-01-21 (OC48), first 150 M packets (section 3.1, line ~148)"

# Fig. 2 (section 4.1, lines ~200-215): rate grows about logarithmically with the size up to a
# threshold near 2^22 for the CAIDA trace; past it no gain (Bob) or about 20 % loss (CoralReef).
FIG2_THRESHOLD_LOG2 = 22
FIG2_LARGE_LOSS = 0.20
# Fig. 3 (section 4.2, lines ~226-240): trees/lists rate ratio: up to 4 and above for very small
# tables, about 1.05 at the threshold, 1.2-1.3 for very large ones.
FIG3_POINTS = [
    (14, 4.0, "small tables: x4 and above"),
    (22, 1.05, "threshold: ~5 %"),
    (28, 1.25, "large tables: 20-30 %"),
]
# Fig. 4 (section 4.3, lines ~245-262): chain-length PDFs decrease exponentially; Murmur gives the
# shortest chains, CoralReef the longest. No values printed.
FIG4_ORDER = ["murmur3_32", "lookup3", "coralreef"]  # shortest chains first
# Fig. 5 (section 4.4, lines ~268-280): the band between non-powers-of-two (upper) and powers of
# two (lower) sizes, CoralReef: the rate lost is up to x4 for lists and nearly 30 % for trees.
FIG5_LOSS = {"chain": 4.0, "tree": 1.3}
# The seed's hash names -> ours (analysis.hashing / ntgcore/native/hash.h).
HASHES = {"CoralReef": "coralreef", "Bob Jenkins": "lookup3", "Murmur": "murmur3_32"}
STRUCTS = {"lists": "chain", "trees": "tree"}
