"""The flow-key hashes of ntgcore/native/hash.h against their published test vectors,
and the library's own promises (bulk = single, tuple = its packed key, CRC32C's two paths equal,
the Toeplitz tables equal the bit-by-bit definition, the symmetric key symmetric).

Where each vector comes from is said beside it. SMHasher's "verification value" is the published
check of a whole function: key i is the bytes 0..i-1 hashed with seed 256-i, for i in 0..255, the
256 results are hashed with seed 0, and the first four bytes of that (little-endian) are the value
(Appleby's SMHasher, main.cpp's table; SMHasher3 for wyhash).
"""

from __future__ import annotations

import os
import socket
import struct

import numpy as np
import pytest

from analysis import hashing
from ntgcore.errors import BadInput


@pytest.fixture(scope="module", autouse=True)
def _lib(hashlib_path):
    return hashlib_path


def h(name: str, data: bytes, seed: int = 0) -> int:
    return hashing.hash_bytes(name, data, seed)


def smhasher_verification(fn, bits: int) -> int:
    """SMHasher's VerificationTest: FN(data, seed) -> an int of BITS bits."""
    width = bits // 8
    key = bytes(range(256))
    out = b"".join(fn(key[:i], 256 - i).to_bytes(width, "little") for i in range(256))
    return int.from_bytes(fn(out, 0).to_bytes(width, "little")[:4], "little")


# --- CRC32C --------------------------------------------------------------------------------------

