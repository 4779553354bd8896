#!/usr/bin/env python3
"""Replay a tidemark bronze table into the source table's current state,
with PyIceberg, by the rule docs/bronze.md documents ("Replaying bronze into
the current state"), and print the rows as JSON.

The test suite runs it to check that the documented rule, applied by an
independent reader, gives the source's rows (internal/app/ddl_test.go).

Usage:
    python scripts/bronze_replay.py --warehouse DIR --key id bronze.shop.public.orders

Prints {"rows": [...]}: one object per live key, values JSON-safe as
scripts/pyiceberg_read.py renders them.

Requires: pip install "pyiceberg[sql-sqlite,pyarrow]"
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pyiceberg_read import json_safe  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--key", required=True, help="comma-separated key columns")
    ap.add_argument("table")
    args = ap.parse_args()

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    wh = os.path.abspath(args.warehouse)
    cat = SqlCatalog("tidemark", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    levels = args.table.split(".")
    source = levels[1]
    checkpoint = cat.load_namespace_properties(("bronze", source))
    upto = int(checkpoint["tidemark.commit-lsn"])
    tbl = cat.load_table(args.table)

    # 1. transaction-consistent rows
    rows = tbl.scan(row_filter=f"cdc_source_lsn <= {upto}").to_arrow().to_pylist()

    # 2. columns added with a constant default: the rows the table held at
    # the recorded snapshot were written before the column existed
    for col, d in json.loads(tbl.properties.get("tidemark.defaults", "{}")).items():
        if d["snapshot"] == -1:
            continue
        old = tbl.scan(snapshot_id=d["snapshot"], selected_fields=("cdc_source_lsn", "cdc_seq")).to_arrow()
        before = set(zip(old["cdc_source_lsn"].to_pylist(), old["cdc_seq"].to_pylist()))
        typ = tbl.schema().as_arrow().field(col).type
        value = pa.array([d["value"]]).cast(typ)[0].as_py()
        for r in rows:
            if r[col] is None and (r["cdc_source_lsn"], r["cdc_seq"]) in before:
                r[col] = value

    # 3. position order
    rows.sort(key=lambda r: (r["cdc_source_lsn"], r["cdc_seq"]))

    # 4. fold per key
    key = args.key.split(",")
    state = {}
    removed = {}  # (lsn, seq) of a d -> the row it removed
    for r in rows:
        op = r["cdc_op"]
        if op == "t":
            state.clear()
            continue
        k = tuple(r[c] for c in key)
        if op == "d":
            removed[(r["cdc_source_lsn"], r["cdc_seq"])] = state.pop(k, {})
            continue
        new = {c: v for c, v in r.items() if not c.startswith("cdc_")}
        prev = state.get(k, {}) if op != "c" else removed.get((r["cdc_source_lsn"], r["cdc_seq"] - 1), {})
        for c in r["cdc_unchanged"] or []:
            new[c] = prev.get(c)
        state[k] = new

    json.dump({"rows": [json_safe(state[k]) for k in sorted(state)]}, sys.stdout)


if __name__ == "__main__":
    main()
