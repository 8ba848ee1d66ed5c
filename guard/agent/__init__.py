"""The node agent: a DaemonSet that runs the read-only file checks every few minutes and exports
them for Prometheus (docs/agent.md)."""
