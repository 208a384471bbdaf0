"""Alpha-beta costs of collectives (Thakur, Rabenseifner & Gropp 2005; Chan et al. 2007).

A ring over p ranks moving a tensor of n bytes: reduce-scatter and all-gather each take (p-1) steps
of n/p bytes, all-reduce is both. Each step costs alpha (latency) + bytes / beta (bandwidth), with
beta the one-direction bandwidth a rank's link delivers. Hierarchical versions run the ring inside
the NVLink domain first, then across domains on the 1/p_in shard each rank still holds, every GPU on
its own NIC rail (as the rail-optimised clusters MLPerf results come from are wired).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    bytes_per_s: float  # effective one-direction bandwidth per rank
    alpha_s: float  # latency per ring step


def reduce_scatter(n_bytes: float, p: int, link: Link) -> float:
    if p <= 1:
        return 0.0
    return (p - 1) * link.alpha_s + (p - 1) / p * n_bytes / link.bytes_per_s


def all_gather(n_bytes: float, p: int, link: Link) -> float:
    """n_bytes is the gathered (full) tensor."""
    return reduce_scatter(n_bytes, p, link)


def all_reduce(n_bytes: float, p: int, link: Link) -> float:
    if p <= 1:
        return 0.0
    return 2 * (p - 1) * link.alpha_s + 2 * (p - 1) / p * n_bytes / link.bytes_per_s


def p2p(n_bytes: float, link: Link) -> float:
    return link.alpha_s + n_bytes / link.bytes_per_s


def hier_reduce_scatter(n_bytes: float, p_in: int, p_out: int, inner: Link, outer: Link) -> float:
    """Reduce-scatter over p_in*p_out ranks: inside each domain, then across domains on n/p_in."""
    return reduce_scatter(n_bytes, p_in, inner) + reduce_scatter(n_bytes / p_in, p_out, outer)


def hier_all_gather(n_bytes: float, p_in: int, p_out: int, inner: Link, outer: Link) -> float:
    return all_gather(n_bytes / p_in, p_out, outer) + all_gather(n_bytes, p_in, inner)


def hier_all_reduce(n_bytes: float, p_in: int, p_out: int, inner: Link, outer: Link) -> float:
    """Reduce-scatter inside, all-reduce the shard across, all-gather inside."""
    return (reduce_scatter(n_bytes, p_in, inner) + all_reduce(n_bytes / p_in, p_out, outer)
            + all_gather(n_bytes, p_in, inner))
