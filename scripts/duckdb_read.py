#!/usr/bin/env python3
"""Read a tidemark Iceberg table with DuckDB (iceberg extension), print JSON.

A second independent reader beside scripts/pyiceberg_read.py: the Go tests
(internal/source/postgres/duckdb_test.go) use it to check that DuckDB reads
what tidemark writes, special values included.

Usage:
    python scripts/duckdb_read.py --warehouse DIR TABLE
    python scripts/duckdb_read.py --metadata FILE [--sql QUERY]

TABLE is the dotted identifier, e.g. bronze.shop.public.orders. The table's
current metadata file is found through PyIceberg's SqlCatalog on
DIR/catalog.db; DuckDB reads it with iceberg_scan. With --metadata, the
table is that metadata file (e.g. the metadata_location a PostgreSQL
catalog's iceberg_tables row holds). --sql runs QUERY, which names the
table as t, instead of SELECT * FROM t. The extensions (avro,
iceberg) are loaded from the duckdb-ext-avro / duckdb-ext-iceberg wheels'
directory (SET extension_directory), never downloaded.

Prints one JSON object:
    rows          the rows, each value as DuckDB's own text of it
                  (CAST(col AS VARCHAR); NULL as null), timestamptz in UTC
    native_errors for each column whose values DuckDB's Python client
                  could not fetch as Python objects, the error (a -infinity
                  DuckDB cannot represent fails here); {} when all fetch

Requires: pip install duckdb duckdb-ext-avro duckdb-ext-iceberg "pyiceberg[sql-sqlite,pyarrow]"
"""

import argparse
import json
import os
import sys


def extension_directory():
    import duckdb_ext  # namespace package of the duckdb-ext-* wheels

    for p in duckdb_ext.__path__:
        d = os.path.join(p, "extensions")
        if os.path.isdir(d):
            return d
    raise SystemExit("duckdb_read.py: no duckdb_ext/extensions directory: pip install duckdb-ext-avro duckdb-ext-iceberg")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", help="tidemark warehouse directory (its SQLite catalog finds TABLE)")
    ap.add_argument("--metadata", help="the table's metadata file, instead of --warehouse and TABLE")
    ap.add_argument("--sql", default="SELECT * FROM t", help="the query to run, naming the table t")
    ap.add_argument("table", nargs="?", help="dotted table identifier, e.g. bronze.shop.public.orders")
    args = ap.parse_args()

    import duckdb

    if args.metadata:
        loc = args.metadata
    else:
        if not args.warehouse or not args.table:
            ap.error("give --warehouse DIR TABLE, or --metadata FILE")
        from pyiceberg.catalog.sql import SqlCatalog

        wh = os.path.abspath(args.warehouse)
        cat = SqlCatalog("tidemark", uri="sqlite:///" + os.path.join(wh, "catalog.db"), warehouse="file://" + wh)
        loc = cat.load_table(tuple(args.table.split("."))).metadata_location
    if loc.startswith("file://"):
        loc = loc[len("file://"):]

    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET extension_directory = ?", [extension_directory()])
    con.execute("LOAD avro")
    con.execute("LOAD iceberg")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE VIEW t AS SELECT * FROM iceberg_scan(%s)" % ("'" + loc.replace("'", "''") + "'"))
    scan = "(%s)" % args.sql
    cols = [r[0] for r in con.execute("DESCRIBE SELECT * FROM " + scan).fetchall()]
    q = lambda c: '"' + c.replace('"', '""') + '"'
    text = con.execute("SELECT " + ", ".join("CAST(%s AS VARCHAR)" % q(c) for c in cols) + " FROM " + scan).fetchall()
    errors = {}
    for c in cols:
        try:
            con.execute("SELECT %s FROM %s" % (q(c), scan)).fetchall()
        except Exception as e:  # noqa: BLE001 - reported, per column
            errors[c] = "%s: %s" % (type(e).__name__, e)
    json.dump({"rows": [dict(zip(cols, r)) for r in text], "native_errors": errors}, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
