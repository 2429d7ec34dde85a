"""Kept evaluation runs (what was run, its metrics, how two runs compare) and the types of an
evaluation's report. Running an evaluation drives a session's operations: :mod:`kb_core.session.evaluation`.
"""
