"""The texts the read stage parses and the planners write or compare: the guard's node
annotations and Job records (`records`, `check_records`), the PromQL it asks (`queries`) and what
both say of the series (`series`). Shared so that `plan/` never imports `read/`."""
