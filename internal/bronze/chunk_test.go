package bronze_test

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/source/postgres/typemap"
)

// chunkColumns are source columns of several types, and the text of their
// values (PostgreSQL's output, "" for NULL) in rows.
var chunkColumns = []struct {
	name   string
	oid    uint32
	typmod int32
	rows   []string
}{
	{"id", pgtype.Int8OID, -1, []string{"1", "2", "3", "4", "5"}},
	{"n", pgtype.Int4OID, -1, []string{"7", "", "-2147483648", "0", "42"}},
	{"f", pgtype.Float4OID, -1, []string{"1.5", "NaN", "", "-0", "3.4028235e+38"}},
	{"amount", pgtype.NumericOID, (10<<16 | 2) + 4, []string{"12.50", "", "-99999999.99", "0.01", "1"}},
	{"s", pgtype.TextOID, -1, []string{"a", "", "héllo", "", "x y z"}},
	{"b", pgtype.BoolOID, -1, []string{"t", "f", "", "t", "f"}},
	{"at", pgtype.TimestamptzOID, -1, []string{"2024-01-02 03:04:05.123456+00", "infinity", "", "1999-12-31 23:59:59+00", "2024-06-01 00:00:00+00"}},
	{"d", pgtype.DateOID, -1, []string{"2024-01-02", "", "0001-01-01 BC", "2000-02-29", "2024-06-01"}},
	{"ints", pgtype.Int4ArrayOID, -1, []string{"{1,NULL,3}", "{}", "", "{7}", "{1,2}"}},
	{"tags", pgtype.TextArrayOID, -1, []string{`{a,"b c"}`, "", "{}", "{NULL}", "{x}"}},
}

// chunkInput maps chunkColumns and decodes their rows, both as the
// changes WriteBatch takes and as the Arrow arrays of a Chunk.
func chunkInput(t *testing.T) (*change.Schema, [][]any, []arrow.Array) {
	t.Helper()
	s := &change.Schema{Key: []string{"id"}}
	nrows := len(chunkColumns[0].rows)
	values := make([][]any, nrows)
	for i := range values {
		values[i] = make([]any, len(chunkColumns))
	}
	var cols []arrow.Array
	for c, col := range chunkColumns {
		m, err := typemap.Map(typemap.Column{Name: col.name, TypeOID: col.oid, TypeMod: col.typmod}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Fields = append(s.Fields, change.Field{Name: col.name, Type: m.IcebergType(), SourceType: m.SourceType()})
		b := array.NewBuilder(memory.DefaultAllocator, m.ArrowType())
		for r, text := range col.rows {
			var raw []byte
			if text != "" {
				raw = []byte(text)
			}
			v, err := m.Decode(raw)
			if err != nil {
				t.Fatalf("%s row %d: %v", col.name, r, err)
			}
			values[r][c] = v
			if err := m.AppendText(b, raw); err != nil {
				t.Fatal(err)
			}
		}
		cols = append(cols, b.NewArray())
		b.Release()
	}
	return s, values, cols
}

// TestChunkLandsAsItsChanges: a snapshot chunk written in columnar form
// (WriteChunk) lands in bronze exactly as the same rows written as
// changes (WriteBatch): same values, same positions, same metadata, in a
// table of the chunk's types and in one whose columns were widened since,
// or that has a column the chunk lacks.
func TestChunkLandsAsItsChanges(t *testing.T) {
	ctx := context.Background()
	wh := t.TempDir()
	cat, w := openWriter(t, wh)
	defer cat.Close()
	defer w.Close()
	s, values, cols := chunkInput(t)
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	// The widened table: n long, f double, amount decimal(14,2), ints
	// list<long>, and an extra column.
	wide := &change.Schema{Key: s.Key, Fields: append([]change.Field(nil), s.Fields...)}
	for i, f := range wide.Fields {
		switch f.Name {
		case "n":
			wide.Fields[i].Type = iceberg.PrimitiveTypes.Int64
		case "f":
			wide.Fields[i].Type = iceberg.PrimitiveTypes.Float64
		case "amount":
			wide.Fields[i].Type = iceberg.DecimalTypeOf(14, 2)
		case "ints":
			wide.Fields[i].Type = &iceberg.ListType{Element: iceberg.PrimitiveTypes.Int64}
		}
	}
	wide.Fields = append(wide.Fields, change.Field{Name: "extra", Type: iceberg.PrimitiveTypes.String})

	rowsT := change.TableID{Schema: "public", Name: "as_rows"}
	chunkT := change.TableID{Schema: "public", Name: "as_chunk"}
	wideT := change.TableID{Schema: "public", Name: "as_chunk_widened"}
	for id, sch := range map[change.TableID]*change.Schema{rowsT: s, chunkT: s, wideT: wide} {
		if _, err := w.OpenTable(ctx, id, sch); err != nil {
			t.Fatal(err)
		}
	}
	const lsn, tx = 500, 77
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	// Row 3 of the read (seq 3) was a dead letter: the chunk skips it.
	seq := []int64{1, 2, 4, 5, 6}
	props := map[string]string{pipeline.PropSnapshot: `{"status":"running","rows":5}`}
	var cs []*change.Change
	for i, v := range values {
		cs = append(cs, &change.Change{Table: rowsT, Op: change.OpRead, Schema: s, Values: v,
			Pos: change.Position{LSN: lsn, Seq: seq[i]}, TxID: tx, CommitTime: at})
	}
	if err := w.WriteBatch(ctx, rowsT, cs, props); err != nil {
		t.Fatal(err)
	}
	for _, id := range []change.TableID{chunkT, wideT} {
		c := &change.Chunk{Table: id, Schema: s, Columns: cols, Rows: len(values), LSN: lsn, Seq: seq, TxID: tx, CommitTime: at, Size: 1000}
		if err := w.WriteChunk(ctx, c, props); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if err := w.Flush(ctx, pipeline.Checkpoint{Resume: strconv.FormatUint(600, 10), Pos: 600, Watermark: time.Now()}); err != nil {
		t.Fatal(err)
	}
	want := comparable(bronzetest.Read(t, wh, bronze.Ident("src", rowsT)...))
	if len(want) != len(values) {
		t.Fatalf("WriteBatch landed %d rows, want %d", len(want), len(values))
	}
	for _, id := range []change.TableID{chunkT, wideT} {
		got := comparable(bronzetest.Read(t, wh, bronze.Ident("src", id)...))
		for i := range got {
			if id == wideT {
				if v, ok := got[i]["extra"]; !ok || v != "<nil>" {
					t.Errorf("%s row %d: extra = %v, want NULL", id, i, v)
				}
				delete(got[i], "extra")
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s differs from the rows written as changes:\n got  %v\n want %v", id, got, want)
		}
		if p := mustLoad(t, cat, bronze.Ident("src", id)).Summary()[pipeline.PropSnapshot]; p != props[pipeline.PropSnapshot] {
			t.Errorf("%s: snapshot progress %q, want %q", id, p, props[pipeline.PropSnapshot])
		}
	}
}

// comparable sorts rows by position and drops what differs between two
// writes of the same rows (the capture time).
func comparable(rows []bronzetest.Row) []map[string]string {
	bronzetest.Sort(rows)
	var out []map[string]string
	for _, r := range rows {
		m := map[string]string{}
		for k, v := range r {
			if k == bronze.ColProcessedAt {
				continue
			}
			m[k] = fmt.Sprintf("%v", v)
		}
		out = append(out, m)
	}
	return out
}
