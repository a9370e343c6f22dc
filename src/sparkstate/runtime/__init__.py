"""The adapter onto Spark. Only the ``spark_*`` modules import pyspark, and only when used."""
