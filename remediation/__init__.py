"""Remediation: findings in, guarded actions out, every decision and result recorded.

Detectors only write findings. This package decides what to do about them, queues the
actions on Kafka and carries them out against the watched cluster, off by default:

- config.py: the [remediation] section (every action type disabled, dry run on).
- actions.py: Decision, Action (the queue message), ActionResult; ids and JSON.
- decide.py: the pure decision step (ignore / act / recheck later, and why).
- guards.py: the pure guards (enabled, cluster-wide and share, one at a time, cooldown,
  hourly cap, deadline).
- plans.py: pure plans and precondition checks over a snapshot of the live cluster.
- queue.py: the Kafka queue (publisher, topic) and the decision step that fills it.
- executor.py: consumes the queue, re-checks, acts (or logs in dry run), records results.
- live_cluster.py, reassignments.py (+ java/): the Admin API calls the executor makes.
- pager.py: page_human actions as Alertmanager alerts.
- stores.py (JSON lines), delta_tables.py (Delta, the only Spark): decisions and results.
"""
