package typemap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestPgoutputMatchesSelect is the premise of the package: under
// SessionSettings, pgoutput's text tuples (streaming) and a text-format
// SELECT (snapshots) spell every value identically, so one decoder serves
// both. It also checks that pgoutput's Relation message describes each
// column as pg_attribute does (a domain column by the domain, not its base
// type), so Map gives the same answer on both paths.
func TestPgoutputMatchesSelect(t *testing.T) {
	pg := testenv.Shared(t)
	url := pg.CreateDB(t, "typemap_repl")
	pg.Exec(t, url, goldenDDL+"CREATE PUBLICATION typemap_pub FOR TABLE golden;")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	rcfg, err := pgconn.ParseConfig(url + "&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range typemap.SessionSettings() {
		rcfg.RuntimeParams[k] = v
	}
	repl, err := pgconn.ConnectConfig(ctx, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(context.Background())
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, "typemap_slot", "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		t.Fatal(err)
	}
	start, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}

	pg.Exec(t, url, goldenRows)

	conn := connect(ctx, t, url)
	lookup := catalogLookup(ctx, conn)
	cols, _ := tableColumns(ctx, t, conn, "golden")
	mappings := make([]typemap.Mapping, len(cols))
	for i, c := range cols {
		if mappings[i], err = typemap.Map(c, lookup); err != nil {
			t.Fatal(err)
		}
	}
	selected := selectText(ctx, t, conn, "SELECT * FROM golden ORDER BY id", lookup, mappings)

	err = pglogrepl.StartReplication(ctx, repl, "typemap_slot", start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'typemap_pub'"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var streamed [][][]byte
	for len(streamed) < len(selected) {
		msg, err := repl.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("after %d of %d inserts: %v", len(streamed), len(selected), err)
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("replication error: %v", pgconn.ErrorResponseToPgError(e))
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue // keepalives: the test finishes well within wal_sender_timeout
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		lm, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatal(err)
		}
		switch m := lm.(type) {
		case *pglogrepl.RelationMessage:
			if err := sameColumns(m, cols); err != nil {
				t.Error(err)
			}
		case *pglogrepl.InsertMessage:
			row := make([][]byte, len(m.Tuple.Columns))
			for i, c := range m.Tuple.Columns {
				switch c.DataType {
				case pglogrepl.TupleDataTypeText:
					row[i] = c.Data
					if row[i] == nil {
						row[i] = []byte{}
					}
				case pglogrepl.TupleDataTypeNull:
				default:
					t.Fatalf("insert column %s: tuple data type %q, want text or null", cols[i].Name, c.DataType)
				}
			}
			streamed = append(streamed, row)
		}
	}

	for r := range selected {
		for i := range cols {
			s, p := selected[r][i], streamed[r][i]
			if (s == nil) != (p == nil) || !bytes.Equal(s, p) {
				t.Errorf("row %d column %s: SELECT sent %q, pgoutput sent %q", r+1, cols[i].Name, s, p)
			}
		}
	}
}

func sameColumns(rel *pglogrepl.RelationMessage, cols []typemap.Column) error {
	if len(rel.Columns) != len(cols) {
		return fmt.Errorf("relation message has %d columns, pg_attribute %d", len(rel.Columns), len(cols))
	}
	var errs []error
	for i, rc := range rel.Columns {
		c := cols[i]
		if rc.Name != c.Name || rc.DataType != c.TypeOID || rc.TypeModifier != c.TypeMod {
			errs = append(errs, fmt.Errorf("relation column %d is %s oid %d typmod %d, pg_attribute says %s oid %d typmod %d",
				i, rc.Name, rc.DataType, rc.TypeModifier, c.Name, c.TypeOID, c.TypeMod))
		}
	}
	return errors.Join(errs...)
}
