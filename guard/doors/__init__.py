"""The doors to the outside systems the guard reads and writes: the Kubernetes API (`kube`,
its errors, its kubectl-exec credentials, the retry budget), the fault ledger ConfigMap
(`ledger_store`), the cycle's Lease, Prometheus (`prom`, `prom_access`) and host
commands (`hostexec`). Nothing here decides; nothing here imports read, plan or apply.
"""
