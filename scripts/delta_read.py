#!/usr/bin/env python3
"""Read a Delta table with delta-rs (the deltalake package) and print it as JSON.

An independent reader for the Delta tables internal/lake/delta writes: the
Go tests (internal/lake/delta/deltars_test.go) use it to check that what
tidemark writes is what another engine reads.

Usage:
    python scripts/delta_read.py [--cdf] [--version N] [--app-id ID]... [--query] DIR

--query reads the rows through delta-rs's DataFusion table provider
(QueryBuilder) instead of to_pyarrow_table, which refuses tables with
deletion vectors.

--duckdb reads the rows with DuckDB's delta extension (delta_scan) instead,
loaded from the duckdb-ext-delta wheel's directory (or
$TIDEMARK_DUCKDB_EXTENSIONS); it exits with status 3 when DuckDB or the
extension is not installed.

Prints one JSON object:
    version     the table's latest version
    rows        the rows of that version (or of --version N), as objects with
                JSON-safe values: decimals as fixed-point strings, binary as
                lower-case hex, dates and timestamps as ISO 8601 (timestamps
                in UTC with "+00:00", timestamp_ntz without an offset),
                structs as objects, lists as arrays
    protocol    minReaderVersion, minWriterVersion, readerFeatures,
                writerFeatures
    metadata    partitionColumns, configuration, name
    schema      the top-level field names and their Arrow types, in order
    history     the commitInfo of each commit, oldest first, with "version"
    files       the number of active data files
    stats       per active file, delta-rs's parsed add-action statistics
                (num_records, null_count.*, min.*, max.*) as JSON-safe values
    txns        with --app-id: the last txn version delta-rs reads for each
                application id (null if none)
    cdf         with --cdf: the change data feed from version 0 (load_cdf):
                the rows with _change_type and _commit_version

Requires: pip install deltalake
"""

import argparse
import base64
import datetime
import decimal
import json
import sys

import pyarrow as pa
from deltalake import DeltaTable


def safe(v):
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, datetime.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc)
        return v.isoformat(timespec="microseconds")
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, dict):
        return {k: safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [safe(x) for x in v]
    if isinstance(v, float) and v != v:
        return "NaN"
    return v


def duckdb_read(path):
    import os
    try:
        import duckdb
    except ImportError:
        print("DuckDB is not installed", file=sys.stderr)
        sys.exit(3)
    d = os.environ.get("TIDEMARK_DUCKDB_EXTENSIONS")
    if not d:
        try:
            import duckdb_ext
        except ImportError:
            print("the DuckDB extension wheels (duckdb-ext-delta) are not installed", file=sys.stderr)
            sys.exit(3)
        for p in duckdb_ext.__path__:
            e = os.path.join(p, "extensions")
            for root, _, files in os.walk(e):
                if "delta.duckdb_extension" in files:
                    d = e
    if not d:
        print("the DuckDB delta extension (duckdb-ext-delta) is not installed", file=sys.stderr)
        sys.exit(3)
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET extension_directory = ?", [d])
    con.execute("LOAD delta")
    return con.execute("SELECT * FROM delta_scan(?)", [path]).fetch_arrow_table()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--cdf", action="store_true")
    ap.add_argument("--version", type=int)
    ap.add_argument("--app-id", action="append", default=[])
    ap.add_argument("--query", action="store_true")
    ap.add_argument("--duckdb", action="store_true")
    a = ap.parse_args()
    dt = DeltaTable(a.dir)
    out = {"version": dt.version()}
    read = dt if a.version is None else DeltaTable(a.dir, version=a.version)
    if a.duckdb:
        tbl = duckdb_read(a.dir)
    elif a.query:
        from deltalake import QueryBuilder
        tbl = pa.table(QueryBuilder().register("t", read).execute("SELECT * FROM t"))
    else:
        tbl = read.to_pyarrow_table()
    out["rows"] = [safe(r) for r in tbl.to_pylist()]
    out["schema"] = [[f.name, str(f.type)] for f in tbl.schema]
    p = dt.protocol()
    out["protocol"] = {
        "minReaderVersion": p.min_reader_version,
        "minWriterVersion": p.min_writer_version,
        "readerFeatures": p.reader_features,
        "writerFeatures": p.writer_features,
    }
    m = dt.metadata()
    out["metadata"] = {
        "partitionColumns": list(m.partition_columns),
        "configuration": dict(m.configuration),
        "name": m.name,
    }
    out["history"] = [safe(h) for h in sorted(dt.history(), key=lambda h: h["version"])]
    out["files"] = len(dt.file_uris())
    adds = pa.table(dt.get_add_actions(flatten=True))
    out["stats"] = [safe(r) for r in adds.to_pylist()]
    out["txns"] = {app: dt.transaction_version(app) for app in a.app_id}
    if a.cdf:
        cdf = pa.table(dt.load_cdf(starting_version=0))
        out["cdf"] = [safe(r) for r in cdf.to_pylist()]
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
