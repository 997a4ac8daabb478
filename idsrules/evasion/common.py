"""What the variant classes share: seeded junk of the same length and checksum sum as the bytes
it stands in for, and the stream split points."""

from __future__ import annotations

import random
import struct

import numpy as np

from ntgcore import packets as P

JUNK_ALPHABET = b"qzjxkvwy"  # letters rare in rule contents, so junk does not spell another rule
_LETTERS = bytes(JUNK_ALPHABET[i % len(JUNK_ALPHABET)] for i in range(256))  # a byte -> a letter
_NEXT = np.arange(256, dtype=np.uint8)
for _i, _c in enumerate(JUNK_ALPHABET):
    _NEXT[_c] = JUNK_ALPHABET[(_i + 1) % len(JUNK_ALPHABET)]
_NEXT_BYTES = _NEXT.tobytes()
NUMPY_FROM = 512  # bytes of junk from which numpy compares faster than a loop


def rng(seed: int, *salt: object) -> random.Random:
    """The one random source of a variant: the same seed and salt, the same draws."""
    return random.Random(repr((seed, *salt)))


def junk(real: bytes, seed: int, *, same_sum: bool = False) -> bytes:
    """Bytes as long as `real` that differ from it at every position (from JUNK_ALPHABET). With
    `same_sum` (`real` starting at an even offset of its packet) the 16-bit one's-complement sum
    is kept, so a fragment carrying the junk leaves the transport checksum valid: the junk is a
    datagram a host accepts when it keeps those bytes (one's complement: a sum of 0x0000 and one
    of 0xFFFF are the same zero, and letters alone never sum to 0x0000)."""
    r = rng(seed, "junk", len(real))
    drawn = r.randbytes(len(real)).translate(_LETTERS)
    if len(real.translate(None, JUNK_ALPHABET)) == len(real):
        out = bytearray(drawn)  # no junk letter in `real`: no position where they clash
    elif len(real) < NUMPY_FROM:
        out = bytearray(drawn)
        for i, (d, c) in enumerate(zip(drawn, real)):
            if d == c:
                out[i] = _NEXT_BYTES[d]  # the next letter: it differs from the real byte there
    else:
        a = np.frombuffer(drawn, dtype=np.uint8).copy()
        clash = a == np.frombuffer(real, dtype=np.uint8)
        a[clash] = _NEXT[a[clash]]
        out = bytearray(a.tobytes())
    if not same_sum or len(out) < 4:
        return bytes(out)
    want = P.checksum(real)
    at = (len(out) - 2) & ~1  # the last whole 16-bit word carries the correction
    for _ in range(64):
        out[at : at + 2] = b"\0\0"
        total = (~want & 0xFFFF) + P.checksum(bytes(out))  # sum(real) - sum(the rest)
        word = (total & 0xFFFF) + (total >> 16)
        out[at : at + 2] = struct.pack("!H", word & 0xFFFF)
        same = P.checksum(bytes(out)) % 0xFFFF == want % 0xFFFF  # 0 and 0xFFFF: both zero
        if out[at] != real[at] and out[at + 1] != real[at + 1] and same:
            return bytes(out)
        i = r.randrange(0, at)  # another junk byte ahead of it, another correction word
        out[i] = r.choice([c for c in JUNK_ALPHABET if c != real[i] and c != out[i]])
    raise ValueError("no junk of the same checksum sum in 64 draws")
