"""`gpu-node-guard status`: every GPU node the guard holds or watches, why, and what comes next.

model.py   the report as frozen values, and its JSON form (``-o json``)
derive.py  the report from a Snapshot, by the planners' own pure decisions (no second copy of
           the return conditions); the state of a decision comes from `guard.states`
render.py  the text and wide tables
cli.py     the command (and the kubectl plugin `kubectl-gpu_guard`): reads, never writes
"""
