"""`testbed match-sweep` (testbed/matchsweep.py, analysis/matchsweep.py) end to end with the real
`flowengine match`: the grid's rows, one cell against a direct run, the figures, the refusals and
an interrupted sweep."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import limit_memory

from testbed.cli import main
from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parent.parent
TINY = [
    "--structs",
    "chain,tree",
    "--hashes",
    "lookup3,murmur3_32",
    "--sizes",
    "2^8,2^10",
    "--feeds",
    "det,uniform:500",
    "--packets",
    "5000",
    "-q",
]


def test_a_tiny_sweep_writes_one_row_a_cell_equal_to_a_direct_run(tmp_path, flowengine_bin):
    out = tmp_path / "sweep"
    assert main(["match-sweep", *TINY, "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "rows.parquet")
    assert len(rows) == 2 * 2 * 2 * 2
    assert set(map(tuple, rows[["struct", "hash", "size", "feed"]].values)) == {
        (s, h, z, f)
        for s in ("chain", "tree")
        for h in ("lookup3", "murmur3_32")
        for z in (256, 1024)
        for f in ("det", "uniform:500")
    }
    assert (rows["mpps"] > 0).all() and not rows["timed_out"].any()
    # one cell by hand: the same probes for the same (seeded) packets
    direct = tmp_path / "direct.json"
    subprocess.run(
        [
            str(flowengine_bin),
            "match",
            "--struct",
            "tree",
            "--hash",
            "murmur3_32",
            "--size",
            "256",
            "--feed",
            "uniform:500",
            "--packets",
            "5000",
            "--json",
            str(direct),
        ],
        check=True,
        capture_output=True,
    )
    doc = json.loads(direct.read_text())
    cell = rows[
        (rows["struct"] == "tree")
        & (rows["hash"] == "murmur3_32")
        & (rows["size"] == 256)
        & (rows["feed"] == "uniform:500")
    ].iloc[0]
    assert cell["p_l1"] == pytest.approx(doc["p_l1"])
    assert list(cell["probe_hist"]) == doc["probe_hist"]
    assert cell["occupancy"] == pytest.approx(doc["occupancy"])
    det = rows[rows["feed"] == "det"]
    assert (det["p_l1"] == 1.0).all()  # one flow: every lookup finds it first
    for name in (
        "match-fig2-rate.png",
        "match-fig3-ratio.png",
        "match-fig4-pdf.png",
        "match-fig5-loss.png",
        "match-table1.png",
    ):
        assert (out / name).stat().st_size > 1000, name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["rows"] == 16
    seeds = {(r["struct"], r["feed_class"]): r["seed_mpps"] for r in metrics["table1"]}
    assert seeds[("chain", "deterministic")] == 58.1 and seeds[("tree", "random")] == 4.6
    assert "58.1" in (out / "report.md").read_text()


def test_refusals_come_before_anything_is_written(tmp_path, flowengine_bin, capsys):
    out = tmp_path / "sweep"
    assert main(["match-sweep", *TINY, "--structs", "chain,list", "--out", str(out)]) == 2
    assert "chain, tree, linear, robin, cuckoo" in capsys.readouterr().err
    assert main(["match-sweep", *TINY, "--hashes", "nohash", "--out", str(out)]) == 2
    assert "crc32c" in capsys.readouterr().err
    assert main(["match-sweep", *TINY, "--sizes", "2^10,2^33", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--sizes 8589934592" in err and "GiB" in err and "available" in err
    assert main(["match-sweep", *TINY, "--feeds", "zipf:100:0", "--out", str(out)]) == 2
    assert "zipf" in capsys.readouterr().err.lower()
    assert not out.exists()


def test_a_pcap_with_ipv6_packets_for_the_16_byte_table_is_refused_up_front(
    tmp_path, flowengine_bin, capsys
):
    root = os.environ.get("NTG_SHARED_DATA")
    pcap = Path(root or ".") / "pcaps" / "zeek__wikipedia.pcap"  # its packet 2 is IPv6
    if not pcap.is_file():
        skip_or_fail("NTG_SHARED_DATA/pcaps/zeek__wikipedia.pcap is missing (set NTG_SHARED_DATA)")
    out = tmp_path / "sweep"
    assert (
        main(
            [
                "match-sweep",
                *TINY,
                "--structs",
                "chain,linear16",
                "--feeds",
                f"det,pcap:{pcap}",
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"--feeds pcap:{pcap} with --structs linear16" in err
    assert "keeps IPv4 keys only" in err and "packet 2 of the feed is IPv6" in err
    assert not out.exists()
    cut = tmp_path / "cut.pcap"  # a damaged pcap: refused up front too
    cut.write_bytes(pcap.read_bytes()[:5000])
    assert main(["match-sweep", *TINY, "--feeds", f"pcap:{cut}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--feeds pcap:{cut} with --structs chain" in err and "damaged at byte" in err
    assert not out.exists()
    # the same pcap with the 40-byte tables is fine (its cells are replayed to --packets)
    assert (
        main(
            [
                "match-sweep",
                *TINY,
                "--structs",
                "linear",
                "--hashes",
                "lookup3",
                "--sizes",
                "2^10",
                "--feeds",
                f"pcap:{pcap}",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = pd.read_parquet(out / "rows.parquet")
    assert rows["packets"].tolist() == [5000]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_keeps_the_rows_it_measured(tmp_path, flowengine_bin, sig):
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # started with SIGINT ignored, as a background job of a non-interactive shell is (CI): Python
    # then raises no KeyboardInterrupt of its own, and the command must still stop on it
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "match-sweep",
            "--structs",
            "chain",
            "--hashes",
            "lookup3",
            "--sizes",
            "2^12..2^20",
            "--feeds",
            "uniform:20000",
            "--packets",
            "2000000",
            "--repeats",
            "3",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint,
    )
    for line in proc.stderr:  # the second progress line: two rows are in the Parquet
        if "[2/27" in line:
            break
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 130
    name = signal.Signals(sig).name
    assert (
        f"cells: their rows are in {out / 'rows.parquet'}" in rest and f"stopped by {name}" in rest
    )
    rows = pd.read_parquet(out / "rows.parquet")
    assert 2 <= len(rows) < 27 and f"interrupted after {len(rows)} of 27 cells" in rest
    assert list(rows["size"][:2]) == [4096, 8192] and (rows["mpps"] > 0).all()
    assert sorted(p.name for p in out.iterdir()) == [
        "request.json",
        "rows.parquet",
    ]  # no temporary, no report
    assert "the same command with --resume goes on" in rest
    if sig == signal.SIGINT:  # the same request goes on from there: the rows kept, the others run
        args = [
            "match-sweep",
            "--structs",
            "chain",
            "--hashes",
            "lookup3",
            "--sizes",
            "2^12..2^20",
            "--feeds",
            "uniform:20000",
            "--packets",
            "2000000",
            "--repeats",
            "3",
            "--out",
            str(out),
            "-q",
        ]
        assert main([*args[:-4], "2", *args[-3:], "--resume"]) == 2  # another request: refused
        assert pd.read_parquet(out / "rows.parquet").equals(rows)
        assert main([*args, "--resume"]) == 0
        after = pd.read_parquet(out / "rows.parquet")
        assert (
            len(after) == 27
            and after.iloc[: len(rows)].equals(rows)
            and (out / "report.md").is_file()
        )
        assert sorted(map(tuple, after[["repeat", "size"]].values.tolist())) == [
            (r, 2**k) for r in range(3) for k in range(12, 21)
        ]


def test_the_notebook_redraws_the_figures_from_a_real_sweep(tmp_path, flowengine_bin, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    out = tmp_path / "sweep"
    assert main(["match-sweep", *TINY, "--sizes", "2^8,2^10,1031", "--out", str(out)]) == 0
    monkeypatch.setenv("NTG_MATCH_SWEEP", str(out))
    monkeypatch.setenv("NTG_PLOTS_DIR", str(tmp_path / "plots"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(REPO / "notebooks" / "flow_match_sweep.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(
        str(o.get("data", {}).get("text/plain", "")) + o.get("text", "") for o in outputs
    )
    assert f"24 cells from {out}" in text and "58.1" in text
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(
        [
            "match-fig2-rate.png",
            "match-fig3-ratio.png",
            "match-fig4-pdf.png",
            "match-fig5-loss.png",
            "match-table1.png",
        ]
    )


ONE = [
    "--structs",
    "chain",
    "--hashes",
    "lookup3",
    "--sizes",
    "2^8",
    "--feeds",
    "uniform:500",
    "--packets",
    "5000",
    "-q",
]


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--repeats", "1000000000"],
            "argument --repeats: too large: at most 100,000 (got 1,000,000,000)",
        ),
        (
            ["--repeats", "1" * 100_001],
            "argument --repeats: too large: a number of 100,001 digits; at most 100,000",
        ),
        (
            ["--repeats", "6251"],
            "the sweep has 100,016 cells (repeats x feeds x sizes x structs x hashes); "
            "at most 100,000",
        ),
        (["--packets", "9" * 100_001], "argument --packets: too large: a number of 100,001 digits"),
        (["--sizes", "2^" + "9" * 100_001], "too large: at most 2^63"),
        (["--sizes", "2^1000000000000"], "too large: at most 2^63"),
        (
            ["--cell-timeout", "0"],
            "argument --cell-timeout: must be a number of seconds > 0 and at most 1,000,000 (got 0)",
        ),
        (["--cell-timeout", "nan"], "must be a number of seconds > 0"),
        (["--cell-timeout", "1e9"], "at most 1,000,000 (got 1e9)"),
    ],
)
def test_counts_are_checked_before_anything_is_allocated(args, message, tmp_path, flowengine_bin):
    """`--repeats 1000000000` reached 4 GB in 15 s making its list of cells; now exit 2 at once,
    in a child held to 2 GiB of address space (a MemoryError or a kill fails the test)."""
    out = tmp_path / "sweep"
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "match-sweep", *TINY, *args, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit_memory(),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert p.returncode == 2, p.stderr[-2000:]
    assert message in p.stderr and "Traceback" not in p.stderr
    assert not out.exists()


def test_a_sweep_where_every_cell_times_out_still_reports(tmp_path, flowengine_bin):
    """`--cell-timeout` shorter than any cell: every row timed out, and the report says so (the
    Fig. 4 plot raised an IndexError and no report was written)."""
    out = tmp_path / "sweep"
    assert main(["match-sweep", *TINY, "--cell-timeout", "1e-9", "--out", str(out)]) == 0
    rows = pd.read_parquet(out / "rows.parquet")
    assert len(rows) == 16 and rows["timed_out"].all()
    assert "16 cells (16 timed out)" in (out / "report.md").read_text()
    assert (out / "match-fig4-pdf.png").stat().st_size > 1000


def test_a_folder_holding_a_sweep_is_refused_without_resume_or_replace(
    tmp_path, flowengine_bin, capsys
):
    """A second sweep into the same --out silently replaced the rows of the first (also rows an
    interrupted sweep kept for --resume); now it is refused unless --resume or --replace says which."""
    out = tmp_path / "sweep"
    assert main(["match-sweep", *ONE, "--out", str(out)]) == 0
    first = (out / "rows.parquet").read_bytes()
    capsys.readouterr()
    assert main(["match-sweep", *ONE, "--sizes", "2^9", "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"testbed match-sweep: {out} holds a sweep already (rows.parquet, request.json): use --resume to go on "
        "or --replace to start over (or choose another --out)"
    )
    assert (out / "rows.parquet").read_bytes() == first
    (out / "report.md").unlink()  # an interrupted sweep: rows and request, no report
    assert main(["match-sweep", *ONE, "--sizes", "2^9", "--out", str(out)]) == 2
    assert (out / "rows.parquet").read_bytes() == first
    with pytest.raises(SystemExit) as exc:
        main(["match-sweep", *ONE, "--out", str(out), "--resume", "--replace"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert main(["match-sweep", *ONE, "--sizes", "2^9", "--out", str(out), "--replace"]) == 0
    rows = pd.read_parquet(out / "rows.parquet")
    assert rows["size"].tolist() == [512] and (out / "report.md").is_file()
    assert json.loads((out / "request.json").read_text())["sizes"] == [512]
