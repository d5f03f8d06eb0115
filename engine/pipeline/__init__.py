"""The data pipeline on Apache Spark (SPEC §6): jobs over the Parquet archive that
engine/archive.py writes. pyspark is imported only in this package.

    spark.py       the SparkSession (local[*] by default, any master URL) and archive readers
    translate.py   a selector's WHEN (filter AST, match patterns) as Spark SQL columns
    traffic.py     the traffic report            python -m engine.pipeline.traffic
    backtest.py    the selector backtest         python -m engine.pipeline.backtest
    replay.py      selection for a replay        python -m engine.pipeline.replay

Every job is a function (`run` / `select`) the web service calls, and a command-line entry
point with `--archive PATH --out PATH [--master URL]`. See docs/pipeline.md.
"""
