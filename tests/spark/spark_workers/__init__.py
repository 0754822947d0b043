"""Scripts that run a SparkSession of their own in a subprocess, for tests that kill or
scale out Spark (``python -m tests.spark.spark_workers.<name>`` from the repository root),
and ``supervisor``, the test-side handle that starts, watches and SIGKILLs them."""
