#!/usr/bin/env python3
"""Read tidemark Iceberg tables with Apache Spark SQL and print them as JSON.

The third independent reader beside scripts/pyiceberg_read.py and
scripts/duckdb_read.py: `make interop` (internal/app/interop_spark_test.go)
uses it to check that Spark reads what tidemark writes.

Usage:
    python scripts/spark_read.py --warehouse DIR --jars JAR,JAR --ident-json IDENT [--ident-json IDENT ...]

IDENT is a table's identifier levels as a JSON list (["silver", "shop",
"public", "orders"]). --jars are the Iceberg Spark runtime
(iceberg-spark-runtime-3.5_2.12) and sqlite-jdbc, which
scripts/setup-interop-env.sh downloads into .interop-cache/jars.

Spark reaches the tables the way a user's Spark would: Spark SQL on a
catalog "tidemark" that is Iceberg's SparkCatalog over Iceberg's
JdbcCatalog on DIR/catalog.db (the SQLite catalog iceberg-go's SQL catalog
keeps; the JDBC catalog's tables are the same), warehouse DIR. The catalog
is only read (jdbc.init-catalog-tables=false). One local Spark session reads
every table given; the session's time zone is UTC.

Prints one JSON object per table, one a line, in the order given:
    ident         the identifier levels
    error         Spark's error when it cannot read the table (then nothing
                  else but ident), else absent
    types         the top-level columns' Spark SQL types ("bigint",
                  "timestamp_ntz", "array<date>")
    rows          the rows of `SELECT * FROM tidemark.<ident>` in the JSON
                  form of scripts/pyiceberg_read.py: decimals as fixed-point
                  strings at the column's scale, binary as lower-case hex, dates / timestamps as
                  ISO 8601 (timestamp with time zone in UTC with "+00:00")
                  from Spark's own day / µs count (unix_date / unix_micros,
                  elements of arrays too), the infinity sentinels
                  (docs/type-mapping.md) as "infinity"/"-infinity", and
                  counts Python's datetime cannot hold as "days:N"/"us:N"
    text          the same rows with each date / timestamp column (and
                  array of them) as Spark's own text of it,
                  CAST(c AS STRING): what a Spark user sees (other columns
                  left out)
    native_errors for each date / timestamp column whose values PySpark's
                  collect() cannot turn into Python objects, the error ({}
                  when all can)

Requires: pip install pyspark==3.5.*, Java 17.
"""

import argparse
import datetime
import decimal
import json
import os
import sys

INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
NEG_INF = {-INT32_MAX, -(2**31), -INT64_MAX, -(2**63)}


# The JSON form of a value, as scripts/pyiceberg_read.py gives it (the
# same canonical form for both readers).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyiceberg_read import json_safe  # noqa: E402


def temporal(v, kind):
    """The JSON value of a day count (kind "date") or µs count ("timestamp",
    "timestamp_ntz"), as scripts/pyiceberg_read.py renders it."""
    if v is None:
        return None
    if v == (INT32_MAX if kind == "date" else INT64_MAX):
        return "infinity"
    if v in NEG_INF:
        return "-infinity"
    if kind == "date":
        try:
            return (datetime.date(1970, 1, 1) + datetime.timedelta(days=v)).isoformat()
        except OverflowError:
            return "days:%d" % v
    try:
        ts = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=v)
    except OverflowError:
        return "us:%d" % v
    s = ts.isoformat(timespec="microseconds")
    return s + "+00:00" if kind == "timestamp" else s


def at_scale(v, dt):
    """v (a value of Spark type dt) with each decimal at dt's scale:
    PySpark hands a decimal(38,10) -1E-10 over as Decimal('-1.00E-10'),
    the same number with another exponent; PyIceberg's is at the column's
    scale (-0.0000000001)."""
    from pyspark.sql import types as T

    if v is None:
        return v
    if isinstance(dt, T.DecimalType):
        # Iceberg decimals have at most 38 digits: exact at 40.
        return v.quantize(decimal.Decimal(1).scaleb(-dt.scale), context=decimal.Context(prec=40))
    if isinstance(dt, T.ArrayType):
        return [at_scale(x, dt.elementType) for x in v]
    return v


