"""Test kit shared by ``tests/`` and ``bench/`` (not shipped in the wheel).

A real S3 server (SeaweedFS), a TCP fault proxy, a Spark standalone cluster, and the
fault-injection campaign library (:mod:`ckpt_testkit.faults`). Run bench scripts that
use it from the repository root as modules, e.g. ``python -m bench.fault_campaign``.
"""
