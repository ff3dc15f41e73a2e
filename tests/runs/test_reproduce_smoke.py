"""``mpiec reproduce all --smoke`` end to end: real (tiny) runs for every paper, a finding with a computed
verdict for every claim, the page, the JSON and the kept readings. Checks the machinery, not the papers'
numbers."""

from __future__ import annotations

import json

import pytest
from run_helpers import mpiec

from mpiec.reproduce import PAPERS, paper
from mpiec.reproduce.claims import REPRODUCED, VERDICTS
from mpiec.reproduce.page import MARKER, TITLE

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(600)]


def test_reproduce_all_smoke_judges_every_claim_and_writes_the_page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"{TITLE}\n\n{MARKER}\n\nold tables\n\n## Readings\n\nkept by hand\n")  # an earlier page
    run = mpiec(["reproduce", "all", "--smoke", "--page", str(page)], out=tmp_path / "r", timeout=560)
    assert run.code in (0, 3), run.stdout + run.stderr
    doc = json.loads((tmp_path / "r" / "reproduce.json").read_text())
    assert doc["scale"] == "smoke" and set(doc["papers"]) == set(PAPERS)
    for name in PAPERS:
        found = {f["claim"]: f for f in doc["papers"][name]["findings"]}
        assert set(found) == {c.key for c in paper(name).claims()}, name
        for f in found.values():
            assert f["verdict"] in VERDICTS
            assert f["verdict"] == REPRODUCED or f["reason"], f
        assert doc["papers"][name]["experiments"], name
    md = (tmp_path / "r" / "reproductions.md").read_text()
    assert all(f"## {paper(n).title}" in md for n in PAPERS)
    assert (tmp_path / "r" / "reproductions.html").read_text().startswith("<!doctype html>")
    text = page.read_text()
    assert "kept by hand" in text and "old tables" not in text and MARKER in text
    assert "[mpiec reproduce]" in run.stdout and "ETA" in run.stdout
