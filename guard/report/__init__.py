"""`gpu-node-guard report`: the repair figures (guard/figures.py) as text and JSON (render.py) and
as one self-contained HTML page (html.py); cli.py reads what `status` reads, never writes."""
