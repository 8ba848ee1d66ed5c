"""`gpu-node-guard report`: the repair figures (guard/figures.py) shown as text, JSON and HTML.

facts.py   the figures' facts from what a run reads (ledger, node records, Events, Jobs)
render.py  text and JSON
html.py    one self-contained page (inline SVG)
cli.py     the command: reads, never writes
"""
