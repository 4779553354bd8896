#!/usr/bin/env python3
"""Read a tidemark Iceberg table with PyIceberg and print it as JSON.

An independent reader for tidemark's tables: the Go tests
(internal/lake/iceberg/pyiceberg_test.go) use it to check that what
iceberg-go writes is what another engine reads.

Usage:
    python scripts/pyiceberg_read.py --warehouse DIR TABLE
    python scripts/pyiceberg_read.py --warehouse DIR --uri postgresql+psycopg2://... TABLE
    python scripts/pyiceberg_read.py --warehouse s3://bucket/prefix --rest http://host:port TABLE

TABLE is the dotted identifier, e.g. bronze.shop.public.orders, or with
--ident-json the levels as a JSON list (["silver", "shop", "My Schema",
"select"]), which needs no splitting. The catalog
is PyIceberg's SqlCatalog named "tidemark", by default on the SQLite file
DIR/catalog.db, which is where tidemark puts it; with --rest, PyIceberg's
RestCatalog at that URL, reading S3 files with the endpoint, region and
credentials of the usual AWS variables (AWS_ENDPOINT_URL_S3, AWS_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).

Prints one JSON object:
    rows        the live rows of the current snapshot, as objects with
                JSON-safe values: decimals as fixed-point strings, binary as
                lower-case hex, dates/times/timestamps as ISO 8601 with
                microseconds (timestamptz in UTC with "+00:00"), lists as
                arrays, NaN/Infinity as strings; the infinity sentinels as
                "infinity"/"-infinity", and dates/timestamps Python cannot hold
                (before year 1, after 9999) as "days:N"/"us:N" (since 1970),
                in list elements too
    summary     the current snapshot's summary, "operation" included ({} if
                the table has no snapshot)
    schema      the current schema's top-level field names, in order
    types       the current schema's top-level field types by name, as
                PyIceberg prints them ("string", "time", "long", "list<string>")
    snapshots   how many snapshots the table's metadata holds
    namespaces  every namespace PyIceberg lists, walking down from the root,
                as dotted strings, sorted
    tables      the tables PyIceberg lists in TABLE's namespace, dotted, sorted

Requires: pip install "pyiceberg[sql-sqlite,pyarrow]"
"""

import argparse
import datetime
import decimal
import json
import math
import os
import sys


def json_safe(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, datetime.datetime):  # before date: datetime is a date
        if v.tzinfo is not None:
            v = v.astimezone(datetime.timezone.utc)
        return v.isoformat(timespec="microseconds")
    if isinstance(v, datetime.date):
        return v.isoformat()
    if isinstance(v, datetime.time):
        return v.isoformat(timespec="microseconds")
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    return str(v)


def all_namespaces(cat):
    out, todo = [], [()]
    while todo:
        parent = todo.pop()
        for ns in cat.list_namespaces(parent):
            ns = tuple(ns)
            if ns not in out:
                out.append(ns)
                todo.append(ns)
    return sorted(".".join(ns) for ns in out)


INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
# -infinity is -MAX (DuckDB's); MIN is how tidemark stored it before.
NEG_INF = {-INT32_MAX, -(2**31), -INT64_MAX, -(2**63)}


def temporal(v, t):
    """The Python value of a date32 / timestamp count v of arrow type t."""
    import pyarrow as pa

    hi = INT32_MAX if pa.types.is_date32(t) else INT64_MAX
    if v is None:
        return None
    if v == hi:
        return "infinity"
    if v in NEG_INF:
        return "-infinity"
    if pa.types.is_date32(t):
        try:
            return datetime.date(1970, 1, 1) + datetime.timedelta(days=v)
        except OverflowError:  # before year 1 or after 9999
            return "days:%d" % v
    try:
        ts = datetime.datetime(1970, 1, 1) + datetime.timedelta(microseconds=v)
    except OverflowError:
        return "us:%d" % v
    if t.tz is not None:
        ts = ts.replace(tzinfo=datetime.timezone.utc)
    return ts


def to_rows(arrow_table):
    """Like to_pylist, but renders tidemark's documented infinity sentinels
    (date: ±(2^31-1) days; timestamp: ±(2^63-1) µs, as DuckDB stores them)
    as "infinity"/"-infinity", which Python's datetime cannot hold; in list
    columns too."""
    import pyarrow as pa

    def is_temporal(t):
        return pa.types.is_date32(t) or pa.types.is_timestamp(t)

    def count_type(t):
        return pa.int32() if pa.types.is_date32(t) else pa.int64()

    cols = {}
    for name in arrow_table.column_names:
        col = arrow_table.column(name)
        t = col.type
        if is_temporal(t):
            cols[name] = [temporal(v, t) for v in col.cast(count_type(t)).to_pylist()]
        elif pa.types.is_list(t) and is_temporal(t.value_type):
            et = t.value_type
            raw = col.cast(pa.list_(count_type(et))).to_pylist()
            cols[name] = [None if l is None else [temporal(v, et) for v in l] for l in raw]
        else:
            cols[name] = col.to_pylist()
    n = arrow_table.num_rows
    return [{k: cols[k][i] for k in arrow_table.column_names} for i in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", required=True, help="tidemark warehouse directory")
    ap.add_argument("--uri", help="SQLAlchemy URI of the catalog (default: sqlite:///DIR/catalog.db)")
    ap.add_argument("--rest", help="URL of an Iceberg REST catalog (instead of the SQL catalog)")
    ap.add_argument("table", nargs="?", help="dotted table identifier, e.g. bronze.shop.public.orders")
    ap.add_argument("--ident-json", help='the identifier levels as a JSON list, e.g. ["bronze", "shop", "public", "orders"]')
    args = ap.parse_args()
    if (args.table is None) == (args.ident_json is None):
        ap.error("give TABLE or --ident-json")
    ident = tuple(json.loads(args.ident_json)) if args.ident_json else tuple(args.table.split("."))

    if args.rest:
        from pyiceberg.catalog.rest import RestCatalog

        props = {"uri": args.rest}
        for prop, env in (
            ("s3.endpoint", "AWS_ENDPOINT_URL_S3"),
            ("s3.region", "AWS_REGION"),
            ("s3.access-key-id", "AWS_ACCESS_KEY_ID"),
            ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY"),
        ):
            if os.environ.get(env):
                props[prop] = os.environ[env]
        cat = RestCatalog("tidemark", **props)
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        wh = os.path.abspath(args.warehouse)
        uri = args.uri or "sqlite:///" + os.path.join(wh, "catalog.db")
        cat = SqlCatalog("tidemark", uri=uri, warehouse="file://" + wh)

    tbl = cat.load_table(ident)
    snap = tbl.current_snapshot()
    rows = to_rows(tbl.scan().to_arrow()) if snap is not None else []
    summary = {}
    if snap is not None and snap.summary is not None:
        summary = {"operation": str(snap.summary.operation.value), **snap.summary.additional_properties}
    namespace = ident[:-1]

    json.dump(
        {
            "rows": [{k: json_safe(v) for k, v in r.items()} for r in rows],
            "summary": summary,
            "schema": [f.name for f in tbl.schema().fields],
            "types": {f.name: str(f.field_type) for f in tbl.schema().fields},
            "snapshots": len(tbl.metadata.snapshots),
            "namespaces": all_namespaces(cat),
            "tables": sorted(".".join(t) for t in cat.list_tables(namespace)),
        },
        sys.stdout,
        ensure_ascii=False,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
