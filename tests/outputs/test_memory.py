"""The memory a cell is charged with (issue #25): where metrics.json's `mem` carries the drop less
the load client's own RSS rise (`peak_delta_less_client_gib`, process.memory.less_client_peaks),
the summary's `peak_mem_gib` and the card's "Peak memory" show it, the drop with the client
(`peak_delta_gib`) stays on the card and the server's RSS peak sits beside it; a metrics.json
without it shows the drop, as before."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from tests.support.outputs import BASE, DRAFTER, cell_by_id, fixture_cells, fixture_metrics
from workflow_scripts.config.cell_ids import repeat_id
from workflow_scripts.outputs import card as cards
from workflow_scripts.outputs import writers
from workflow_scripts.outputs.compact import peak_mem_gib, summary_row
from workflow_scripts.outputs.repeats import collapse_repeats
from workflow_scripts.process.memory import MemorySample, less_client_peaks, summarize_memory

MIB = 1024  # KiB


@pytest.fixture
def metrics(tmp_path):
    return fixture_metrics(tmp_path)


def measured_mem() -> dict:
    """`mem` of a run whose server takes 1000 MiB while the client (100 MiB before launch)
    rises by 300 MiB: a drop of 1300 MiB, 1000 of them the server's."""
    samples = [
        MemorySample(0.0, "baseline", 10_000 * MIB, None, None, 100 * MIB),
        MemorySample(0.5, "load", 9_200 * MIB, 800 * MIB, None, 100 * MIB),
        MemorySample(1.0, "bench", 8_700 * MIB, 1_000 * MIB, None, 400 * MIB),
        MemorySample(1.5, "teardown", 10_000 * MIB, None, None, 100 * MIB),
    ]
    return {**summarize_memory(samples, 0.5), **less_client_peaks(samples)}


def with_mem(metrics: dict, mem: dict) -> dict:
    return {**metrics, "mem": {**metrics["mem"], **mem}}


def test_the_summary_charges_the_server_without_the_client(metrics):
    mem = measured_mem()
    row = summary_row(with_mem(metrics[BASE], mem))
    assert row["peak_mem_gib"] == pytest.approx(1_000 / 1024)
    assert mem["peak_delta_gib"] == pytest.approx(1_300 / 1024)  # kept in metrics.json
    # a metrics.json from before the figure: its drop, as the summary showed it
    assert "peak_delta_less_client_gib" not in metrics[BASE]["mem"]
    assert summary_row(metrics[BASE])["peak_mem_gib"] == metrics[BASE]["mem"]["peak_delta_gib"]
    assert peak_mem_gib({}) is None


def test_summary_csv_holds_the_figure_less_the_client(tmp_path, metrics):
    metrics[BASE] = with_mem(metrics[BASE], measured_mem())
    out = {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }
    writers.write_tables(list(metrics.values()), fixture_cells(), out)
    rows = pd.read_csv(out["summary_csv"]).set_index("cell")
    assert rows.loc[BASE, "peak_mem_gib"] == pytest.approx(1_000 / 1024)
    assert rows.loc[BASE, "server_rss_peak_gib"] == pytest.approx(1_000 / 1024)
    header = next(line for line in out["summary_md"].read_text().splitlines() if "| cell" in line)
    headers = [h.strip() for h in header.strip("|").split("|")]
    assert headers[headers.index("peak_mem_gib") + 1] == "server_rss_peak_gib"
    assert rows.loc[DRAFTER, "peak_mem_gib"] == pytest.approx(
        metrics[DRAFTER]["mem"]["peak_delta_gib"]
    )


def test_the_card_shows_the_figure_less_the_client_with_the_server_rss_beside_it(metrics):
    text = cards.render_markdown(
        cards.build_card(cell_by_id(BASE), with_mem(metrics[BASE], measured_mem()))
    )
    lines = text.splitlines()
    peak = next(i for i, line in enumerate(lines) if line.startswith("| Peak memory |"))
    assert lines[peak].startswith("| Peak memory | 0.98 GiB |")
    client = "less at each sample the load client's RSS rise above its own pre-launch RSS"
    assert client in lines[peak]
    assert "(at most 0.29 GiB)" in lines[peak]
    assert "(the drop with the client: 1.27 GiB); GiB (2^30 bytes)" in lines[peak]
    assert "Drop by phase, client included: load 0.78" in lines[peak]
    assert lines[peak + 1].startswith("| Server RSS peak | 0.98 GiB |")


def test_repeats_fold_the_figure_less_the_client(tmp_path, metrics):
    runs = []
    for k in (1, 2, 3):
        run = copy.deepcopy(with_mem(metrics[BASE], measured_mem()))
        run["cell"] = repeat_id(BASE, k)
        run["mem"]["peak_delta_less_client_gib"] = float(k)
        runs.append(run)
    (combined,), _, _ = collapse_repeats(runs)
    assert combined["mem"]["peak_delta_less_client_gib"] == pytest.approx(2.0)
    assert combined["mem"]["peak_delta_gib"] == pytest.approx(1_300 / 1024)
    assert [f["peak_mem_gib"] for f in combined["repeats"]["figures"]] == [1.0, 2.0, 3.0]


