"""`make bench`: idemdash's latency, throughput, scale and purge figures, measured on
PostgreSQL under gunicorn. Run with `python -m idemdash.devtools.bench [--quick]`.

This app exists only under `idemdash.devtools.bench.settings`; production settings never load it.
"""
