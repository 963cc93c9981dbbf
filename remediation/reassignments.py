"""Partition reassignments (list, start, cancel) through Kafka's Java Admin client.

confluent-kafka 2.16 (librdkafka 2.16) has no alter_partition_reassignments or
list_partition_reassignments (KIP-455's AlterPartitionReassignments and
ListPartitionReassignments requests): its AdminClient offers elect_leaders, but nothing
that changes a replica list. Rather than speak those two requests over a hand-written
socket client (which would also have to do SASL and TLS), kmon runs the small Java
program beside this module (java/PartitionReassignments.java) with Java's single-file
source launcher and the kafka-clients jar that `kmon setup` already resolved for the local
brokers (Java 17 is a kmon requirement anyway). It speaks to the watched cluster with the
same settings as the Python clients: [watch].client_config translated to the Java client's
keys (infra.kafka_clients.spark_kafka_options), the password read from its env var or file
and written only to a private temporary properties file for the call.

Each call starts a JVM (a few seconds); remediation acts a few times an hour at most.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping

from remediation.plans import Reassignment, TopicPartition

log = logging.getLogger(__name__)

JAVA_SOURCE = Path(__file__).parent / "java" / "PartitionReassignments.java"
# kafka-clients and the logging API it links against; nothing else is needed for Admin calls.
CLASSPATH_JARS = ("kafka-clients-", "slf4j-api-")


class ReassignmentError(RuntimeError):
    """The Java Admin call failed as a whole (cluster unreachable, bad setup)."""


def _escape_properties(text: str, is_key: bool) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if is_key:
        for c in (" ", "=", ":", "#", "!"):
            out = out.replace(c, "\\" + c)
    elif out.startswith(" "):
        out = "\\" + out
    return out


def properties_text(props: Mapping[str, str]) -> str:
    """java.util.Properties file text for `props`."""
    return "".join(f"{_escape_properties(k, True)}={_escape_properties(str(v), False)}\n"
                   for k, v in sorted(props.items()))


def java_client_properties(spark_options: Mapping[str, str]) -> dict[str, str]:
    """Java client settings from infra.kafka_clients.spark_kafka_options (``kafka.`` keys)."""
    props = {k[len("kafka."):]: str(v) for k, v in spark_options.items() if k.startswith("kafka.")}
    props.setdefault("client.id", "kmon-remediation")
    return props


def _parse_ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def parse_list_output(text: str) -> dict[TopicPartition, Reassignment]:
    out = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) != 5:
            raise ReassignmentError(f"unexpected line from the reassignment lister: {line!r}")
        r = Reassignment(f[0], int(f[1]), _parse_ids(f[2]), _parse_ids(f[3]), _parse_ids(f[4]))
        out[(r.topic, r.partition)] = r
    return out


def parse_alter_output(text: str) -> dict[TopicPartition, str | None]:
    out: dict[TopicPartition, str | None] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        f = line.split("\t")
        if f[0] == "ok" and len(f) == 3:
            out[(f[1], int(f[2]))] = None
        elif f[0] == "error" and len(f) == 4:
            out[(f[1], int(f[2]))] = f[3]
        else:
            raise ReassignmentError(f"unexpected line from the reassignment call: {line!r}")
    return out


def plan_text(plan: Mapping[TopicPartition, tuple[int, ...] | None]) -> str:
    return "".join(f"{t}\t{p}\t{'-' if r is None else ','.join(str(x) for x in r)}\n"
                   for (t, p), r in plan.items())


class JavaReassignments:
    """List, start and cancel reassignments with the Java Admin client."""

    def __init__(self, client_properties: Mapping[str, str], classpath: list[Path],
                 java: str | None = None, timeout_s: float = 180.0):
        self.props = dict(client_properties)
        self.classpath = [Path(p) for p in classpath]
        self.java = java or shutil.which("java") or "java"
        self.timeout_s = timeout_s

    @classmethod
    def for_watched_cluster(cls, config, bootstrap_servers: str | None = None,
                            timeout_s: float = 180.0) -> "JavaReassignments":
        """From the [watch] section, the broker jar set and [jvm].java_home."""
        from infra.jvm_deps import JvmDeps
        from infra.kafka_clients import spark_kafka_options

        options = spark_kafka_options(config.watch, "watch", bootstrap_servers)
        deps = JvmDeps(config.work_dir, config.jvm.maven_repo, config.jvm.offline)
        jars = [j for j in deps.ensure("broker") if Path(j).name.startswith(CLASSPATH_JARS)]
        java = None
        if config.jvm.java_home:
            java = str(Path(config.jvm.java_home) / "bin" / "java")
        return cls(java_client_properties(options), jars, java, timeout_s)

    def _run(self, command: str, stdin: str = "") -> str:
        with tempfile.TemporaryDirectory(prefix="kmon-reassign-") as tmp:
            props = Path(tmp) / "client.properties"
            fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(properties_text(self.props))
            cmd = [self.java, "-cp", os.pathsep.join(str(p) for p in self.classpath),
                   str(JAVA_SOURCE), str(props), command]
            try:
                proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                                      timeout=self.timeout_s)
            except (OSError, subprocess.TimeoutExpired) as e:
                raise ReassignmentError(f"reassignment {command} did not run: {e}") from e
        if proc.returncode != 0:
            err = "\n".join(line for line in proc.stderr.splitlines()
                            if not line.startswith("SLF4J"))
            raise ReassignmentError(f"reassignment {command} failed (exit {proc.returncode}): "
                                    f"{err.strip()[-2000:]}")
        return proc.stdout

    def list(self) -> dict[TopicPartition, Reassignment]:
        """Reassignments in progress, by partition."""
        return parse_list_output(self._run("list"))

    def alter(self, plan: Mapping[TopicPartition, tuple[int, ...] | None]
              ) -> dict[TopicPartition, str | None]:
        """Start (target replicas) or cancel (None) reassignments; the error per partition,
        None where it was accepted."""
        if not plan:
            return {}
        log.info("alterPartitionReassignments for %d partition(s)", len(plan))
        return parse_alter_output(self._run("alter", plan_text(plan)))
