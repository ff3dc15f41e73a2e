"""The seed papers: the one registry of papers (``PAPERS``) both studies read, and each paper's
setup, one value per quantity: what the papers and their code state, and each assumption with its
plausible band and the band's sources.

``PAPERS`` names each paper once, with its regime (the setup below) and where each study's view of
it lives, by import path (so this module imports neither study; ``mpiec.reproduce``'s ``__init__``
imports only this module, so ``mpiec simulate`` reads the registry without loading a reproduction):
``mpiec reproduce``'s (its claims, experiments and findings: ``mpiec.reproduce.ecrec``, ``.cpr``,
``.cnr``) and ``mpiec simulate --paper``'s (its cluster preset in ``mpiec.simulate.papers``). Both
rest on the setups' figures, so the two never assume different figures for the same quantity of the
same paper (storage bandwidth, network, a worker's speed, CPR's layout and PLS target, Check-N-Run's
interval and storage). Tags as ``mpiec.reproduce.claims.TAGS``: [P] paper, [C] the authors' code,
[S] secondary summary, [U] inferred.

Invariants: pure data and arithmetic (no import of the runtime, nor of a study at import time); a
paper is added here or nowhere (both studies' paper choices are ``PAPERS``' keys); every [U]
quantity a verdict rests on is an ``Assumed``, its nominal value inside ``[low, high]`` with a
source for each end; the consumers read it (never a copy of a figure), and a verdict that rests on
it is judged at both ends (``mpiec.reproduce.claims``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["CNR", "CPR", "ECREC", "PAPERS", "Assumed", "CnrSetup", "CprSetup", "EcrecSetup", "PaperEntry"]


@dataclass(frozen=True)
class Assumed:
    """An assumed quantity [U]: the nominal value the runs are sized at, and the plausible band
    ``[low, high]`` with the source of each end."""

    what: str
    unit: str
    nominal: float
    low: float
    high: float
    low_source: str
    high_source: str

    def __post_init__(self) -> None:
        if not self.low <= self.nominal <= self.high:
            raise ValueError(f"assumed {self.what}: nominal {self.nominal} outside [{self.low}, {self.high}]")

    @property
    def ends(self) -> tuple[float, float]:
        return (self.low, self.high)

    def text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return (f"{self.what}: {self.nominal:g}{unit} assumed [U], band {self.low:g}–{self.high:g}{unit} "
                f"({self.low:g}: {self.low_source}; {self.high:g}: {self.high_source})")


@dataclass(frozen=True)
class EcrecSetup:
    """ECRM / ECRec (Liu, Kosaian, Rashmi; arXiv 2104.01981, PVLDB 16 2023)."""

    rows: int = 197_767_405  # [C] rows of the Criteo table
    dim: int = 128  # [C] floats per row
    servers: int = 5  # [C] parameter servers (r5n.24xlarge, 96 cores)
    workers: int = 15  # [C] workers, one V100 each
    batch: int = 2048  # [C] samples per worker per batch
    features: int = 26  # [C] Criteo's sparse features, hashed into the one table
    bottom: tuple[int, ...] = (512, 256)  # [C] hidden widths: 13-512-256-128
    top: tuple[int, ...] = (1024, 1024, 512, 256)  # [C] …-1024-1024-512-256-1
    key_bytes: int = 8  # [U] a 64-bit key written with each row
    ckpt30_s: float = 1800.0  # [C] Ckpt-30
    ckpt60_s: float = 3600.0  # [C] Ckpt-60
    ff_run_s: float = 7200.0  # [C] failure-free runs of 2 h
    kill_at_s: float = 900.0  # [C] one server killed after 15 min,
    after_s: float = 3600.0  # [C] then 60 min more
    #: [U] per-server checkpoint write (and reload) bandwidth: ECRec's scripts write to local EBS [C],
    #: the bandwidth is not published. The runs are sized at the low end; verdicts that rest on it are
    #: re-judged at the high end.
    storage: Assumed = Assumed(
        "checkpoint bandwidth per server (write and reload)", "MB/s", 80.0, 80.0, 500.0,
        "one S3-like stream per server, mpiec's object-store profile",
        "an EBS io2 volume per server (the authors' scripts write to local EBS [C])")
    network_gbps: float = 10.0  # [U] a server's link: a rebuild fetches k shards' bytes through it
    trainer_speedup: float = 20.0  # [U] a V100 worker = 20 CPU cores on the MLPs
    server_threads: int = 24  # [U] a server's row (and parity) work over 24 of its 96 cores

    @property
    def ckpt_bytes(self) -> int:
        """A full checkpoint: every row and its key (SGD: no optimizer slot [C])."""
        return self.rows * (self.dim * 4 + self.key_bytes)

    @property
    def shard_bytes(self) -> float:
        """One server's data rows (what a rebuild brings back), bytes."""
        return self.rows * self.dim * 4 / self.servers

    def write_s(self, mb_s: float | None = None) -> float:
        """A checkpoint's write (or reload) time: each server's part through its own stream at ``mb_s``
        (default: the nominal), all at once."""
        bw = self.storage.nominal if mb_s is None else mb_s
        return self.ckpt_bytes / (self.servers * bw * 1e6)

    def ratio(self, interval_s: float, mb_s: float | None = None) -> float:
        """Write time / interval (ECRec's checkpoint overhead [C])."""
        return self.write_s(mb_s) / interval_s

    @property
    def kill_fraction(self) -> float:
        return self.kill_at_s / (self.kill_at_s + self.after_s)


