"""Test support: Prometheus/Alertmanager processes, a webhook receiver, kmon processes."""
