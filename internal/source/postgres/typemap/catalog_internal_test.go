package typemap

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestBuiltinsMatchCatalog checks the built-in type tables (which spare
// capture a pg_type query for common types) against a real pg_type: the
// names are format_type's, every array's element and every element's
// delimiter are the catalog's.
func TestBuiltinsMatchCatalog(t *testing.T) {
	pg := testenv.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	for oid, name := range builtinNames {
		var formatted, delim string
		var typarray uint32
		err := conn.QueryRow(ctx, `SELECT format_type(oid, -1), typdelim::text, typarray FROM pg_type WHERE oid = $1`, oid).
			Scan(&formatted, &delim, &typarray)
		if err != nil {
			t.Errorf("type oid %d (%s): %v", oid, name, err)
			continue
		}
		if formatted != name {
			t.Errorf("type oid %d: builtinNames says %q, format_type %q", oid, name, formatted)
		}
		k, _ := Options{}.resolve(oid, -1, nil, 0)
		if string(k.delim) != delim {
			t.Errorf("type %s: delimiter %q, pg_type %q", name, k.delim, delim)
		}
		if elem, ok := builtinArrays[typarray]; !ok || elem != oid {
			t.Errorf("type %s: its array type %d is not in builtinArrays", name, typarray)
		}
	}
	for arr, elem := range builtinArrays {
		var typelem uint32
		var category string
		err := conn.QueryRow(ctx, `SELECT typelem, typcategory::text FROM pg_type WHERE oid = $1`, arr).Scan(&typelem, &category)
		if err != nil || typelem != elem || category != "A" {
			t.Errorf("array oid %d: builtinArrays says element %d; pg_type says %d, category %q (%v)", arr, elem, typelem, category, err)
		}
	}

	// formatType agrees with format_type for the modifiers that matter.
	mods := []struct {
		oid    uint32
		typmod int32
	}{
		{pgtype.NumericOID, 12<<16 | 2 + 4}, {pgtype.NumericOID, 2<<16 | (-3 & 0x7ff) + 4},
		{pgtype.NumericOID, 2<<16 | 5 + 4}, {pgtype.BPCharOID, 9}, {pgtype.VarcharOID, 14},
		{pgtype.BitOID, 3}, {pgtype.VarbitOID, 8}, {pgtype.TimeOID, 3}, {pgtype.TimetzOID, 0},
		{pgtype.TimestampOID, 6}, {pgtype.TimestamptzOID, 0},
	}
	for _, iv := range []string{"year", "month", "day", "hour", "minute", "second", "year to month",
		"day to hour", "day to minute", "day to second", "hour to minute", "hour to second",
		"minute to second", "second(3)", "day to second(0)", ""} {
		var typmod int32
		if err := conn.QueryRow(ctx, `SELECT atttypmod FROM pg_attribute WHERE attrelid = $1::regclass AND attnum = 1`,
			mustTempTable(ctx, t, conn, "interval "+iv)).Scan(&typmod); err != nil {
			t.Fatal(err)
		}
		mods = append(mods, struct {
			oid    uint32
			typmod int32
		}{pgtype.IntervalOID, typmod})
	}
	for _, m := range mods {
		var want string
		if err := conn.QueryRow(ctx, `SELECT format_type($1, $2)`, m.oid, m.typmod).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got := formatType(m.oid, m.typmod, builtinNames[m.oid]); got != want {
			t.Errorf("formatType(%d, %d) = %q, format_type says %q", m.oid, m.typmod, got, want)
		}
	}
}

// mustTempTable creates a temporary one-column table of type typ and
// returns its name.
func mustTempTable(ctx context.Context, t *testing.T, conn *pgx.Conn, typ string) string {
	t.Helper()
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS pg_temp.typmod_probe; CREATE TEMP TABLE typmod_probe (c `+typ+`)`); err != nil {
		t.Fatal(err)
	}
	return "pg_temp.typmod_probe"
}