ECREC = EcrecSetup()


@dataclass(frozen=True)
class CprSetup:
    """CPR (Maeng et al., MLSys 2021, arXiv 2011.02999): the production setup its slides summarize [S]
    and the one assumption both studies size CPR at (the PLS target)."""

    servers: int = 18  # [S] embedding servers (shards)
    trainers: int = 20  # [S]
    run_h: float = 50.0  # [S] the run's length, hours
    failures: int = 5  # [S] failure events in the run ...
    per_failure: int = 4  # [S] ... of this many servers each
    #: [U] CPR's PLS target: the paper's is not given. The suite's default (``strategy.target_pls``) is
    #: the nominal; the reproduction's sweep runs both ends of the band.
    pls_target: Assumed = Assumed(
        "PLS target", "", 0.05, 0.01, 0.1,
        "5x below mpiec's 0.05: a cautious operator", "2x above: CPR's figures reach PLS 0.1")

    @property
    def run_s(self) -> float:
        return self.run_h * 3600.0

    @property
    def mtbf_s(self) -> float:
        """Between failure events (each of ``per_failure`` servers)."""
        return self.run_s / self.failures

    def failure_times_s(self) -> tuple[float, ...]:
        """The events spread evenly over the run (their times are not given [U]): at 5, 15, … hours."""
        return tuple((i + 0.5) * self.mtbf_s for i in range(self.failures))


CPR = CprSetup()


@dataclass(frozen=True)
class CnrSetup:
    """Check-N-Run (Eisenman et al., NSDI 2022, arXiv 2010.08679)."""

    interval_min: float = 30.0  # [S] checkpoint interval
    rows_per_interval: float = 0.26  # [S] share of the embedding rows modified per interval
    storage_profile: str = "object-store"  # [S] remote storage; the profile's figures are [U]
    diff: str = "intermittent"  # [P] differential checkpoints against the last baseline
    bits: str = "auto"  # [S] the bit width from the expected restores

    @property
    def interval_s(self) -> int:
        return round(self.interval_min * 60)


CNR = CnrSetup()


@dataclass(frozen=True)
class PaperEntry:
    """One seed paper as both studies see it: ``regime``, its setup (above); ``reproduce``, the module
    whose ``PAPER`` (``mpiec.reproduce.experiment.Paper``) holds its claims, experiments and findings;
    ``simulate``, the ``module:attribute`` of its cluster preset (``mpiec.simulate.papers.Paper``)."""

    key: str
    regime: EcrecSetup | CprSetup | CnrSetup
    reproduce: str
    simulate: str

    def reproduction(self) -> Any:
        """``mpiec reproduce``'s ``Paper`` of this paper (imported on demand)."""
        return importlib.import_module(self.reproduce).PAPER

    def preset(self) -> Any:
        """``mpiec simulate --paper``'s preset of this paper (imported on demand)."""
        module, attr = self.simulate.split(":")
        return getattr(importlib.import_module(module), attr)


#: The seed papers, in the reproduction page's order: the one registry of papers (``mpiec reproduce``'s
#: choices and ``mpiec simulate --paper``'s are its keys).
PAPERS: dict[str, PaperEntry] = {
    "ecrec": PaperEntry("ecrec", ECREC, "mpiec.reproduce.ecrec", "mpiec.simulate.papers:ECREC_PRESET"),
    "cpr": PaperEntry("cpr", CPR, "mpiec.reproduce.cpr", "mpiec.simulate.papers:CPR_PRESET"),
    "cnr": PaperEntry("cnr", CNR, "mpiec.reproduce.cnr", "mpiec.simulate.papers:CNR_PRESET"),
}
