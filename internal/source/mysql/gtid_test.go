package mysql

import (
	"strings"
	"testing"
)

const (
	uuidA = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
	uuidB = "7b4f6e5c-0d1a-11ef-8c3e-0242ac120002"
	uuidC = "9d2c1b0a-0000-4000-8000-000000000003"
)

func mustSet(t *testing.T, f Flavor, s string) GTIDSet {
	t.Helper()
	set, err := ParseGTIDSet(f, s)
	if err != nil {
		t.Fatalf("ParseGTIDSet(%s, %q): %v", f, s, err)
	}
	return set
}

func mustGTID(t *testing.T, f Flavor, s string) GTID {
	t.Helper()
	g, err := ParseGTID(f, s)
	if err != nil {
		t.Fatalf("ParseGTID(%s, %q): %v", f, s, err)
	}
	return g
}

func TestParseGTIDSetFormats(t *testing.T) {
	for _, tc := range []struct {
		flavor Flavor
		in     string
		want   string // canonical String()
	}{
		{MariaDB, "", ""},
		{MariaDB, "0-1-17", "0-1-17"},
		{MariaDB, "2-9-5,0-1-17", "0-1-17,2-9-5"},
		{MariaDB, " 0-1-17 , 1-2-3 ", "0-1-17,1-2-3"},
		{MariaDB, "4294967295-4294967295-18446744073709551615", "4294967295-4294967295-18446744073709551615"},
		{MySQL, "", ""},
		{MySQL, uuidA + ":1-5", uuidA + ":1-5"},
		{MySQL, strings.ToUpper(uuidA) + ":1-5:7-9", uuidA + ":1-5:7-9"},
		{MySQL, uuidA + ":1-3:4-5", uuidA + ":1-5"}, // adjacent intervals merge
		{MySQL, uuidA + ":7", uuidA + ":7"},
		// @@gtid_executed prints a newline after each comma.
		{MySQL, uuidB + ":1-3,\n" + uuidA + ":1-20", uuidA + ":1-20," + uuidB + ":1-3"},
	} {
		got := mustSet(t, tc.flavor, tc.in)
		if got.String() != tc.want {
			t.Errorf("ParseGTIDSet(%s, %q).String() = %q, want %q", tc.flavor, tc.in, got.String(), tc.want)
		}
		again := mustSet(t, tc.flavor, got.String())
		if !again.Equal(got) {
			t.Errorf("%q does not round-trip: %q", tc.in, again)
		}
		if got.IsEmpty() != (tc.want == "") || got.Flavor() != tc.flavor {
			t.Errorf("%q: IsEmpty %v Flavor %s", tc.in, got.IsEmpty(), got.Flavor())
		}
	}
}

func TestParseGTIDSetMalformed(t *testing.T) {
	for _, tc := range []struct {
		flavor Flavor
		in     string
	}{
		{MariaDB, "0-1"},
		{MariaDB, "0-1-2-3"},
		{MariaDB, "0-1-x"},
		{MariaDB, "a-1-2"},
		{MariaDB, "0--2"},
		{MariaDB, "0-1-+2"},
		{MariaDB, "0-1--2"},
		{MariaDB, "4294967296-1-2"}, // domain is 32 bits
		{MariaDB, "0-1-2,"},         // empty element
		{MariaDB, "0-1-2,0-3-4"},    // a position has one GTID per domain
		{MariaDB, uuidA + ":1-5"},
		{MySQL, "0-1-17"},
		{MySQL, uuidA},
		{MySQL, uuidA + ":"},
		{MySQL, uuidA + ":5-3"},
		{MySQL, uuidA + ":0-3"},
		{MySQL, uuidA + ":1-5,"},
		{MySQL, "not-a-uuid:1-5"},
		{MySQL, "{" + uuidA + "}:1-5"},
		{MySQL, uuidA + ":tag:1-5"}, // MySQL 8.4 tagged GTIDs: not supported
		{Flavor("postgres"), "0/16B3748"},
	} {
		_, err := ParseGTIDSet(tc.flavor, tc.in)
		if err == nil {
			t.Errorf("ParseGTIDSet(%s, %q): no error", tc.flavor, tc.in)
			continue
		}
		if !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseGTIDSet(%s, %q): error %q does not quote the text", tc.flavor, tc.in, err)
		}
	}
}

