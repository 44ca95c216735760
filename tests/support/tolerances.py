"""Tolerances several test modules compare with."""

# Two float32 computations of one model (the cached search, the full pass the port
# reads) give scores within this of each other: the tests' score tolerance, and the
# eps of the near-tie rule (tests/support/near_ties.py) for the ids.
SCORE_EPS = 1e-4
