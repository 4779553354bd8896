package event_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/event"
	"github.com/tidemark/tidemark/internal/source/mysql"
)

func TestParseShape(t *testing.T) {
	for _, s := range []string{"tidemark", "debezium", "beam", "Debezium"} {
		if _, err := event.ParseShape(s); err != nil {
			t.Errorf("ParseShape(%q): %v", s, err)
		}
	}
	_, err := event.ParseShape("avro")
	if err == nil || !strings.Contains(err.Error(), "tidemark, debezium, beam") {
		t.Errorf("ParseShape(avro) = %v, want an error naming the shapes", err)
	}
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return m
}

// TestDebeziumDecimal: a decimal is the base64 of its unscaled value's
// shortest big-endian two's complement, as Kafka Connect's Decimal (Java's
// BigInteger.toByteArray) writes it.
func TestDebeziumDecimal(t *testing.T) {
	schema := &change.Schema{Fields: []change.Field{{Name: "d", Type: iceberg.DecimalTypeOf(10, 2)}}, Key: []string{"d"}}
	enc, err := event.NewEncoder(event.Options{Shape: event.Debezium, Connector: event.PostgreSQL})
	if err != nil {
		t.Fatal(err)
	}
	for unscaled, want := range map[int64]string{
		0: "AA==", 1: "AQ==", 127: "fw==", 128: "AIA=", 255: "AP8=", 999: "A+c=",
		-1: "/w==", -128: "gA==", -129: "/38=", -1050: "++Y=", -32768: "gAA=", -32769: "/3//",
	} {
		b, err := enc.Change(&change.Change{Table: change.TableID{Schema: "s", Name: "t"}, Op: change.OpInsert,
			Values: []any{decimal128.FromI64(unscaled)}, Schema: schema, CommitTime: time.Unix(0, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if got := decode(t, b)["after"].(map[string]any)["d"]; got != want {
			t.Errorf("unscaled %d: %v, want %s", unscaled, got, want)
		}
	}
}

// TestMySQLShapes: a MySQL change's Debezium source block carries the
// binlog file and position, and Beam's metadata.schema the file name (as
// Beam reads it from Debezium's MySQL source, which has no schema).
func TestMySQLShapes(t *testing.T) {
	lsn, err := mysql.PositionLSN("mysql-bin.000007", 1234)
	if err != nil {
		t.Fatal(err)
	}
	c := &change.Change{Table: change.TableID{Schema: "shop", Name: "orders"}, Op: change.OpUpdate,
		Values: []any{int32(1)}, Schema: &change.Schema{Fields: []change.Field{{Name: "id", Type: iceberg.Int32Type{}}}},
		Pos: change.Position{LSN: lsn, Seq: 3}, CommitTime: time.UnixMilli(1700000000123)}
	o := event.Options{Connector: event.MySQL, Name: "src", Database: "shop", Binlog: func(lsn uint64) (string, uint32) {
		idx, pos := mysql.SplitLSN(lsn)
		return fmt.Sprintf("mysql-bin.%06d", idx), pos
	}}
	o.Shape = event.Debezium
	enc, _ := event.NewEncoder(o)
	b, _ := enc.Change(c)
	src := decode(t, b)["source"].(map[string]any)
	if src["connector"] != "mysql" || src["file"] != "mysql-bin.000007" || src["pos"] != json.Number("1234") ||
		src["row"] != json.Number("3") || src["table"] != "orders" || src["db"] != "shop" || src["ts_ms"] != json.Number("1700000000123") {
		t.Errorf("debezium source: %s", b)
	}
	o.Shape = event.Beam
	enc, _ = event.NewEncoder(o)
	b, _ = enc.Change(c)
	md := decode(t, b)["metadata"].(map[string]any)
	if md["schema"] != "mysql-bin.000007" || md["database"] != "shop" || md["table"] != "orders" {
		t.Errorf("beam metadata: %s", b)
	}
	o.Shape = event.Tidemark
	enc, _ = event.NewEncoder(o)
	b, _ = enc.Change(c)
	if p := decode(t, b)["source"].(map[string]any)["position"]; p != "mysql-bin.000007:1234:3" {
		t.Errorf("tidemark position %v, want mysql-bin.000007:1234:3", p)
	}
}

// TestDeadLetterKept: every shape writes a dead-letter row, with its
// error and raw text, and before and after null.
func TestDeadLetterKept(t *testing.T) {
	d := change.DeadLetter{Table: change.TableID{Schema: "public", Name: "t"}, Op: change.OpInsert,
		Raw: `{"id":"1","v":"bad"}`, Error: "cannot decode v"}
	for _, s := range event.Shapes {
		for _, schema := range []bool{false, true} {
			enc, _ := event.NewEncoder(event.Options{Shape: s, Schema: schema, Connector: event.PostgreSQL})
			b, err := enc.DeadLetter(d)
			if err != nil {
				t.Fatal(err)
			}
			m := decode(t, b)
			if p, ok := m["payload"].(map[string]any); ok {
				m = p
			}
			if m["error"] != d.Error || m["raw"] != d.Raw || m["after"] != nil || m["before"] != nil {
				t.Errorf("%s (schema %v): %s", s, schema, b)
			}
		}
	}
}