func TestParseGTID(t *testing.T) {
	g := mustGTID(t, MariaDB, "1-42-7")
	if g.Domain != 1 || g.ServerID != 42 || g.Seq != 7 || g.String() != "1-42-7" {
		t.Errorf("MariaDB GTID: %+v %s", g, g)
	}
	m := mustGTID(t, MySQL, strings.ToUpper(uuidA)+":23")
	if m.UUID.String() != uuidA || m.Seq != 23 || m.String() != uuidA+":23" {
		t.Errorf("MySQL GTID: %+v %s", m, m)
	}
	for _, bad := range []struct {
		f Flavor
		s string
	}{{MariaDB, "1-2"}, {MariaDB, ""}, {MySQL, uuidA}, {MySQL, uuidA + ":0"}, {MySQL, uuidA + ":1-5"}, {MySQL, "x:1"}} {
		if _, err := ParseGTID(bad.f, bad.s); err == nil || !strings.Contains(err.Error(), bad.s) {
			t.Errorf("ParseGTID(%s, %q): %v, want an error quoting it", bad.f, bad.s, err)
		}
	}
}

// TestGTIDSetAdvance follows a stream: each transaction read is added, and
// Contains says whether a transaction was read before (a resumed stream
// skips those).
func TestGTIDSetAdvance(t *testing.T) {
	t.Run("mariadb", func(t *testing.T) {
		s := mustSet(t, MariaDB, "0-1-5")
		if !s.Contains(mustGTID(t, MariaDB, "0-1-5")) || !s.Contains(mustGTID(t, MariaDB, "0-2-3")) {
			t.Error("0-1-5 should contain 0-1-5 and 0-2-3 (seq orders a domain)")
		}
		if s.Contains(mustGTID(t, MariaDB, "0-1-6")) || s.Contains(mustGTID(t, MariaDB, "1-1-1")) {
			t.Error("0-1-5 should not contain 0-1-6 or domain 1")
		}
		s2, err := s.Add(mustGTID(t, MariaDB, "0-2-6")) // a failover: another server continues the domain
		if err != nil {
			t.Fatal(err)
		}
		s3, err := s2.Add(mustGTID(t, MariaDB, "1-9-1"))
		if err != nil {
			t.Fatal(err)
		}
		if s.String() != "0-1-5" || s2.String() != "0-2-6" || s3.String() != "0-2-6,1-9-1" {
			t.Errorf("Add: %s -> %s -> %s (the original must not change)", s, s2, s3)
		}
		if !s3.Contains(mustGTID(t, MariaDB, "1-9-1")) || !s3.ContainsSet(s) || s.ContainsSet(s3) {
			t.Error("containment after Add")
		}
		if _, err := s3.Add(mustGTID(t, MariaDB, "0-1-6")); err == nil || !strings.Contains(err.Error(), "out of order") {
			t.Errorf("adding an old seq: %v, want an out-of-order error", err)
		}
		if _, err := s3.Add(mustGTID(t, MySQL, uuidA+":1")); err == nil {
			t.Error("adding a MySQL GTID to a MariaDB set: no error")
		}
		gm := s3.GoMySQL()
		if gm.String() != "0-2-6,1-9-1" {
			t.Errorf("GoMySQL() = %q", gm.String())
		}
	})
	t.Run("mysql", func(t *testing.T) {
		s := mustSet(t, MySQL, uuidA+":1-5:7-9")
		for n, want := range map[string]bool{"1": true, "5": true, "6": false, "7": true, "9": true, "10": false} {
			if got := s.Contains(mustGTID(t, MySQL, uuidA+":"+n)); got != want {
				t.Errorf("%s contains %s: %v, want %v", s, n, got, want)
			}
		}
		if s.Contains(mustGTID(t, MySQL, uuidB+":1")) {
			t.Error("contains another server's transaction")
		}
		s2, err := s.Add(mustGTID(t, MySQL, uuidA+":6")) // fills the gap
		if err != nil {
			t.Fatal(err)
		}
		s3, _ := s2.Add(mustGTID(t, MySQL, uuidB+":1"))
		if s.String() != uuidA+":1-5:7-9" || s2.String() != uuidA+":1-9" || s3.String() != uuidA+":1-9,"+uuidB+":1" {
			t.Errorf("Add: %s -> %s -> %s", s, s2, s3)
		}
		if !s3.ContainsSet(s) || s.ContainsSet(s2) || !s3.ContainsSet(mustSet(t, MySQL, "")) {
			t.Error("ContainsSet")
		}
		if !s2.Equal(mustSet(t, MySQL, strings.ToUpper(uuidA)+":1-3:4-9")) || s2.Equal(s) || s2.Equal(mustSet(t, MariaDB, "")) {
			t.Error("Equal")
		}
		if gm := s3.GoMySQL(); gm.String() != s3.String() {
			t.Errorf("GoMySQL() = %q", gm.String())
		}
	})
}