def mmapd_mem() -> dict:
    """`mem` of Gemma 3 270M on llama.cpp as issue #34 saw it: MemAvailable fell 0.006 GiB
    (and rose while loading) while the server held 0.4 GiB anonymous and 0.09 GiB of its
    mmap'd model file, from recorded samples through summarize_memory."""
    gib = 2**20  # KiB

    def at(t, phase, drop_gib, anon_gib=None, file_gib=None):
        held = None if anon_gib is None else int((anon_gib + file_gib) * gib)
        return MemorySample(
            t,
            phase,
            int((8 - drop_gib) * gib),
            held,
            None,
            server_rss_anon_kib=None if anon_gib is None else int(anon_gib * gib),
            server_rss_file_kib=None if file_gib is None else int(file_gib * gib),
            server_rss_shmem_kib=None if anon_gib is None else 0,
        )

    samples = [
        at(0.0, "baseline", 0.0),
        at(0.5, "load", -0.14, 0.2, 0.09),
        at(1.0, "bench", 0.006, 0.4, 0.09),
        at(1.5, "teardown", 0.0),
    ]
    return summarize_memory(samples, 0.5)


def test_the_card_does_not_present_an_understating_drop_as_the_servers_memory(metrics):
    """A drop of 0.006 GiB beside 0.4 GiB anonymous: "Peak memory" is marked understated and
    says why, the server's anonymous and file-backed memory have rows of their own, and the
    notes say it; the bare drop is never the row's whole figure."""
    mem = mmapd_mem()
    assert mem["delta_understates"] is True
    text = cards.render_markdown(cards.build_card(cell_by_id(BASE), with_mem(metrics[BASE], mem)))
    lines = text.splitlines()
    peak = next(line for line in lines if line.startswith("| Peak memory |"))
    assert peak.startswith("| Peak memory | 0.01 GiB, understated: not what the server holds |")
    assert "The MemAvailable drop (0.01 GiB) understates the server's memory" in peak
    assert "below the server's own anonymous memory" in peak
    assert "mmap'd from the model file: page cache, which MemAvailable counts as available" in peak
    anon = next(line for line in lines if line.startswith("| Server anonymous memory peak |"))
    assert anon.startswith("| Server anonymous memory peak | 0.40 GiB |")
    file = next(line for line in lines if line.startswith("| Server file-backed memory peak |"))
    assert file.startswith("| Server file-backed memory peak | 0.09 GiB |")
    assert "0.40 GiB of anonymous memory and 0.09 GiB of file-backed pages" in text
    assert "Peak memory understates what the server holds" in text  # the notes


def test_a_card_whose_drop_holds_the_server_shows_it_plainly(metrics):
    """The drop (1000 MiB) above the server's anonymous memory: no mark; a container whose
    processes are not seen has its split as "—", never 0."""
    mem = {**measured_mem(), "server_rss_anon_peak_gib": 0.5, "server_rss_file_peak_gib": 0.1}
    mem["delta_understates"] = False
    text = cards.render_markdown(cards.build_card(cell_by_id(BASE), with_mem(metrics[BASE], mem)))
    assert "understate" not in text
    assert "| Peak memory | 0.98 GiB |" in text
    unseen = {**mem, "server_rss_anon_peak_gib": None, "server_rss_file_peak_gib": None}
    unseen["delta_understates"] = None
    text = cards.render_markdown(
        cards.build_card(cell_by_id(BASE), with_mem(metrics[BASE], unseen))
    )
    row = next(line for line in text.splitlines() if "Server anonymous memory peak" in line)
    assert row.startswith("| Server anonymous memory peak | — |")
    assert "container whose processes this run does not see" in row


def test_the_summary_says_what_the_server_holds_and_marks_the_drop(tmp_path, metrics):
    """summary.csv carries the server's anonymous and file-backed peaks and the flag;
    summary.md marks the drop `(understated)` and lists the cell with why. A cell not flagged
    shows its drop as before."""
    metrics[BASE] = with_mem(metrics[BASE], mmapd_mem())
    out = {
        f"{name}_{ext}": tmp_path / f"{name}.{ext}"
        for name in ("summary", "index", "spec_gain")
        for ext in ("csv", "md")
    }
    writers.write_tables(list(metrics.values()), fixture_cells(), out)
    rows = pd.read_csv(out["summary_csv"]).set_index("cell")
    assert rows.loc[BASE, "server_anon_peak_gib"] == pytest.approx(0.4, abs=1e-6)
    assert rows.loc[BASE, "server_file_peak_gib"] == pytest.approx(0.09, abs=1e-6)
    assert bool(rows.loc[BASE, "mem_delta_understates"]) is True
    assert rows.loc[BASE, "peak_mem_gib"] == pytest.approx(0.006, abs=1e-6)  # kept, marked
    assert pd.isna(rows.loc[DRAFTER, "mem_delta_understates"])  # a result from before the flag
    md = out["summary_md"].read_text()
    base_line = next(line for line in md.splitlines() if line.startswith(f"| {BASE} "))
    assert "| 0.01 (understated) |" in base_line
    drafter_line = next(line for line in md.splitlines() if line.startswith(f"| {DRAFTER} "))
    assert "understated" not in drafter_line
    heading = "Peak memory (the MemAvailable drop) below what the server holds:"
    assert heading in md
    listed = md.split(heading)[1]
    assert f"- `{BASE}`: the MemAvailable drop (0.01 GiB) understates" in listed
    assert f"`{DRAFTER}`" not in listed.split("\n\n")[1]
