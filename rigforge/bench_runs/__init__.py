"""bench_runs."""
