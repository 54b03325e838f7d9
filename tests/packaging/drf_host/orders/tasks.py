"""The shop's own periodic work, which its django-q2 cluster runs (and no other cluster)."""


def nightly():
    """A stand-in for a shop's nightly report."""
