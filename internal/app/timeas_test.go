package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/silver"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/verify"
)

// TestTimeAs: with time_as: text a PostgreSQL time column (24:00:00,
// fractional seconds and NULL included, from the snapshot and from the
// stream) lands in silver as a string that PyIceberg reads equal to the
// source's text, and verify finds the table equal. A restart under another
// time_as is refused (incompatible_schema, naming time_as and the
// recovery) before anything is written; `resnapshot --replace` under
// time_as: micros rebuilds the table as long microseconds, equal again.
func TestTimeAs(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "timeas")
	source := sourceName(t, srcURL)
	pg.Exec(t, srcURL, `CREATE TABLE clock (id int PRIMARY KEY, t time, t3 time(3), ta time[], tz timetz);
		INSERT INTO clock VALUES
			(1, '24:00:00', '12:00:00.5', '{00:00:00,24:00:00,NULL}', '03:04:05+02'),
			(2, '23:59:59.999999', '23:59:59.999', NULL, NULL),
			(3, NULL, NULL, '{}', NULL),
			(4, '00:00:00', '00:00:00.001', '{12:34:56.789}', '00:00:00-03:30')`)
	r, wh := newRunner(t, bin, srcURL, "--silver-every", "300ms", "--time-as", "text")

	s := r.Start()
	waitLake(t, s, wh)
	pg.Exec(t, srcURL, `INSERT INTO clock VALUES (5, '24:00:00', '01:02:03.456', '{24:00:00}', NULL), (6, '13:14:15.1', NULL, NULL, '23:59:59.5+14');
		UPDATE clock SET t = '00:00:00.000001', ta = '{23:59:59.999999}' WHERE id = 2;
		DELETE FROM clock WHERE id = 4`)
	verifyTimeAs(t, s, srcURL, wh, source, "text")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	// verify under another time_as says so instead of reporting every row.
	out, code := tidemarkArgs(t, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "10s")
	if code != verify.ExitIncomplete || !strings.Contains(out, "time_as") || !strings.Contains(out, "--time-as text") {
		t.Errorf("verify without --time-as on a time_as: text lake exited %d, want %d naming --time-as text:\n%s", code, verify.ExitIncomplete, out)
	}
	t.Logf("tidemark verify without --time-as:\n%s", strings.TrimSpace(out))
	types, rows := pyReadTyped(t, wh, silver.Ident(source, "public", "clock"))
	wantTypes := map[string]string{"t": "string", "t3": "string", "ta": "list<string>", "tz": "string"}
	for c, w := range wantTypes {
		if types[c] != w {
			t.Errorf("silver clock column %s is %q in PyIceberg's schema, want %q (all: %v)", c, types[c], w, types)
		}
	}
	want := sourceTimeTexts(t, srcURL)
	if rows != nil {
		got := map[string]string{}
		for _, row := range rows {
			js, _ := json.Marshal([]any{row["t"], row["t3"], row["ta"], row["tz"]})
			got[fmt.Sprint(row["id"])] = string(js)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("PyIceberg reads silver clock (id: [t, t3, ta, tz])\n%v\nthe source's text is\n%v", got, want)
		}
	}

	// Another time_as on the same lake: refused at start, nothing mixed.
	r.Args = append(r.Args, "--time-as", "time")
	s = r.Start()
	select {
	case <-s.Done:
	case <-time.After(2 * time.Minute):
		t.Fatal("tidemark did not stop when time_as changed")
	}
	if code := s.Cmd.ProcessState.ExitCode(); code != fault.ExitFatal {
		t.Errorf("exit code %d under a changed time_as, want %d", code, fault.ExitFatal)
	}
	log, _ := os.ReadFile(r.LogPath)
	for _, w := range []string{"[incompatible_schema]", `column "t"`, "time_as", "tidemark resnapshot --replace public.clock"} {
		if !strings.Contains(string(log[s.Offset:]), w) {
			t.Errorf("the log of the refused start does not say %q:\n%s", w, log[s.Offset:])
		}
	}
	if types, _ := pyReadTyped(t, wh, silver.Ident(source, "public", "clock")); types != nil && types["t"] != "string" {
		t.Errorf("after the refused start silver clock.t is %q, want still string", types["t"])
	}

	// The recovery the error names, under time_as: micros.
	r.Args = append(r.Args, "--time-as", "micros")
	if out, code := tidemarkArgs(t, r.As("resnapshot", "--replace", "public.clock")...); code != 0 {
		t.Fatalf("tidemark resnapshot --replace exited %d:\n%s", code, out)
	}
	s = r.Start()
	pg.Exec(t, srcURL, `INSERT INTO clock VALUES (7, '24:00:00', '00:00:01', '{00:00:00.5}', NULL)`)
	verifyTimeAs(t, s, srcURL, wh, source, "micros")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}
	types, rows = pyReadTyped(t, wh, silver.Ident(source, "public", "clock"))
	if types != nil && (types["t"] != "long" || types["ta"] != "list<long>" || types["tz"] != "string") {
		t.Errorf("after resnapshot --replace under micros PyIceberg's types are %v, want t long, ta list<long>, tz string", types)
	}
	wantMicros := map[string]string{
		"1": `[86400000000,43200500000,[0,86400000000,null]]`,
		"2": `[1,86399999000,[86399999999]]`,
		"3": `[null,null,[]]`,
		"5": `[86400000000,3723456000,[86400000000]]`,
		"6": `[47655100000,null,null]`,
		"7": `[86400000000,1000000,[500000]]`,
	}
	if rows != nil {
		got := map[string]string{}
		for _, row := range rows {
			js, _ := json.Marshal([]any{row["t"], row["t3"], row["ta"]})
			got[fmt.Sprint(row["id"])] = string(js)
		}
		if fmt.Sprint(got) != fmt.Sprint(wantMicros) {
			t.Errorf("PyIceberg reads silver clock (id: [t, t3, ta]) under micros\n%v\nwant\n%v", got, wantMicros)
		}
	}
}

