"""kmon/spark_session.spark_conf: the settings a session is built with, by master (pure; no
JVM)."""

from __future__ import annotations

import pytest

from core.config_keys import ConfigError
from infra.spark_session import spark_conf
from kmon.config import Config, load_config

pytestmark = pytest.mark.unit

INTERPRETED = {"spark.sql.codegen.wholeStage": "false",
               "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def _conf(**spark):
    return spark_conf(Config().with_overrides(spark=spark), jars=[])


def _interpreted(conf):
    return all(conf.get(k) == v for k, v in INTERPRETED.items())


@pytest.mark.parametrize("master, codegen, interpreted", [
    ("local[2]", "auto", True),             # the embedded default: one small machine
    ("spark://master:7077", "auto", False),  # a cluster keeps Spark's compiled code
    ("yarn", "auto", False),
    ("local[2]", "on", False),
    ("spark://master:7077", "off", True),
])
def test_queries_run_interpreted_on_one_machine_and_compiled_on_a_cluster(master, codegen,
                                                                         interpreted):
    conf = _conf(master=master, codegen=codegen)
    assert _interpreted(conf) is interpreted
    if not interpreted:
        assert not any(k in conf for k in INTERPRETED)


def test_extra_conf_still_has_the_last_word():
    conf = _conf(master="local[2]", extra_conf={"spark.sql.codegen.wholeStage": "true"})
    assert conf["spark.sql.codegen.wholeStage"] == "true"


def test_a_bad_codegen_value_names_the_key(tmp_path):
    bad = tmp_path / "kmon.toml"
    bad.write_text('[spark]\ncodegen = "sometimes"\n')
    with pytest.raises(ConfigError, match=r"spark\.codegen"):
        load_config(bad)


LOCAL_FILE_APIS = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.delta.logStore.file.impl": "io.delta.storage.LocalLogStore",
}


@pytest.mark.parametrize("root, local", [
    ("/var/lib/kmon/lake", True),
    ("file:/var/lib/kmon/lake", True),
    ("file:///var/lib/kmon/lake", True),
    ("s3a://bucket/kmon", False),
    ("abfss://lake@account.dfs.core.windows.net/kmon", False),
    ("hdfs://namenode:8020/kmon", False),
])
def test_a_lake_on_local_disk_uses_the_file_apis_that_fork_no_process(root, local):
    conf = _conf(master="spark://master:7077", storage_root=root)
    for key, value in LOCAL_FILE_APIS.items():
        assert (conf.get(key) == value) is local, key
