"""The rig watched between deploys: what the health-metrics timer on the rig is told (``collector``), and the
Prometheus side of it, the scrape jobs, alerting rules and dashboard rendered from the profile (``prometheus``).

May import: serving, known_failures, updates, bench_runs, render, remote, profile.
"""
