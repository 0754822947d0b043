"""Clusters of existing distributed engines on this machine, for tests, demos and people:
a replicated Apache Kafka (``KafkaCluster``) and a Spark standalone cluster
(``SparkCluster``). headrace's own code runs against them unchanged; nothing here is a
distributed engine of ours."""

from headrace.cluster.errors import ClusterError
from headrace.cluster.kafka import KafkaCluster
from headrace.cluster.spark import SparkCluster

__all__ = ["ClusterError", "KafkaCluster", "SparkCluster"]