func TestPositionLSN(t *testing.T) {
	lsn, err := PositionLSN("mysql-bin.000007", 1234)
	if err != nil || lsn != 7<<32|1234 {
		t.Fatalf("PositionLSN = %d, %v", lsn, err)
	}
	if f, p := SplitLSN(lsn); f != 7 || p != 1234 {
		t.Errorf("SplitLSN = %d, %d", f, p)
	}
	a, _ := PositionLSN("mysql-bin.000007", 4294967295)
	b, _ := PositionLSN("mysql-bin.000008", 4)
	if a >= b {
		t.Error("a later file must sort after any position of an earlier one")
	}
	for _, bad := range []string{"mysql-bin", "mysql-bin.", "mysql-bin.x7", "mysql-bin.99999999999"} {
		if _, err := PositionLSN(bad, 4); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("PositionLSN(%q): %v", bad, err)
		}
	}
}

func TestResumeToken(t *testing.T) {
	for _, r := range []Resume{
		{Flavor: MariaDB, GTID: mustSet(t, MariaDB, "0-1-17,1-5-3"), File: "mysql-bin.000007", Pos: 1234, ServerID: 1},
		{Flavor: MariaDB, GTID: mustSet(t, MariaDB, "0-1-17"), ServerID: 9},
		{Flavor: MySQL, GTID: mustSet(t, MySQL, uuidA+":1-20"), File: "binlog.000002", Pos: 4711, ServerID: 3, ServerUUID: uuidA},
		{Flavor: MySQL, GTID: mustSet(t, MySQL, ""), File: "binlog.000002", Pos: 4, ServerID: 3, ServerUUID: uuidA}, // gtid_mode=OFF
	} {
		tok := r.String()
		got, err := ParseResume(tok)
		if err != nil {
			t.Fatalf("ParseResume(%q): %v", tok, err)
		}
		if got.String() != tok || !got.GTID.Equal(r.GTID) || got.File != r.File || got.Pos != r.Pos ||
			got.ServerID != r.ServerID || got.ServerUUID != r.ServerUUID {
			t.Errorf("round trip of %q: %+v", tok, got)
		}
	}
	for _, bad := range []string{"", "postgres;server_id=1", "mariadb;gtid=0-1;server_id=1", "mariadb;gtid=0-1-2",
		"mariadb;file=a.000001;server_id=1", "mariadb;server_id=1", "mariadb;gtid=0-1-2;server_id=1;server_id=2",
		"mariadb;gtid=0-1-2;server_id=1;colour=red", "mysql;file=b.000001;pos=x;server_id=1"} {
		if _, err := ParseResume(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseResume(%q): %v, want an error quoting it", bad, err)
		}
	}
}

func TestFlavorOf(t *testing.T) {
	for v, want := range map[string]Flavor{"10.11.19-MariaDB-0+deb12u1-log": MariaDB, "5.5.5-10.6.12-MariaDB": MariaDB,
		"8.0.36": MySQL, "8.4.0-commercial": MySQL} {
		if got := FlavorOf(v); got != want {
			t.Errorf("FlavorOf(%q) = %s, want %s", v, got, want)
		}
	}
}
