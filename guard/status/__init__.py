"""`gpu-node-guard status`: every GPU node the guard holds or watches, why, and what comes next
(model: the report and its JSON, derive: from the planners' own decisions, render: the tables)."""
