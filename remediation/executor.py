"""The executor: takes actions off the queue, checks them against the live cluster, acts.

For each message, in order:

1. Already handled? A result with a final status for its action_id means this is a
   repeat (the same decision published twice, or a redelivery after a crash between the
   result and the commit): nothing is done again. A "running" result means an earlier
   attempt crashed mid-action: the action is planned again from live state and carried
   out (every operation is idempotent: it sets replica orders, leaders and offsets to
   values, it does not add to them), and the result says it resumed.
2. Guards (remediation/guards.py) against the executor's own results: the action kind is
   enabled here, the deadline has not passed, the action is for the cluster this executor
   watches, and for cluster-changing actions nothing else is in flight, the target's
   cooldown is over and the hourly cap has room.
3. Plan against the live cluster, read just now (remediation/plans.py): the action's
   preconditions are checked there (a group with members, a broker already gone, a good
   offset no longer in the log, a reassignment no longer in progress), and a plan that
   finds nothing to do is a skip with the reason.
4. Dry run (the action's flag or this executor's remediation.dry_run): log the plan,
   record dry_run. Otherwise record "running", carry the plan out, wait until the cluster
   shows it (up to action_timeout_s), record done or failed with what happened.
5. Only then commit the message's offset (manual, synchronous commits): a crash before
   the result is stored redelivers the message, and step 1 keeps it from acting twice.

A message that is not a valid action is recorded as a failed result (key
"malformed:<hash>") and, when a quarantine sink is given, quarantined with its reason;
it never vanishes and never stops the queue.

Operations (the decision step writes them; see remediation/decide.py):
- reorder_and_elect {"broker": B}: replica lists reordered with alterPartitionReassignments
  (same replica set, B last; remediation/reassignments.py), then elect_leaders(PREFERRED)
  for the partitions B led.
- restore_group_offsets {"group", "partitions": [{"topic", "partition", "offset",
  "direction"}]}: alter_consumer_group_offsets, then read back.
- cancel_reassignment {"partitions": [...]}: alterPartitionReassignments with no target.
- page {...}: one alert to Alertmanager (remediation/pager.py).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from core.findings import ActionKind
from remediation.actions import Action, ActionResult, ResultStatus
from remediation.config import RemediationSection
from remediation.guards import CHANGES_CLUSTER, HOUR_MS, PastAction, first_refusal
from remediation.live_cluster import LiveCluster, LiveClusterError
from remediation.pager import AlertmanagerPager, PagePlan, PagerError, page_alert
from remediation.plans import (
    CancelPlan,
    LeadershipPlan,
    Refused,
    RestorePlan,
    plan_cancel,
    plan_leadership_move,
    plan_restore,
    unknown_preconditions,
)
from remediation.reassignments import ReassignmentError
from remediation.stores import ResultStore

log = logging.getLogger(__name__)

Plan = LeadershipPlan | RestorePlan | CancelPlan | PagePlan
QUARANTINE_SOURCE = "remediation_queue"
# A change counts as shown when this many metadata reads in a row show it (LiveCluster.wait_for).
CONFIRMING_READS = 3


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class _Attempt:
    """One handling of an action by `Executor.handle`."""
    action: Action
    now_ms: int
    dry: bool                         # the action's dry_run flag, or this executor's
    existing: ActionResult | None     # the "running" result of an interrupted attempt


class Executor:
    def __init__(self, config: RemediationSection, *, watch_cluster: str, cluster: LiveCluster,
                 results: ResultStore, consumer_config: Mapping[str, Any] | None = None,
                 pager: AlertmanagerPager | None = None, quarantine=None,
                 clock: Callable[[], int] = wall_clock_ms, executor_id: str | None = None):
        self.config = config
        self.watch_cluster = watch_cluster
        self.cluster = cluster
        self.results = results
        self.consumer_config = dict(consumer_config or {})
        self.pager = pager or (AlertmanagerPager(config.alertmanager_url)
                               if config.alertmanager_url else None)
        self.quarantine = quarantine
        self.clock = clock
        self.executor_id = executor_id or f"executor-{socket.gethostname()}-{os.getpid()}"
        self._consumer = None

    # ---- the queue --------------------------------------------------------------------
    def start(self) -> "Executor":
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer({"group.id": self.config.executor_group,
                                       "auto.offset.reset": "earliest",
                                       "enable.auto.commit": False,
                                       "enable.auto.offset.store": False,
                                       **self.consumer_config})
            self._consumer.subscribe([self.config.topic])
        return self

    def run_once(self, timeout_s: float = 1.0) -> ActionResult | None:
        """Handle at most one message; the result it recorded, None when there was nothing
        new (no message, or a repeat)."""
        if self._consumer is None:
            self.start()
        msg = self._consumer.poll(timeout_s)
        if msg is None:
            return None
        if msg.error() is not None:
            log.warning("remediation queue: %s", msg.error())
            return None
        try:
            action = Action.from_json(msg.value() or b"")
        except ValueError as e:
            result = self._malformed(msg, str(e))
        else:
            result = self.handle(action)
        self._consumer.commit(message=msg, asynchronous=False)
        return result

    def run(self, stop: threading.Event, poll_s: float = 1.0) -> None:
        self.start()
        while not stop.is_set():
            self.run_once(poll_s)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _malformed(self, msg, why: str) -> ActionResult | None:
        value = msg.value() or b""
        action_id = "malformed:" + hashlib.sha256(value).hexdigest()[:24]
        if self.results.get(action_id) is not None:
            return None
        now = self.clock()
        log.error("remediation queue %s[%d]@%d: not an action (%s)", msg.topic(),
                  msg.partition(), msg.offset(), why)
        if self.quarantine is not None:
            from ingest.malformed import Malformed

            bad = Malformed(QUARANTINE_SOURCE, f"bad_action:{why}"[:200], value)
            rec = bad.to_quarantine_record(
                cluster=self.watch_cluster, ingest_ts_ms=now, origin=msg.topic(),
                source_partition=msg.partition(), source_offset=msg.offset())
            self.quarantine.send("quarantine", action_id, rec)
            self.quarantine.flush()
        result = ActionResult(action_id=action_id, cluster=self.watch_cluster, kind="unknown",
                              target="unknown", finding_id="unknown", status=ResultStatus.FAILED,
                              reason=f"malformed action message: {why}", started_ms=now,
                              finished_ms=now, executor=self.executor_id,
                              details={"topic": msg.topic(), "partition": msg.partition(),
                                       "offset": msg.offset(),
                                       "key": (msg.key() or b"").decode("utf-8", "replace")})
        self.results.put(result)
        return result

    # ---- one action -------------------------------------------------------------------
    def _result(self, a: Action, status: ResultStatus, reason: str, started_ms: int, *,
                dry_run: bool, details: Mapping[str, Any] | None = None,
                finished: bool = True) -> ActionResult:
        return ActionResult(action_id=a.action_id, cluster=a.cluster, kind=a.kind.value,
                            target=a.target, finding_id=a.finding_id, status=status,
                            reason=reason, started_ms=started_ms,
                            finished_ms=self.clock() if finished else None, dry_run=dry_run,
                            details=dict(details or {}), executor=self.executor_id)

    def _history(self, cluster: str, now_ms: int) -> list[PastAction]:
        since = now_ms - max(self.config.cooldown_ms, HOUR_MS)
        return [PastAction(r.action_id, r.cluster, r.target, ActionKind(r.kind), r.started_ms,
                           r.status is ResultStatus.RUNNING)
                for r in self.results.recent(since, cluster)
                if r.counts_for_guards and r.kind in {k.value for k in CHANGES_CLUSTER}]

    def handle(self, a: Action) -> ActionResult | None:
        """Guard, plan, act (or log), record. None when the action was handled before.

        Each step below either ends the action with its result or lets it go on, in the
        order of the module docstring.
        """
        existing = self.results.get(a.action_id)
        if existing is not None and existing.status.is_terminal:
            log.info("action %s already handled (%s): not acting again", a.action_id,
                     existing.status.value)
            return None
        run = _Attempt(a, self.clock(), a.dry_run or self.config.dry_run, existing)
        refused = self._guard(run)
        if refused is not None:
            return refused
        plan = self._live_plan(run)
        if isinstance(plan, ActionResult):
            return plan
        if run.dry:
            log.warning("DRY RUN action %s: would %s", a.action_id, plan.describe())
            return self._finish(run, ResultStatus.DRY_RUN, f"dry run: would {plan.describe()}",
                                details={"plan": plan.details()})
        return self._carry_out(run, plan)

    def _guard(self, run: _Attempt) -> ActionResult | None:
        """Skipped or failed before the live cluster is read: another cluster's action, a
        guard against this executor's own results, a precondition it does not know."""
        a, now = run.action, run.now_ms
        if a.cluster != self.watch_cluster:
            return self._finish(run, ResultStatus.SKIPPED, f"action is for cluster {a.cluster}; "
                                f"this executor watches {self.watch_cluster}")
        refusal = first_refusal(kind=a.kind, cluster=a.cluster, target=a.target,
                                history=self._history(a.cluster, now), config=self.config,
                                now_ms=now, deadline_ms=a.deadline_ms, exclude=a.action_id)
        if refusal is not None:
            return self._finish(run, ResultStatus.SKIPPED,
                                f"{refusal.guard}: {refusal.verdict.reason}")
        bad = unknown_preconditions(a.op, a.preconditions)
        if bad is not None:
            return self._finish(run, ResultStatus.FAILED, bad.reason)
        return None

    def _live_plan(self, run: _Attempt) -> Plan | ActionResult:
        """The plan from the live cluster read now; a result if it cannot be read, the
        operation is bad, or a precondition does not hold there."""
        a = run.action
        try:
            plan = self.plan(a)
        except (LiveClusterError, ReassignmentError) as e:
            return self._finish(run, ResultStatus.SKIPPED, f"could not read the live cluster: {e}")
        except (KeyError, TypeError, ValueError) as e:
            return self._finish(run, ResultStatus.FAILED,
                                f"bad operation {dict(a.operation)}: {e!r}")
        except Exception as e:  # noqa: BLE001 - recorded; one bad action must not stop the queue
            log.exception("planning action %s failed", a.action_id)
            return self._finish(run, ResultStatus.SKIPPED, f"planning failed: {e!r}")
        if isinstance(plan, Refused):
            return self._finish(run, ResultStatus.SKIPPED, f"precondition: {plan.reason}")
        return plan

    def _carry_out(self, run: _Attempt, plan: Plan) -> ActionResult:
        """Record "running" (kept from an interrupted attempt), apply the plan, record how
        it ended: a failure is recorded too, never left running."""
        a = run.action
        started = run.existing.started_ms if run.existing is not None else run.now_ms
        self.results.put(self._result(a, ResultStatus.RUNNING, plan.describe(), started,
                                      dry_run=False, details={"plan": plan.details()},
                                      finished=False))
        log.warning("action %s: %s", a.action_id, plan.describe())
        try:
            ok, reason, details = self.apply(a, plan)
        except (LiveClusterError, ReassignmentError, PagerError) as e:
            return self._finish(run, ResultStatus.FAILED, f"{plan.describe()} failed: {e}",
                                started, {"plan": plan.details()})
        except Exception as e:  # noqa: BLE001 - a running record must not stay open forever
            log.exception("action %s failed", a.action_id)
            return self._finish(run, ResultStatus.FAILED, f"{plan.describe()} failed: {e!r}",
                                started, {"plan": plan.details()})
        return self._finish(run, ResultStatus.DONE if ok else ResultStatus.FAILED, reason,
                            started, {"plan": plan.details(), **details})

    def _finish(self, run: _Attempt, status: ResultStatus, reason: str,
                started: int | None = None,
                details: Mapping[str, Any] | None = None) -> ActionResult:
        """Record the action's final result (saying if it resumed an attempt) and log it."""
        a = run.action
        note = (f" (resumed after an attempt interrupted at {run.existing.started_ms})"
                if run.existing is not None else "")
        r = self._result(a, status, reason + note, run.now_ms if started is None else started,
                         dry_run=run.dry, details=details)
        self.results.put(r)
        log.info("action %s %s on %s: %s -> %s", a.action_id, a.kind.value, a.target,
                 status.value, r.reason)
        return r

    # ---- operations -------------------------------------------------------------------
    def plan(self, a: Action) -> Plan | Refused:
        op, pre = a.operation, a.preconditions
        if a.op == "reorder_and_elect":
            registered = self.cluster.registered_brokers()
            in_progress = (self.cluster.reassignments()
                           if pre.get("no_reassignment_in_progress") else {})
            return plan_leadership_move(int(op["broker"]), self.cluster.partitions(),
                                        in_progress, registered, pre, self.config)
        if a.op == "restore_group_offsets":
            group = str(op["group"])
            tps = [(x["topic"], int(x["partition"])) for x in op["partitions"]]
            return plan_restore(op, pre, self.cluster.group_state(group),
                                self.cluster.committed(group, tps), self.cluster.log_bounds(tps))
        if a.op == "cancel_reassignment":
            return plan_cancel(op, pre, self.cluster.reassignments())
        if a.op == "page":
            if self.pager is None:
                return Refused("no remediation.alertmanager_url to page through (the "
                               "finding's own alert rule still pages)")
            return PagePlan(page_alert(cluster=a.cluster, action_id=a.action_id, operation=op,
                                       now_ms=self.clock()))
        raise ValueError(f"unknown operation {a.op!r}")

    def apply(self, a: Action, plan: Plan) -> tuple[bool, str, dict[str, Any]]:
        """Carry the plan out; (succeeded, reason, details)."""
        if isinstance(plan, LeadershipPlan):
            return self._move_leadership(plan)
        if isinstance(plan, RestorePlan):
            return self._restore_offsets(plan)
        if isinstance(plan, CancelPlan):
            return self._cancel_reassignments(plan)
        self.pager.post(plan.alert)
        return True, f"paged: {plan.describe()}", {}

    def _move_leadership(self, plan: LeadershipPlan) -> tuple[bool, str, dict[str, Any]]:
        b, timeout = plan.broker, self.config.action_timeout_s
        order = {(m.topic, m.partition): m.new_replicas for m in plan.moves}
        reorder_errors = {tp: e for tp, e in self.cluster.reorder_replicas(order).items() if e}
        accepted = {tp: r for tp, r in order.items() if tp not in reorder_errors}

        def state() -> dict[tuple[str, int], Any]:
            topics = {t for t, _ in accepted}
            return {(p.topic, p.partition): p for p in self.cluster.partitions(topics)}

        def reordered() -> bool:
            s = state()
            return all(tp in s and s[tp].replicas == r for tp, r in accepted.items())

        to_elect = [(m.topic, m.partition) for m in plan.moves
                    if m.elect and (m.topic, m.partition) in accepted]

        last: dict[tuple[str, int], Any] = {}

        def led_elsewhere() -> bool:
            last.clear()
            last.update(state())
            return all(tp in last and last[tp].leader != b for tp in to_elect)

        started = time.monotonic()
        orders_shown = self.cluster.wait_for("the new replica orders", reordered, timeout,
                                             reads=CONFIRMING_READS)
        orders_s = time.monotonic() - started
        # Elected even where the new orders did not show: those the controller has moved
        # go, the rest stay with broker b and are reported below.
        elect_errors = {tp: e for tp, e in self.cluster.elect_preferred(to_elect).items() if e}
        self.cluster.wait_for(f"leadership off broker {b}", led_elsewhere, timeout,
                              reads=CONFIRMING_READS)
        now = last   # the read the wait ended on, not a new one a lagging broker may answer
        still_led = sorted(tp for tp in to_elect if tp in now and now[tp].leader == b)
        details = {
            "replica_orders_shown": orders_shown,
            "replica_orders_wait_s": round(orders_s, 1),
            "reorder_errors": [{"topic": t, "partition": p, "error": e}
                               for (t, p), e in sorted(reorder_errors.items())],
            "elect_errors": [{"topic": t, "partition": p, "error": e}
                             for (t, p), e in sorted(elect_errors.items())],
            "leaders_after": [{"topic": t, "partition": p, "leader": now[(t, p)].leader,
                               "replicas": list(now[(t, p)].replicas)}
                              for (t, p) in sorted(accepted) if (t, p) in now]}
        moved = len(to_elect) - len(still_led)
        if reorder_errors or still_led:
            return False, (f"moved leadership of {moved} of {len(to_elect)} partition(s) off "
                           f"broker {b}; {len(reorder_errors)} reorder error(s), "
                           f"{len(still_led)} still led by it"
                           + ("" if orders_shown else
                              f"; the new replica orders had not shown after {orders_s:.0f} s")
                           ), details
        return True, (f"moved leadership of {moved} partition(s) off broker {b} and made it "
                      f"last in {len(accepted)} replica list(s)"), details

    def _restore_offsets(self, plan: RestorePlan) -> tuple[bool, str, dict[str, Any]]:
        errors = {tp: e for tp, e in self.cluster.alter_group_offsets(plan.group,
                                                                       plan.offsets).items() if e}
        after = self.cluster.committed(plan.group, [(t, p) for t, p, _ in plan.offsets])
        wrong = [(t, p, o) for t, p, o in plan.offsets if after.get((t, p)) != o]
        details = {"errors": [{"topic": t, "partition": p, "error": e}
                              for (t, p), e in sorted(errors.items())],
                   "committed_after": {f"{t}-{p}": o for (t, p), o in sorted(after.items())}}
        if errors or wrong:
            return False, (f"restored {len(plan.offsets) - len(wrong)} of {len(plan.offsets)} "
                           f"offset(s) of group {plan.group}"), details
        return True, f"restored group {plan.group}'s offsets: " + ", ".join(
            f"{t}-{p}={o}" for t, p, o in plan.offsets), details

    def _cancel_reassignments(self, plan: CancelPlan) -> tuple[bool, str, dict[str, Any]]:
        errors = {tp: e for tp, e in self.cluster.cancel_reassignments(plan.partitions).items()
                  if e}
        ok = self.cluster.wait_for("reassignments to stop", lambda: not (
            set(plan.partitions) & set(self.cluster.reassignments())),
            self.config.action_timeout_s)
        details = {"errors": [{"topic": t, "partition": p, "error": e}
                              for (t, p), e in sorted(errors.items())]}
        if errors or not ok:
            return False, (f"cancel of {len(plan.partitions)} reassignment(s): "
                           f"{len(errors)} error(s)"
                           + ("" if ok else ", still in progress at the timeout")), details
        return True, f"cancelled {len(plan.partitions)} reassignment(s)", details