# The check value of CRC-32C ("CRC-32/ISCSI" in the reveng CRC catalogue) and the four 32-byte
# examples of RFC 3720 (iSCSI), appendix B.4.
CRC32C_VECTORS = [
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize("name", ["crc32c", "crc32c_sw", "crc32c_hw"])
@pytest.mark.parametrize("data,want", CRC32C_VECTORS)
def test_crc32c_matches_the_published_check_values(name, data, want):
    if name == "crc32c_hw" and not hashing.crc32c_hw_available():
        pytest.skip("this CPU has no SSE4.2: only the portable CRC32C path exists here")
    assert h(name, data) == want


def test_crc32c_seed_continues_a_crc_over_the_bytes_before():
    assert h("crc32c", b"56789", h("crc32c", b"1234")) == 0xE3069283


def test_crc32c_hardware_and_portable_paths_agree_on_random_keys():
    if not hashing.crc32c_hw_available():
        pytest.skip("this CPU has no SSE4.2: only the portable CRC32C path exists here")
    rng = np.random.default_rng(7)
    for length in list(range(0, 40)) + [63, 64, 65, 200, 1000]:
        keys = rng.integers(0, 256, size=(50, length), dtype=np.uint8)
        seed = int(rng.integers(0, 2**32))
        assert np.array_equal(
            hashing.hash_keys("crc32c_hw", keys, seed), hashing.hash_keys("crc32c_sw", keys, seed)
        ), length


# --- FNV-1a, lookup3, Murmur3, SuperFastHash, wyhash -------------------------------------------


# The FNV reference test suite (Noll, isthe.com/chongo/tech/comp/fnv, test_fnv.c: "", "a", "foobar").
@pytest.mark.parametrize(
    "name,data,want",
    [
        ("fnv1a_32", b"", 0x811C9DC5),
        ("fnv1a_32", b"a", 0xE40C292C),
        ("fnv1a_32", b"foobar", 0xBF9CF968),
        ("fnv1a_64", b"", 0xCBF29CE484222325),
        ("fnv1a_64", b"a", 0xAF63DC4C8601EC8C),
        ("fnv1a_64", b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a_matches_the_fnv_test_suite(name, data, want):
    assert h(name, data) == want


# Bob Jenkins' lookup3.c, driver5(): hashlittle("", 0, 0), ("", 0, 0xdeadbeef), and "Four score
# and seven years ago" with initval 0 and 1.
@pytest.mark.parametrize(
    "data,seed,want",
    [
        (b"", 0, 0xDEADBEEF),
        (b"", 0xDEADBEEF, 0xBD5B7DDE),
        (b"Four score and seven years ago", 0, 0x17770551),
        (b"Four score and seven years ago", 1, 0xCD628161),
    ],
)
def test_lookup3_matches_jenkins_driver5(data, seed, want):
    assert h("lookup3", data, seed) == want


# MurmurHash3_x86_32 vectors as published with the algorithm's ports (e.g. the Wikipedia
# article's and the test vectors collected in the StackOverflow "MurmurHash3 test vectors"
# answer): the empty key with seeds 0, 1 and 0xffffffff, four zero bytes, "Hello, world!" with
# seed 1234, and the quick brown fox.
@pytest.mark.parametrize(
    "data,seed,want",
    [
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"", 0xFFFFFFFF, 0x81F16F39),
        (b"\0\0\0\0", 0, 0x2362F9DE),
        (b"Hello, world!", 1234, 0xFAF6CDB3),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
    ],
)
def test_murmur3_32_matches_published_vectors(data, seed, want):
    assert h("murmur3_32", data, seed) == want


def test_murmur3_x64_128_matches_the_quick_brown_fox():
    # Published with the algorithm's ports (e.g. the mmh3 and Guava docs): seed 0.
    got = hashing.murmur3_128(b"The quick brown fox jumps over the lazy dog")
    assert got == (0xE34BBC7BBC071B6C, 0x7A433CA9C49A9347)
    assert h("murmur3_128", b"The quick brown fox jumps over the lazy dog") == got[0]


def test_murmur3_lookup3_and_wyhash_pass_their_smhasher_verification_values():
    assert smhasher_verification(lambda d, s: h("murmur3_32", d, s), 32) == 0xB0F57EE3
    assert smhasher_verification(lambda d, s: h("lookup3", d, s), 32) == 0x3D83917A
    both = lambda d, s: int.from_bytes(
        b"".join(v.to_bytes(8, "little") for v in hashing.murmur3_128(d, s)),
        "little",
    )
    assert smhasher_verification(both, 128) == 0x6384BA69
    assert smhasher_verification(lambda d, s: h("wyhash", d, s), 64) == 0x9DAE7DD3  # SMHasher3


def test_superfasthash_passes_its_smhasher_verification_value():
    # SMHasher's copy starts from 0 and ignores the seed; ours starts from len + seed (seed 0:
    # Hsieh's original, which starts from the length), so seed = -len gives SMHasher's function.
    smhasher_copy = lambda d, s: h("superfasthash", d, (-len(d)) % 2**32)
    assert smhasher_verification(smhasher_copy, 32) == 0x980ACD1D


def test_superfasthash_of_nothing_is_zero_as_in_the_original():
    assert h("superfasthash", b"") == 0


# wyhash final v4.2 with its default secret: the seven messages of its test_vector.cpp hashed
# with seed = their index (the values SMHasher3's wyhash self-test lists).
WYHASH_VECTORS = [
    (b"", 0x93228A4DE0EEC5A2),
    (b"a", 0xC5BAC3DB178713C4),
    (b"abc", 0xA97F2F7B1D9B3314),
    (b"message digest", 0x786D1F1DF3801DF4),
    (b"abcdefghijklmnopqrstuvwxyz", 0xDCA5A8138AD37C87),
    (b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", 0xB9E734F117CFAF70),
    (b"1234567890" * 8, 0x6CC5EAB49A92D617),
]


@pytest.mark.parametrize("seed,vector", list(enumerate(WYHASH_VECTORS)))
def test_wyhash_matches_its_test_vectors(seed, vector):
    data, want = vector
    assert h("wyhash", data, seed) == want


# XXH3-64, seeded: xxHash's own sanity table (cli/xsum_sanity_check.c, XSUM_XXH3_testdata: the
# sanity buffer, byte i = the top byte of PRIME32 * PRIME64**i, with seeds 0 and PRIME64), every
# length class from empty to three 1024-byte blocks with an overlapping last stripe.
XSUM_PRIME32, XSUM_PRIME64 = 2654435761, 0x9E3779B185EBCA8D
XXH3_SANITY = [
    (0, 0, 0x2D06800538D394C2),
    (0, XSUM_PRIME64, 0xA8A6B918B2F0364A),
    (1, 0, 0xC44BDFF4074EECDB),
    (1, XSUM_PRIME64, 0x032BE332DD766EF8),
    (6, 0, 0x27B56A84CD2D7325),
    (6, XSUM_PRIME64, 0x84589C116AB59AB9),
    (12, 0, 0xA713DAF0DFBB77E7),
    (12, XSUM_PRIME64, 0xE7303E1B2336DE0E),
    (24, 0, 0xA3FE70BF9D3510EB),
    (24, XSUM_PRIME64, 0x850E80FC35BDD690),
    (48, 0, 0x397DA259ECBA1F11),
    (48, XSUM_PRIME64, 0xADC2CBAA44ACC616),
    (80, 0, 0xBCDEFBBB2C47C90A),
    (80, XSUM_PRIME64, 0xC6DD0CB699532E73),
    (195, 0, 0xCD94217EE362EC3A),
    (195, XSUM_PRIME64, 0xBA68003D370CB3D9),
    (403, 0, 0xCDEB804D65C6DEA4),
    (403, XSUM_PRIME64, 0x6259F6ECFD6443FD),
    (512, 0, 0x617E49599013CB6B),
    (512, XSUM_PRIME64, 0x3CE457DE14C27708),
    (2048, 0, 0xDD59E2C3A5F038E0),
    (2048, XSUM_PRIME64, 0x66F81670669ABABC),
    (2099, 0, 0xC6B9D9B3FC9AC765),
    (2099, XSUM_PRIME64, 0x184F316843663974),
    (2240, 0, 0x6E73A90539CF2948),
    (2240, XSUM_PRIME64, 0x757BA8487D1B5247),
    (2367, 0, 0xCB37AEB9E5D361ED),
    (2367, XSUM_PRIME64, 0xD2DB3415B942B42A),
]


def xsum_buffer(n: int) -> bytes:
    out, g = bytearray(), XSUM_PRIME32
    for _ in range(n):
        out.append(g >> 56)
        g = (g * XSUM_PRIME64) % 2**64
    return bytes(out)


@pytest.mark.parametrize("length,seed,want", XXH3_SANITY)
def test_xxh3_matches_xxhash_sanity_table(length, seed, want):
    assert h("xxh3", xsum_buffer(length), seed) == want


def test_xxh3_matches_llvms_vectors_and_short_strings():
    # LLVM's unittests/Support/xxhashTest.cpp (xxh3 test): a xorshift64 buffer, prefixes of it.
    buf, x = bytearray(), 1
    for _ in range(2243):
        x ^= (x << 13) % 2**64
        x ^= x >> 7
        x ^= (x << 17) % 2**64
        buf.append(x & 0xFF)
    for length, want in [
        (3, 0x6EA2D59ACA5C3778),
        (8, 0xABC1413DA6CD0209),
        (9, 0x8BC89400BFED51F6),
        (17, 0xED4BE912BA5F836D),
        (129, 0xBC7138129BF065DA),
        (2243, 0x0979F786A24EDDE7),
    ]:
        assert h("xxh3", bytes(buf[:length])) == want, length
    assert h("xxh3", b"a") == 0xE6C632B61E964E1F and h("xxh3", b"abc") == 0x78AF5F94892F3950


# --- Toeplitz ------------------------------------------------------------------------------------

MS_KEY = bytes.fromhex(
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa"
)

# Microsoft, "RSS hashing functions" / "Verifying the RSS hash calculation": destination, source,
# the hash of the addresses alone and with the TCP ports. The input is source address,
# destination address, source port, destination port.
MS_IPV4 = [
    ("161.142.100.80", 1766, "66.9.149.187", 2794, 0x323E8FC2, 0x51CCC178),
    ("65.69.140.83", 4739, "199.92.111.2", 14230, 0xD718262A, 0xC626B0EA),
    ("12.22.207.184", 38024, "24.19.198.95", 12898, 0xD2D0A5DE, 0x5C2B394A),
    ("209.142.163.6", 2217, "38.27.205.30", 48228, 0x82989176, 0xAFC7327F),
    ("202.188.127.2", 1303, "153.39.163.191", 44251, 0x5D1809C5, 0x10E828A2),
]
MS_IPV6 = [
    ("3ffe:2501:200:3::1", 1766, "3ffe:2501:200:1fff::7", 2794, 0x2CC18CD5, 0x40207D3D),
    ("ff02::1", 4739, "3ffe:501:8::260:97ff:fe40:efab", 14230, 0x0F0C461C, 0xDDE51BBF),
    (
        "fe80::200:f8ff:fe21:67cf",
        38024,
        "3ffe:1900:4545:3:200:f8ff:fe21:67cf",
        44251,
        0x4B61E985,
        0x02D1FEEF,
    ),
]


def _addr(text: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6 if ":" in text else socket.AF_INET, text)


@pytest.mark.parametrize("row", MS_IPV4 + MS_IPV6, ids=lambda r: f"{r[2]}->{r[0]}")
def test_toeplitz_matches_microsofts_rss_verification_suite(row):
    dst, dport, src, sport, addrs_only, with_ports = row
    addrs = _addr(src) + _addr(dst)
    assert h("toeplitz_ms", addrs) == addrs_only
    assert h("toeplitz_ms", addrs + struct.pack(">HH", sport, dport)) == with_ports
    assert hashing.toeplitz_reference(MS_KEY, addrs) == addrs_only


@pytest.mark.parametrize("row", MS_IPV4 + MS_IPV6, ids=lambda r: f"{r[2]}->{r[0]}")
def test_a_tuple_hashes_to_the_nics_rss_value_without_its_protocol(row):
    dst, dport, src, sport, _, with_ports = row
    t = hashing.make_tuple(_addr(src), _addr(dst), sport, dport, 6)
    assert hashing.hash_tuple("toeplitz_ms", t) == with_ports


def test_toeplitz_tables_equal_the_bit_by_bit_definition():
    rng = np.random.default_rng(3)
    sym_key = bytes.fromhex("6d5a") * 20
    for length in [0, 1, 7, 12, 13, 36, 37, 41, 80]:
        for _ in range(5):
            data = rng.integers(0, 256, size=length, dtype=np.uint8).tobytes()
            assert h("toeplitz_ms", data) == hashing.toeplitz_reference(MS_KEY, data)
            assert h("toeplitz", data) == hashing.toeplitz_reference(sym_key, data)


@pytest.mark.parametrize("family", [4, 6])
def test_the_symmetric_toeplitz_key_gives_both_directions_the_same_value(family):
    rng = np.random.default_rng(family)
    width = 4 if family == 4 else 16
    same = 0
    for _ in range(200):
        a, b = (rng.integers(0, 256, size=width, dtype=np.uint8).tobytes() for _ in range(2))
        pa, pb = (int(x) for x in rng.integers(0, 65536, size=2))
        there = hashing.make_tuple(a, b, pa, pb, 17)
        back = hashing.make_tuple(b, a, pb, pa, 17)
        assert hashing.hash_tuple("toeplitz", there) == hashing.hash_tuple("toeplitz", back)
        same += hashing.hash_tuple("toeplitz_ms", there) == hashing.hash_tuple("toeplitz_ms", back)
    assert same < 5  # the Microsoft key is not symmetric: the property is the key's, not luck


# --- the library's contract ----------------------------------------------------------------------


def test_the_registry_lists_every_hash_of_the_issue():
    assert set(hashing.names()) >= {
        "coralreef",
        "lookup3",
        "murmur3_32",
        "murmur3_128",
        "superfasthash",
        "fnv1a_32",
        "fnv1a_64",
        "crc32c",
        "crc32c_sw",
        "crc32c_hw",
        "toeplitz",
        "toeplitz_ms",
        "wyhash",
        "xxh3",
    }
    assert "crc32c_sw" not in hashing.distinct_names()


def test_an_unknown_hash_name_is_refused_with_the_known_ones_listed():
    with pytest.raises(hashing.UnknownHash, match=r"unknown hash 'md5'; known: coralreef, lookup3"):
        h("md5", b"x")
    with pytest.raises(BadInput):
        hashing.check_names(["crc32c", "nope"])


@pytest.mark.parametrize(
    "name",
    [
        "coralreef",
        "lookup3",
        "murmur3_32",
        "murmur3_128",
        "superfasthash",
        "fnv1a_32",
        "fnv1a_64",
        "crc32c",
        "toeplitz",
        "toeplitz_ms",
        "wyhash",
        "xxh3",
    ],
)
def test_the_bulk_call_gives_each_keys_single_value(name):
    rng = np.random.default_rng(11)
    for length in (5, 12, 13, 36, 37):  # the specialized lengths and a generic one
        wide = rng.integers(0, 256, size=(64, 48), dtype=np.uint8)
        keys = wide[:, :length]  # strided rows: 48 bytes apart
        bulk = hashing.hash_keys(name, keys, seed=99)
        single = [h(name, keys[i].tobytes(), 99) for i in range(len(keys))]
        assert bulk.tolist() == single, length
        if hashing.info(name).bits == 32:
            assert int(bulk.max()) < 2**32


def test_a_tuple_is_hashed_as_its_packed_network_order_key():
    v4 = hashing.make_tuple(_addr("198.18.0.1"), _addr("198.19.0.2"), 1234, 80, 6)
    assert hashing.tuple_key(v4) == (
        _addr("198.18.0.1") + _addr("198.19.0.2") + struct.pack(">HHB", 1234, 80, 6)
    )
    v6 = hashing.make_tuple(_addr("2001:db8::1"), _addr("2001:db8::2"), 5, 6, 17)
    assert len(hashing.tuple_key(v6)) == 37
    for a in hashing.algorithms():  # hash_tuple calls the entry's function, h() its bulk loop
        for t in (v4, v6):
            key = hashing.tuple_key(t)[:-1] if a.rss_input else hashing.tuple_key(t)
            assert hashing.hash_tuple(a.name, t, 5) == h(a.name, key, 5), a.name
        assert hashing.hash_tuples(a.name, hashing.tuple_array([v4, v6]), 5).tolist() == [
            hashing.hash_tuple(a.name, v4, 5),
            hashing.hash_tuple(a.name, v6, 5),
        ]


def test_the_seed_changes_the_value_of_seeded_hashes():
    data = b"198.18.0.1 -> 198.19.0.2"
    for name in (
        "lookup3",
        "murmur3_32",
        "murmur3_128",
        "superfasthash",
        "fnv1a_32",
        "fnv1a_64",
        "crc32c",
        "wyhash",
        "xxh3",
        "coralreef",
    ):
        assert h(name, data, 1) != h(name, data, 2), name
    assert h("toeplitz", data, 1) == h("toeplitz", data, 2)  # the key is its seed


def test_coralreef_is_the_xor_of_the_keys_words():
    t = hashing.make_tuple(_addr("10.0.0.1"), _addr("10.0.0.2"), 1, 2, 6)
    src, dst = (int.from_bytes(_addr(a), "little") for a in ("10.0.0.1", "10.0.0.2"))
    ports = int.from_bytes(struct.pack(">HH", 1, 2), "little")
    assert hashing.hash_tuple("coralreef", t) == src ^ dst ^ ports ^ 6


def test_the_library_path_comes_from_the_environment_first(monkeypatch, tmp_path):
    monkeypatch.setenv(hashing.LIB_ENV, str(tmp_path / "missing.so"))
    assert hashing.library_paths() == [tmp_path / "missing.so"]
    with pytest.raises(hashing.HashLibraryError, match="not found"):
        hashing.library()
    assert os.environ[hashing.LIB_ENV].endswith("missing.so")


def test_the_numpy_tuple_record_is_the_c_struct():
    import ctypes

    assert hashing.TUPLE_DTYPE.itemsize == ctypes.sizeof(hashing.HashTuple) == 40
    t = hashing.make_tuple(_addr("198.18.0.9"), _addr("198.19.1.1"), 40000, 53, 17)
    arr = hashing.tuple_array([t])
    assert arr["sport"][0] == 40000 and arr["family"][0] == 4


def test_the_library_lists_its_names_in_registry_order_for_errors():
    assert hashing.names_text() == ", ".join(hashing.names())


def test_bulk_refuses_rows_that_overlap_and_takes_none():
    base = np.zeros(64, dtype=np.uint8)
    overlapping = np.lib.stride_tricks.as_strided(base, shape=(4, 13), strides=(8, 1))
    with pytest.raises(ValueError, match="stride 8 < length 13"):
        hashing.hash_keys("crc32c", overlapping)
    assert hashing.hash_keys("crc32c", np.zeros((0, 13), dtype=np.uint8)).size == 0


def test_hash_names_truncates_into_a_short_buffer_and_says_what_it_needs():
    import ctypes

    lib = hashing.library()
    full = hashing.names_text()
    buf = ctypes.create_string_buffer(10)
    assert lib.hash_names(buf, len(buf)) == len(full)
    assert buf.value.decode() == full[:9]
