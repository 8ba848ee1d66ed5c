"""The generators: the alert rules (`alerts`, `alert_queries`), the admission policies
(`policies`) and the site-configuration check (`config`) that proves an overlay agrees
with both. They write files of the repository; `run` imports none of them.
"""
