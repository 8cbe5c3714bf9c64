"""The fault-injection campaign: seeded trial plans, the processes that run them, the oracle that audits them.

Used by ``tests/faults`` (a few trials per run) and ``python -m bench.fault_campaign`` (the large campaign).
"""
