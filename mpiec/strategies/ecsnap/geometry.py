"""Which servers' snapshots are coded together, and who holds their parity (pure, no MPI).

Owns the *shard-level* stripe geometry of ``ecsnap``: a stripe codes whole shard
snapshots, not rows (``ecrm``'s ``layout.RowPlacement`` stripes rows; ``ecsnap``
keeps the plain round-robin row placement of ``none``, so its parameters never
change what a server owns). With ``S`` servers, ``k`` data members and ``r``
parity members (``k + r <= S``):

* stripe ``t`` (``t = 0 .. ceil(S / k) - 1``) has the data members
  ``t·k .. min(S, (t+1)·k) - 1`` (the last stripe may have ``k_t < k``: its
  missing members are all-zero blocks, which a systematic code needs no byte of);
* parity member ``i`` of stripe ``t`` lives on server ``(t·k + k_t + i) % S``, the
  ``r`` servers after the stripe: never one of its own data members;
* a stripe's blocks are ``L_t`` bytes, the largest shard of its members; smaller
  shards are zero-padded to ``L_t`` (the padding is never sent or stored).

Invariant: every rank computes the same geometry from ``(S, k, r)`` and the
shards' sizes, so a recovery's decode and re-encode plan (``recovery_plan``) is
the same on every server without a message.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stripe:
    index: int
    members: tuple[int, ...]  # data member j -> server
    holders: tuple[int, ...]  # parity member i -> server


@dataclass
class RecoveryPlan:
    """What the servers do to bring a snapshot back after losing some of its blocks."""

    decodes: list[tuple[int, int, list[tuple[int, int]]]] = field(default_factory=list)
    """(stripe, lost data member j, helpers): each helper is (stripe member index, server) with
    index < k for a data block and k + i for parity member i; the lost member's server decodes."""
    reencodes: list[tuple[int, int]] = field(default_factory=list)
    """(stripe, parity member i) whose holder lost its block: the stripe's data members send
    their blocks to it again."""
    problem: str = ""  # non-empty: the snapshot cannot be decoded (which stripe, why)


class Geometry:
    def __init__(self, servers: int, k: int, r: int) -> None:
        if k < 1 or r < 1 or k + r > servers:
            raise ValueError(f"ecsnap geometry: need k >= 1, r >= 1, k + r <= servers; got k={k}, r={r}, "
                             f"servers={servers}")
        self.servers, self.k, self.r = servers, k, r
        self.stripes: list[Stripe] = []
        for t in range(-(-servers // k)):
            members = tuple(range(t * k, min(servers, (t + 1) * k)))
            holders = tuple((t * k + len(members) + i) % servers for i in range(r))
            self.stripes.append(Stripe(t, members, holders))
        self._stripe_of = {s: st.index for st in self.stripes for s in st.members}

    def stripe_of(self, server: int) -> Stripe:
        """The stripe whose data member ``server`` is."""
        return self.stripes[self._stripe_of[server]]

    def held(self, server: int) -> list[tuple[int, int]]:
        """(stripe, parity member i) of every parity block ``server`` holds."""
        return [(st.index, i) for st in self.stripes for i, h in enumerate(st.holders) if h == server]

    @staticmethod
    def block_bytes(stripe: Stripe, sizes: list[int]) -> int:
        """``L_t``: the stripe's block size (its largest shard, in bytes)."""
        return max(sizes[s] for s in stripe.members)

    def losses(self, lost: set[int]) -> dict[int, tuple[list[int], list[int]]]:
        """Stripe -> (lost data member indices, lost parity member indices), stripes with losses only."""
        out = {}
        for st in self.stripes:
            data = [j for j, s in enumerate(st.members) if s in lost]
            par = [i for i, h in enumerate(st.holders) if h in lost]
            if data or par:
                out[st.index] = (data, par)
        return out

    def beyond(self, lost: set[int]) -> tuple[int, list[int], list[int]] | None:
        """The first stripe whose lost data cannot be decoded when the servers ``lost`` are gone:
        (stripe, lost data members, lost parity members), or None. A stripe that lost data
        members is decodable while it lost at most ``r`` members in all; one that lost only parity
        is re-encoded from its data, however many parity blocks it lost."""
        for t, (data, par) in sorted(self.losses(lost).items()):
            if data and len(data) + len(par) > self.r:
                return t, data, par
        return None

    def recovery_plan(self, have_data: list[bool], have_parity: list[bool]) -> RecoveryPlan:
        """The decode and re-encode jobs when server ``s`` holds its data block iff ``have_data[s]``
        and every parity block it holds iff ``have_parity[s]`` (a replaced server: neither).
        Helpers are the first ``k_t`` blocks at hand, data members before parity (fewer products)."""
        plan = RecoveryPlan()
        for st in self.stripes:
            kt = len(st.members)
            lost = [j for j, s in enumerate(st.members) if not have_data[s]]
            if lost:
                at_hand = [(j, s) for j, s in enumerate(st.members) if have_data[s]]
                at_hand += [(self.k + i, h) for i, h in enumerate(st.holders) if have_parity[h]]
                if len(at_hand) < kt:
                    names = ", ".join(f"server:{st.members[j]}" for j in lost)
                    plan.problem = (f"stripe {st.index} (data on servers {list(st.members)}, parity on "
                                    f"{list(st.holders)}) lost the blocks of {names} and has "
                                    f"{len(at_hand)} of the {kt} blocks a decode needs")
                    return plan
                for j in lost:
                    plan.decodes.append((st.index, j, at_hand[:kt]))
            plan.reencodes += [(st.index, i) for i, h in enumerate(st.holders) if not have_parity[h]]
        return plan
