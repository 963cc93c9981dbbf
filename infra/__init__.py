"""Adapters to what kmon runs on: the lake, Spark, the JVM jars, Kafka clients, a local cluster.

- lake.py: table paths, checkpoints and the Spark SQL catalog of the Delta lake.
- spark_session.py: the one place a SparkSession is built ([spark]).
- jvm_deps.py: the JVM jars from Maven Central ([jvm]).
- kafka_clients.py: librdkafka and Spark Kafka settings, secrets ([telemetry], [watch]).
- topic_configs.py: a watched cluster's topic configs, read with the AdminClient.
- local_cluster.py: a real local KRaft cluster from Apache jars ([local_cluster]).
- preflight.py: checks of Python, Java, Maven and disk before anything starts.
"""
