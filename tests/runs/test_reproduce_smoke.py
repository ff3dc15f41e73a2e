"""``mpiec reproduce all --smoke`` end to end: real (tiny) runs for every paper, a finding with a computed
verdict for every claim, the page, the JSON and the kept readings. Checks the machinery, not the papers'
numbers. The reproduction runs once per session (``smoke_reproduction``, tests/conftest.py); the papers'
smoke tests in tests/reproduce read its experiments back."""

from __future__ import annotations

import json

import pytest

from mpiec.reproduce import PAPERS, paper
from mpiec.reproduce.claims import REPRODUCED, VERDICTS
from mpiec.reproduce.page import MARKER

pytestmark = [pytest.mark.mpirun, pytest.mark.kill, pytest.mark.timeout(600)]


def test_reproduce_all_smoke_judges_every_claim_and_writes_the_page(smoke_reproduction):
    run, page = smoke_reproduction, smoke_reproduction.page  # tests/conftest.py: once per session
    assert run.code in (0, 3), run.stdout + run.stderr
    doc = json.loads((run.out / "reproduce.json").read_text())
    assert doc["scale"] == "smoke" and set(doc["papers"]) == set(PAPERS)
    for name in PAPERS:
        found = {f["claim"]: f for f in doc["papers"][name]["findings"]}
        assert set(found) == {c.key for c in paper(name).claims()}, name
        for f in found.values():
            assert f["verdict"] in VERDICTS
            assert f["verdict"] == REPRODUCED or f["reason"], f
        assert doc["papers"][name]["experiments"], name
    md = (run.out / "reproductions.md").read_text()
    assert all(f"## {paper(n).title}" in md for n in PAPERS)
    assert (run.out / "reproductions.html").read_text().startswith("<!doctype html>")
    text = page.read_text()
    assert "kept by hand" in text and "old tables" not in text and MARKER in text
    assert "[mpiec reproduce]" in run.stdout and "ETA" in run.stdout
