"""Data pipelines on Apache Spark (PySpark)."""