def quote(name):
    return "`" + name.replace("`", "``") + "`"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", required=True, help="tidemark warehouse directory")
    ap.add_argument("--jars", required=True, help="comma-separated jars: iceberg-spark-runtime, sqlite-jdbc")
    ap.add_argument("--ident-json", action="append", required=True, help="a table's identifier levels as a JSON list")
    args = ap.parse_args()
    wh = os.path.abspath(args.warehouse)

    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("tidemark-spark-read")
        .config("spark.jars", args.jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config("spark.sql.catalog.tidemark", "org.apache.iceberg.spark.SparkCatalog")
        .config("spark.sql.catalog.tidemark.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
        .config("spark.sql.catalog.tidemark.uri", "jdbc:sqlite:" + os.path.join(wh, "catalog.db"))
        .config("spark.sql.catalog.tidemark.jdbc.init-catalog-tables", "false")
        .config("spark.sql.catalog.tidemark.warehouse", "file://" + wh)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def kind_of(dt):
        """"date"/"timestamp"/"timestamp_ntz" for a temporal type, the same
        prefixed "array:" for an array of one, else None."""
        if isinstance(dt, T.DateType):
            return "date"
        if isinstance(dt, T.TimestampType):
            return "timestamp"
        if type(dt).__name__ == "TimestampNTZType":
            return "timestamp_ntz"
        if isinstance(dt, T.ArrayType):
            k = kind_of(dt.elementType)
            if k and not k.startswith("array:"):
                return "array:" + k
        return None

    def count_expr(kind, x):
        if kind == "date":
            return "unix_date(%s)" % x
        if kind == "timestamp":
            return "unix_micros(%s)" % x
        # timestamp_ntz: its wall clock read as UTC (the session zone).
        return "unix_micros(CAST(%s AS TIMESTAMP))" % x

    for raw in args.ident_json:
        ident = json.loads(raw)
        table = "tidemark." + ".".join(quote(p) for p in ident)
        out = {"ident": ident}
        try:
            df = spark.table(table)
        except Exception as e:  # noqa: BLE001 - reported: what Spark says
            out["error"] = "%s: %s" % (type(e).__name__, str(e).strip().split("\n")[0])
            print(json.dumps(out, ensure_ascii=False), flush=True)
            continue
        fields = df.schema.fields
        kinds = {f.name: kind_of(f.dataType) for f in fields}
        sel, text_sel = [], []
        for f in fields:
            q, k = quote(f.name), kinds[f.name]
            if k is None:
                sel.append(q)
            elif k.startswith("array:"):
                sel.append("transform(%s, x -> %s) AS %s" % (q, count_expr(k[6:], "x"), q))
                text_sel.append("CAST(%s AS STRING) AS %s" % (q, q))
            else:
                sel.append("%s AS %s" % (count_expr(k, q), q))
                text_sel.append("CAST(%s AS STRING) AS %s" % (q, q))
        rows = []
        for r in spark.sql("SELECT %s FROM %s" % (", ".join(sel), table)).collect():
            row = {}
            for f in fields:
                v, k = r[f.name], kinds[f.name]
                if k is None:
                    row[f.name] = json_safe(at_scale(v, f.dataType))
                elif k.startswith("array:"):
                    row[f.name] = None if v is None else [temporal(x, k[6:]) for x in v]
                else:
                    row[f.name] = temporal(v, k)
            rows.append(row)
        text = []
        if text_sel:
            id_col = [quote(f.name) for f in fields if f.name == "id"]
            for r in spark.sql("SELECT %s FROM %s" % (", ".join(id_col + text_sel), table)).collect():
                text.append(r.asDict())
        errors = {}
        for f in fields:
            if kinds[f.name] is None:
                continue
            try:
                spark.sql("SELECT %s FROM %s" % (quote(f.name), table)).collect()
            except Exception as e:  # noqa: BLE001 - reported, per column
                errors[f.name] = "%s: %s" % (type(e).__name__, str(e).strip().split("\n")[0])
        out.update(
            types={f.name: f.dataType.simpleString() for f in fields},
            rows=rows,
            text=text,
            native_errors=errors,
        )
        print(json.dumps(out, ensure_ascii=False), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
