"""Which members train together: the packs of a grid's or a search round's points, planned without Ray.

Each point is a member; members that can train as one (population.pack_key: one architecture, one set of training
settings) go in packs of up to `pack`, each pack one Ray Tune trial of trainables.trainable.run_trial, and a
candidate's seeds (one verdict group) in one pack; a pack that could only fail (a cuda member without a GPU, more
members than the largest node's memory holds) is refused before anything runs. What the cluster offers comes in as
numbers (cluster.py asks Ray for them).
"""
from __future__ import annotations

import math
from typing import Callable

from sweep.space import point_id
from sweep.storage.out_dir import OutDir
from trainables import config, memory
from trainables.errors import ConfigError
from trainables.models import MODELS
from trainables.population import pack_key

TRIALS_PER_SLOT = 4  # auto packing: about this many packs (Tune trials) per slot the cluster can run at once
MAX_AUTO_PACK = 64  # auto packing never puts more members than this in one pack


def members(points: list[dict], out: OutDir, job_type: str = "grid",
            verdict: Callable[[dict], dict | None] = lambda point: None) -> list[dict]:
    """The member dicts of these points: point, directory (a path, or a URI in the bucket), job type and, where
    `verdict` gives one, the rule it is judged and stopped by (sweep/verdicts.py)."""
    return [{"point": point, "dir": out.member_dir(point), "job_type": job_type}
            | ({"verdict": rule} if (rule := verdict(point)) else {}) for point in points]


def plan(base_dict: dict, all_members: list[dict], pack: int, gpu: float, room: int,
         pack_setting: str = "sweep.pack") -> dict[str, list[dict]]:
    """Pack id (its Tune trial's id) -> its members: members that can train as one (population.pack_key) in packs
    of up to `pack`, in point order, a candidate's seeds (one verdict group) in one pack, so that they can stop each
    other (chunks). The ids are a function of the points and `pack`, so a restored experiment finds its packs again.
    A pack must fit in `room` (bytes: what the cluster's largest node gives tasks, cluster.largest_memory()), and a
    member on cuda needs `gpu` > 0 per pack (Ray hides the GPUs from a Tune trial that asks for none): else
    ConfigError."""
    section = pack_setting.split(".")[0]
    groups: dict[tuple, list[dict]] = {}
    largest: dict[tuple, tuple[dict[str, int], config.Config]] = {}  # per pack key: the largest member's needs, config
    vectorized: dict[tuple, bool] = {}  # else its members run one after another in their pack
    for member in all_members:
        cfg = config.with_point(base_dict, member["point"], check_device=False)
        if cfg.device == "cuda" and not gpu:
            raise ConfigError("device", f"cuda needs {section}.resources.gpu > 0: Ray hides the GPUs from trials that "
                                        "ask for none")
        key = pack_key(cfg)
        groups.setdefault(key, []).append(member)
        needs = memory.needs(cfg)
        if key not in largest or max(needs.values()) > max(largest[key][0].values()):
            largest[key] = needs, cfg
        vectorized[key] = MODELS[cfg.model.name].vectorize
    packs = {}
    for key, group in groups.items():
        check_memory(min(pack, len(group)) if vectorized[key] else 1, *largest[key], room, pack_setting)
        for chunk in chunks(group, pack):
            packs[point_id(chunk[0]["point"]) + (f"+{len(chunk) - 1}" if len(chunk) > 1 else "")] = chunk
    return packs


def chunks(group: list[dict], pack: int) -> list[list[dict]]:
    """The members in order, in chunks of at most `pack`, none splitting the consecutive members of one verdict
    group (a candidate's seeds) unless the group alone has more than `pack`."""
    group_of = lambda member: (member.get("verdict") or {}).get("group")
    runs: list[list[dict]] = []
    for member in group:
        if runs and group_of(member) is not None and group_of(runs[-1][-1]) == group_of(member):
            runs[-1].append(member)
        else:
            runs.append([member])
    result: list[list[dict]] = []
    for run in runs:
        if result and len(result[-1]) + len(run) <= pack:
            result[-1] += run
        else:
            result += [run[start:start + pack] for start in range(0, len(run), pack)]
    return result


def check_memory(members: int, peaks: dict[str, int], cfg: config.Config, room: int, pack_setting: str) -> None:
    """Fail before anything runs if `members` trained as one population (memory.needs(cfg, members); `peaks`: one
    member's, memory.needs(cfg)) exceed `room`, what Ray gives tasks on the cluster's largest node: naming the batch
    key when one member alone cannot fit, else `pack_setting`."""
    memory.refuse_beyond(peaks, room, "the largest node has", cfg)
    if members == 1:
        return
    peak = max(memory.needs(cfg, members).values())
    if peak > room:
        low, high = 1, members  # one member fits (above), all do not: bisect for the most that do
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if max(memory.needs(cfg, middle).values()) <= room else (low, middle)
        raise ConfigError(pack_setting, f"{members} members per pack need about {peak / memory.GIB:.2f} GiB "
                                        f"together, but the largest node has {room / memory.GIB:.2f} GiB for them; "
                                        f"set it to at most {low}")


def members_per_pack(section, n_members: int, slots: int, group_size: int = 1) -> int:
    """The section's `pack`, or for 0 (auto) as many members per pack as spread them over about TRIALS_PER_SLOT
    packs per slot (`slots`: Tune trials the cluster runs at once, cluster.slots): fewer Tune trials cost less
    overhead, and not fewer than that keeps every slot busy to the end and a crash costly to no one; rounded up to
    whole verdict groups of `group_size` (a candidate's seeds, which stop each other only inside one pack)."""
    if section.pack:
        return section.pack
    pack = max(1, min(MAX_AUTO_PACK, math.ceil(n_members / (TRIALS_PER_SLOT * slots))))
    return math.ceil(pack / group_size) * group_size
