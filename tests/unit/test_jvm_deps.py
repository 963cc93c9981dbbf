"""The jar sets and the Maven pom kmon generates for them (no download here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.jvm_deps import ARTIFACT_SETS, JvmDeps, _artifact_name, _pom


@pytest.mark.parametrize("jar,name", [
    ("kafka-clients-3.9.1.jar", "kafka-clients"),
    ("delta-spark_4.1_2.13-4.4.0.jar", "delta-spark_4.1_2.13"),
    ("spark-sql-kafka-0-10_2.13-4.1.3.jar", "spark-sql-kafka-0-10_2.13"),
    ("zstd-jni-1.5.6-10.jar", "zstd-jni"),
    ("commons-pool2-2.12.1.jar", "commons-pool2"),
])
def test_artifact_name_strips_version(jar, name):
    assert _artifact_name(jar) == name


def test_pom_pins_every_artifact_and_repo():
    pom = _pom("broker", ARTIFACT_SETS["broker"], "https://mirror.example/maven2")
    assert "<url>https://mirror.example/maven2</url>" in pom
    for a in ARTIFACT_SETS["broker"]:
        assert f"<artifactId>{a.artifact}</artifactId><version>{a.version}</version>" in pom
    assert "log4j-core" in pom and "log4j-slf4j2-impl" in pom


def test_ready_stamp_ignores_repo_url_but_not_pins(tmp_path):
    a = JvmDeps(tmp_path, "https://a.example")
    b = JvmDeps(tmp_path, "https://b.example")
    assert a._stamp("spark") == b._stamp("spark")
    assert a._stamp("spark") != a._stamp("broker")
    assert not a.is_ready("spark")
    (tmp_path / "jvm" / "spark").mkdir(parents=True)
    (tmp_path / "jvm" / "spark" / "READY").write_text(a._stamp("spark"))
    assert b.is_ready("spark")


def test_failure_message_names_artifact_and_retry():
    d = JvmDeps(Path("/tmp/x"), "https://repo.example")
    msg = d._explain_failure("spark", "[ERROR] Failed ... Could not find artifact "
                                      "io.delta:delta-spark_4.1_2.13:jar:9.9.9 in central")
    assert "io.delta:delta-spark_4.1_2.13:jar:9.9.9" in msg
    assert "./kmonw setup" in msg and "https://repo.example" in msg