// verifyTimeAs waits until session s has carried silver clock to the
// source's current position and runs `tidemark verify --time-as as`,
// which must find it equal.
func verifyTimeAs(t *testing.T, s *session, srcURL, wh, source, as string) {
	t.Helper()
	lv := openLake(t, wh, source)
	lv.waitCaughtUp(s, walLSN(t, srcURL), 3*time.Minute, "clock")
	lv.close()
	deadline := time.Now().Add(3 * time.Minute)
	for !silverState(t, wh, source, "clock").Published {
		if s.Exited() || time.Now().After(deadline) {
			t.Fatalf("silver clock was not published (exited: %v)", s.Exited())
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, code := tidemarkArgs(t, "verify", "--source", srcURL, "--warehouse", wh, "--name", source, "--wait", "3m", "--time-as", as)
	if code != 0 {
		t.Fatalf("tidemark verify --time-as %s exited %d, want 0:\n%s", as, code, out)
	}
	t.Logf("tidemark verify --time-as %s:\n%s", as, strings.TrimSpace(out))
}

// sourceTimeTexts is, by id, the source's text of t, t3, the elements of
// ta and tz, as a JSON list: what a text-mode silver row must hold.
func sourceTimeTexts(t *testing.T, srcURL string) map[string]string {
	t.Helper()
	ctx := context.Background()
	c := connect(t, srcURL)
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT id::text, json_build_array(t::text, t3::text,
			CASE WHEN ta IS NOT NULL THEN coalesce((SELECT json_agg(e::text ORDER BY o) FROM unnest(ta) WITH ORDINALITY u(e, o)), '[]') END,
			tz::text)::text
		FROM clock`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, js string
		if err := rows.Scan(&id, &js); err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal([]byte(js), &v); err != nil {
			t.Fatal(err)
		}
		norm, _ := json.Marshal(v)
		out[id] = string(norm)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pyReadTyped is pyRead that also returns the table's column types as
// PyIceberg names them; nil, nil when TIDEMARK_PYTHON is not set.
func pyReadTyped(t *testing.T, wh string, ident []string) (map[string]string, []map[string]any) {
	t.Helper()
	types, rows, ok := testenv.PyIcebergReadTyped(t, wh, ident)
	if ok && rows == nil {
		rows = []map[string]any{}
	}
	return types, rows
}
