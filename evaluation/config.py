"""The configuration the detector query reads, as a Protocol.

`kmon.config.Config` satisfies it; jobs/ never imports the assembled configuration (the
application shell builds that from every package's sections), only the sections it uses.
"""

from __future__ import annotations

from typing import Protocol

from core.findings import FindingsSection
from detectors.compaction_lag import CompactionLagSection
from detectors.correlation import CorrelationSection
from detectors.offset_rewind_config import OffsetRewindSection
from detectors.slow_broker import SlowBrokerSection
from detectors.unclean_election import UncleanElectionSection
from ingest.request_log_config import RequestLogSection
from jobs.pipeline_config import PipelineSection


class DetectionConfig(Protocol):
    source: str  # where the configuration came from, named in errors
    pipeline: PipelineSection
    findings: FindingsSection
    slow_broker: SlowBrokerSection
    offset_rewind: OffsetRewindSection
    compaction_lag: CompactionLagSection
    unclean_election: UncleanElectionSection
    correlation: CorrelationSection
    request_log: RequestLogSection   # which request tables the slow-broker reads