def build_executor(config, *, bootstrap_servers: str | None = None,
                   results: ResultStore,
                   quarantine=None) -> Executor:
    """An executor for the watched cluster from the whole kmon Config: the Admin clients
    from [watch], the queue consumer from [telemetry], the rules from [remediation].

    `bootstrap_servers` overrides [watch] bootstrap_servers (the embedded mode passes the
    local cluster's); the queue is where the decision step publishes it
    (remediation.queue.queue_client_config: the monitoring Kafka when [telemetry] has one,
    else the watched cluster). Results go to
    `results` (a JsonLinesResultStore, or delta_tables.DeltaResultStore on a fleet).
    """
    from infra.kafka_clients import librdkafka_config
    from remediation.queue import queue_client_config
    from remediation.reassignments import JavaReassignments

    admin_conf = librdkafka_config(config.watch, "watch", bootstrap_servers)
    consumer_conf = queue_client_config(config, bootstrap_servers)
    section: RemediationSection = config.remediation
    live = LiveCluster(admin_conf, JavaReassignments.for_watched_cluster(config, bootstrap_servers),
                       timeout_s=min(60.0, section.action_timeout_s))
    return Executor(section, watch_cluster=config.watch.cluster, cluster=live, results=results,
                    consumer_config=consumer_conf, quarantine=quarantine)

