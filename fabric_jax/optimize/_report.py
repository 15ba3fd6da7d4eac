"""Readable reports of a routing: per-link load before/after and per-pair splits.

Loads are shown in Gb/s (converted with :func:`fabric_jax.units.to_gbps` for display
only) next to the capacity and the utilisation.
"""

from __future__ import annotations

import numpy as np

from ..units import to_gbps
from ._problem import RoutingProblem, check_split

__all__ = ["routing_report", "path_label"]


def path_label(problem: RoutingProblem, pair: int, path: int) -> str:
    """Short label of a path: the nodes it visits (from link names) or its link ids."""
    links = problem.links[pair, path][problem.hop_mask[pair, path]]
    if problem.link_names:
        nodes = [problem.link_names[int(links[0])].split("->")[0]] if links.size else []
        nodes += [problem.link_names[int(l)].split("->")[1] for l in links]
        return " > ".join(nodes)
    return " ".join(str(int(l)) for l in links)


def routing_report(problem: RoutingProblem, split, *, before=None, top_links: int = 10,
                   top_pairs: int = 5) -> str:
    """Text report of a routing.

    Args:
      problem: the routing problem.
      split: ``[pairs, paths]`` routing to report ("after").
      before: optional ``[pairs, paths]`` reference routing ("before", e.g. ECMP).
      top_links: number of most utilised links listed after (and as many of the most
        utilised before, when ``before`` is given).
      top_pairs: number of pairs listed (largest demand first).

    Returns:
      A multi-line string: summary, per-link table and per-pair split table.
    """
    split = check_split(problem, split)
    after_u = problem.utilization(split)
    after_l = problem.link_load(split)
    lines = []
    if before is not None:
        before = check_split(problem, before)
        before_u = problem.utilization(before)
        before_l = problem.link_load(before)
        lines.append(f"MLU before {before_u.max():.4f}  after {after_u.max():.4f}")
    else:
        before_u = before_l = None
        lines.append(f"MLU {after_u.max():.4f}")
    names = problem.link_names
    # The most utilised links after, then those that were the worst before.
    order = list(np.argsort(-after_u, kind="stable")[:top_links])
    if before is not None:
        order += [l for l in np.argsort(-before_u, kind="stable")[:top_links]
                  if l not in order]
    head = f"{'link':>28} {'cap Gb/s':>9}"
    head += f" {'before Gb/s':>11} {'util':>6}" if before is not None else ""
    head += f" {'after Gb/s':>11} {'util':>6}"
    lines += ["", "Most utilised links:", head]
    for l in order:
        name = names[l] if names else f"link {l}"
        row = f"{name[-28:]:>28} {to_gbps(problem.capacity[l]):9.1f}"
        if before is not None:
            row += f" {to_gbps(before_l[l]):11.2f} {before_u[l]:6.3f}"
        row += f" {to_gbps(after_l[l]):11.2f} {after_u[l]:6.3f}"
        lines.append(row)
    lines += ["", "Per-pair splits (largest demands):"]
    for p in np.argsort(-problem.demand, kind="stable")[:top_pairs]:
        label = problem.pair_names[p] if problem.pair_names else f"pair {p}"
        lines.append(f"  {label}: {to_gbps(problem.demand[p]):.2f} Gb/s over "
                     f"{int(problem.n_paths[p])} paths")
        for k in np.flatnonzero(problem.path_mask[p]):
            b = f"{before[p, k]:6.1%} -> " if before is not None else ""
            lines.append(f"    {b}{split[p, k]:6.1%}  {path_label(problem, p, k)}")
    return "\n".join(lines)
