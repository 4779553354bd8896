package mysql

import (
	"strings"
	"testing"
)

func cols(names ...string) []Column {
	out := make([]Column, len(names))
	for i, n := range names {
		out[i] = Column{Schema: "shop", Table: "t", Name: n, ColumnType: "int", DataType: "int"}
	}
	return out
}

// TestAlteredColumns: the layout an ALTER TABLE's column clauses leave,
// in statement order, is what the next row events of the table carry.
func TestAlteredColumns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes []ColumnChange
		want    string
	}{
		{"add at the end", []ColumnChange{{Op: AddColumn, Column: "d", Type: "varchar(10)"}}, "a b c d"},
		{"add first", []ColumnChange{{Op: AddColumn, Column: "d", Type: "int", First: true}}, "d a b c"},
		{"add after", []ColumnChange{{Op: AddColumn, Column: "d", Type: "int", After: "a"}}, "a d b c"},
		{"add if not exists, present", []ColumnChange{{Op: AddColumn, Column: "b", Type: "int", IfNotExists: true}}, "a b c"},
		{"drop", []ColumnChange{{Op: DropColumn, Column: "b"}}, "a c"},
		{"drop absent", []ColumnChange{{Op: DropColumn, Column: "x", IfExists: true}}, "a b c"},
		{"rename", []ColumnChange{{Op: RenameColumn, Column: "b", NewName: "bb"}}, "a bb c"},
		{"change and move", []ColumnChange{{Op: ChangeColumn, Column: "c", NewName: "cc", Type: "bigint", First: true}}, "cc a b"},
		{"in order", []ColumnChange{{Op: AddColumn, Column: "d", Type: "int"}, {Op: DropColumn, Column: "a"}, {Op: RenameColumn, Column: "d", NewName: "e"}}, "b c e"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(columnNames(alteredColumns(cols("a", "b", "c"), tc.changes)), " ")
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	// A modified column takes its new type.
	out := alteredColumns(cols("a", "b"), []ColumnChange{{Op: ModifyColumn, Column: "b", Type: "bigint unsigned"}})
	if out[1].DataType != "bigint" || !out[1].Unsigned {
		t.Errorf("MODIFY b bigint unsigned: got %+v", out[1])
	}
}

// TestConstantDefault: only a constant DEFAULT is given to older rows.
func TestConstantDefault(t *testing.T) {
	for _, tc := range []struct {
		f      Flavor
		def    string
		extra  string
		want   string
		wantOK bool
	}{
		{MariaDB, "5", "", "5", true},
		{MariaDB, "-1.5", "", "-1.5", true},
		{MariaDB, "'it''s'", "", "it's", true},
		{MariaDB, "NULL", "", "", false},
		{MariaDB, "current_timestamp()", "", "", false},
		{MySQL, "abc", "", "abc", true},
		{MySQL, "CURRENT_TIMESTAMP", "DEFAULT_GENERATED", "", false},
	} {
		d := tc.def
		got, ok := constantDefault(tc.f, Column{Default: &d, Extra: tc.extra})
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s DEFAULT %s: got %q, %v; want %q, %v", tc.f, tc.def, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestFormatPosition(t *testing.T) {
	lsn := binlogPos{"mysql-bin.000007", 1234}.LSN()
	if lsn != 7<<32|1234 {
		t.Fatalf("LSN = %d", lsn)
	}
	if got := FormatPosition("mysql-bin", lsn); got != "mysql-bin.000007:1234" {
		t.Errorf("got %q", got)
	}
	if got := FormatPosition("", lsn); got != "000007:1234" {
		t.Errorf("got %q", got)
	}
}
