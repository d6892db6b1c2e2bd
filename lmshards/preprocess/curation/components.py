"""Connected components of the candidate-pair graph, as a Beam computation (no node ever sees the graph).

The alternating large-star / small-star algorithm (Kiveris et al., "Connected Components in
MapReduce and Beyond", 2014): each step groups the edges by one endpoint and rewires every node's
neighbourhood to its smallest member. Both steps keep the components as they are; after enough
rounds every component is a star, its smallest node (the root) joined to each other node. Beam
graphs have no loops, so a fixed number of rounds is unrolled (COMPONENT_ROUNDS, enough for chains of
millions of nodes: the rounds needed grow as log^2 of a component's size), and a last step checks
the result is a star forest, failing the run, rather than writing wrong clusters, if it is not.

Nodes are any totally ordered, deterministically encoded values (here curation's NodeKey tuples),
so the root of a component, and with it the document kept, depends on the nodes alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

COMPONENT_ROUNDS = 12  # (large-star, small-star) pairs unrolled; then one more large-star
Node = Any  # a totally ordered value with a deterministic coder (a tuple of ints, bytes, str)
Edge = tuple[Node, Node]


class NotConvergedError(RuntimeError):
    """The unrolled rounds did not make every component a star."""


# ---------------------------------------------------------------- logic


def both_ways(edge: Edge) -> Iterator[Edge]:
    """(u, v) -> (u, v), (v, u): large-star needs every node's whole neighbourhood."""
    u, v = edge
    yield u, v
    yield v, u


def larger_first(edge: Edge) -> Edge:
    """(u, v) -> (max, min): small-star groups each edge under its larger endpoint."""
    u, v = edge
    return (u, v) if u > v else (v, u)


def large_star(node: Node, neighbours: Iterable[Node]) -> Iterator[Edge]:
    """Every neighbour larger than node joined to the smallest of node and its neighbours."""
    around = set(neighbours)
    smallest = min(around | {node})
    for v in sorted(around):
        if v > node:
            yield v, smallest


def small_star(node: Node, smaller: Iterable[Node]) -> Iterator[Edge]:
    """node and its smaller neighbours, each joined to the smallest of them (but not to itself)."""
    around = set(smaller) | {node}
    smallest = min(around)
    for v in sorted(around):
        if v != smallest:
            yield v, smallest


def star_problem(node: Node, roles: Iterable[tuple[str, Node]]) -> str | None:
    """Why node breaks the star shape ("parent"/"child" roles it has in the final edges), or None.

    In a star forest a node is a root (only a parent) or a leaf with exactly one parent.
    """
    parents = {other for role, other in roles if role == "child"}
    is_parent = any(role == "parent" for role, _ in roles)
    if parents and is_parent:
        return f"node {node!r} is both a root and a leaf"
    if len(parents) > 1:
        return f"node {node!r} has {len(parents)} roots"
    return None


def _roles(edge: Edge) -> Iterator[tuple[Node, tuple[str, Node]]]:
    child, parent = edge
    yield child, ("child", parent)
    yield parent, ("parent", child)


def _check_star(item: tuple[Node, Iterable[tuple[str, Node]]]) -> Iterator[Edge]:
    node, roles = item
    roles = list(roles)
    problem = star_problem(node, roles)
    if problem:
        raise NotConvergedError(
            f"Duplicate clusters did not settle in {COMPONENT_ROUNDS} rounds ({problem}); the "
            "candidate graph has chains longer than this release handles: raise --minhash_rows."
        )
    for role, parent in roles:
        if role == "child":
            yield node, parent


# ---------------------------------------------------------------- Beam


class _Step(beam.PTransform):
    def __init__(self, kind: str):
        super().__init__()
        self._kind = kind

    def expand(self, edges):
        if self._kind == "large":
            keyed = edges | "BothWays" >> beam.FlatMap(both_ways)  # (node, neighbour)
            step = large_star
        else:
            keyed = edges | "LargerFirst" >> beam.Map(larger_first)  # (node, smaller neighbour)
            step = small_star
        return (
            keyed
            | "Group" >> beam.GroupByKey()  # (node, [neighbour])
            | "Rewire" >> beam.FlatMapTuple(step)  # (node, smaller node)
        )


class ConnectedComponents(beam.PTransform):
    """Edges (u, v) -> (node, root) for every node of a component except its root (its smallest node).

    Nodes without an edge are in no output. Raises NotConvergedError (on a worker) if the rounds did
    not settle every component.
    """

    def expand(self, edges):
        for i in range(COMPONENT_ROUNDS):
            edges = edges | f"LargeStar{i}" >> _Step("large")
            edges = edges | f"SmallStar{i}" >> _Step("small")
        edges = edges | "LargeStarLast" >> _Step("large")  # (leaf, root)
        return (
            edges
            | "Roles" >> beam.FlatMap(_roles)  # (node, (role, other node))
            | "GroupRoles" >> beam.GroupByKey()  # (node, [(role, other node)])
            | "CheckStars" >> beam.FlatMap(_check_star)  # (leaf, root), each leaf once
        )
