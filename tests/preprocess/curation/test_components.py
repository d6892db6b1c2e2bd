"""Connected components by large and small stars (lmshards/preprocess/curation/components.py)."""

from __future__ import annotations

import random

from lmshards.preprocess.curation.components import (
    COMPONENT_ROUNDS,
    large_star,
    small_star,
    star_problem,
)
from lmshards.preprocess.curation.dedup import (
    bucket_edges,
)


def test_a_bucket_is_a_star_on_its_smallest_node():
    assert list(bucket_edges([5, 3, 9, 3])) == [(5, 3), (9, 3)]
    assert list(bucket_edges([4])) == []


def _components(edges: list[tuple[int, int]], rounds: int) -> dict[int, int]:
    """The Beam steps, run in plain Python: node -> root."""

    def step(edges, fn, key):
        grouped: dict[int, list[int]] = {}
        for u, v in edges:
            for a, b in key((u, v)):
                grouped.setdefault(a, []).append(b)
        return [e for node, around in sorted(grouped.items()) for e in fn(node, around)]

    both = lambda e: [e, e[::-1]]  # noqa: E731
    larger = lambda e: [e if e[0] > e[1] else e[::-1]]  # noqa: E731
    for _ in range(rounds):
        edges = step(step(edges, large_star, both), small_star, larger)
    edges = step(edges, large_star, both)
    roles: dict[int, list] = {}
    for child, parent in edges:
        roles.setdefault(child, []).append(("child", parent))
        roles.setdefault(parent, []).append(("parent", child))
    assert all(star_problem(n, r) is None for n, r in roles.items())
    return dict(edges)


def test_large_and_small_star_settle_a_long_shuffled_chain_and_keep_components_apart():
    rng = random.Random(1)
    labels = list(range(2000))
    rng.shuffle(labels)
    chain = [(labels[i], labels[i + 1]) for i in range(999)]  # one component of 1000 nodes
    other = [(labels[i], labels[i + 1]) for i in range(1000, 1999)]
    roots = _components(chain + other, rounds=COMPONENT_ROUNDS)
    assert set(roots) == set(labels) - {min(labels[:1000]), min(labels[1000:])}
    for node, root in roots.items():
        assert root == (min(labels[:1000]) if node in labels[:1000] else min(labels[1000:]))


def test_star_problem_names_a_node_with_two_roots():
    assert "2 roots" in star_problem(5, [("child", 1), ("child", 2)])
    assert "both" in star_problem(5, [("child", 1), ("parent", 7)])
