//go:build faults

package faults_test

// Faults of the lake side: a full disk (row 25), corrupt metadata, catalog
// or checkpoint (row 26), panics in tidemark's goroutines (row 29), orphan
// files of a crashed commit (row 2) and a crash inside a streamed
// transaction (row 14).

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/sqliteshim"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/bronze/bronzetest"
	"github.com/tidemark/tidemark/internal/change"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
	"github.com/tidemark/tidemark/internal/source/postgres"
)

// output returns what the session wrote so far.
func (s *session) output() string {
	b, err := os.ReadFile(s.log)
	if err != nil || int64(len(b)) < s.offset {
		return ""
	}
	return string(b[s.offset:])
}

// runToExit starts `tidemark run` and waits for it to exit by itself;
// it returns the exit code and the session's output.
func (e *env) runToExit(timeout time.Duration) (int, string) {
	e.t.Helper()
	s := e.start()
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.kill()
		e.t.Errorf("tidemark run did not stop by itself within %s", timeout)
		return -1, s.output()
	}
	return s.cmd.ProcessState.ExitCode(), s.output()
}

// catalogDB opens the SQLite catalog directly (no tidemark may be running).
func (e *env) catalogDB() *sql.DB {
	e.t.Helper()
	db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(e.wh, "catalog.db"))
	if err != nil {
		e.t.Fatal(err)
	}
	return db
}

// metadataFile returns the local path of the current metadata file of the
// table ident, as the catalog names it.
func (e *env) metadataFile(ident []string) string {
	e.t.Helper()
	db := e.catalogDB()
	defer db.Close()
	var loc string
	err := db.QueryRow(`SELECT metadata_location FROM iceberg_tables WHERE table_namespace = ? AND table_name = ?`,
		strings.Join(ident[:len(ident)-1], "."), ident[len(ident)-1]).Scan(&loc)
	if err != nil {
		e.t.Fatalf("metadata location of %v: %v", ident, err)
	}
	u, err := url.Parse(loc)
	if err != nil {
		e.t.Fatal(err)
	}
	return u.Path
}

func (e *env) bronzeIdent() []string {
	return bronze.Ident(e.source, change.TableID{Schema: "public", Name: workTable})
}

func (e *env) silverIdent() []string {
	return []string{"silver", e.source, "public", workTable}
}

// copyDir copies a warehouse (files and directories, modes kept).
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a %s %s: %v: %s", from, to, err, out)
	}
}

func insertRows(t *testing.T, e *env, from, n int) {
	t.Helper()
	e.pg.Exec(t, e.srcURL, fmt.Sprintf(`INSERT INTO `+workTable+` SELECT g, 1, md5(g::text) FROM generate_series(%d, %d) g`, from, from+n-1))
}

// ---------------------------------------------------------------------------
// Row 26: corrupt lake metadata, catalog, checkpoint or data file

func TestQuickCorruptState(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "26 corrupt metadata / catalog / checkpoint", &injections, &lost, &note)
	e := newEnv(t, "corrupt", envOptions{preload: 2000})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	if code := s.term(time.Minute); code != 0 {
		t.Fatalf("first session: exit code %d after SIGTERM, want 0", code)
	}
	if out, code := e.tidemark(nil, "merge", "--warehouse", e.wh, "--name", e.source); code != 0 {
		t.Fatalf("tidemark merge exited %d:\n%s", code, out)
	}
	good := filepath.Join(e.root, "lake.good")
	restore := func() {
		t.Helper()
		if err := os.RemoveAll(e.wh); err != nil {
			t.Fatal(err)
		}
		copyDir(t, good, e.wh)
	}
	nextPK := 1_000_000

	type corruption struct {
		name    string
		corrupt func() (file string, names string) // the damaged file, and what the error must name
	}
	bronzeMeta := func() string { return e.metadataFile(e.bronzeIdent()) }
	cases := []corruption{
		{"truncated bronze metadata.json", func() (string, string) {
			f := bronzeMeta()
			b, _ := os.ReadFile(f)
			if err := os.WriteFile(f, b[:len(b)/2], 0o644); err != nil {
				t.Fatal(err)
			}
			return f, filepath.Base(f)
		}},
		{"empty bronze metadata.json", func() (string, string) {
			f := bronzeMeta()
			if err := os.Truncate(f, 0); err != nil {
				t.Fatal(err)
			}
			return f, filepath.Base(f)
		}},
		{"bronze metadata.json missing", func() (string, string) {
			f := bronzeMeta()
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			return "", filepath.Base(f)
		}},
		{"garbage tidemark.cursor in the snapshot summary", func() (string, string) {
			f := bronzeMeta()
			b, _ := os.ReadFile(f)
			re := regexp.MustCompile(`"tidemark\.cursor":"[0-9]+:[0-9]+"`)
			if !re.Match(b) {
				t.Fatalf("no tidemark.cursor in %s", f)
			}
			b = re.ReplaceAll(b, []byte(`"tidemark.cursor":"12x:y"`))
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			return f, strings.Join(e.bronzeIdent(), ".")
		}},
		{"catalog.db header bytes flipped", func() (string, string) {
			f := filepath.Join(e.wh, "catalog.db")
			fh, err := os.OpenFile(f, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			hdr := make([]byte, 16)
			fh.ReadAt(hdr, 0)
			for i := range hdr {
				hdr[i] ^= 0x5a
			}
			fh.WriteAt(hdr, 0)
			fh.Close()
			return f, "catalog.db"
		}},
		{"catalog.db pages overwritten", func() (string, string) {
			f := filepath.Join(e.wh, "catalog.db")
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			fh, err := os.OpenFile(f, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Every page but the first (the schema's root): b-tree pages
			// of the catalog tables become noise.
			junk := bytes.Repeat([]byte{0xa5, 0x13, 0xff, 0x00}, int(fi.Size()-4096)/4)
			fh.WriteAt(junk, 4096)
			fh.Close()
			return f, "catalog.db"
		}},
		{"checkpoint tidemark.acked-lsn unreadable", func() (string, string) {
			db := e.catalogDB()
			defer db.Close()
			res, err := db.Exec(`UPDATE iceberg_namespace_properties SET property_value = '12x34' WHERE namespace = ? AND property_key = ?`,
				"bronze."+e.source, bronze.PropResume)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("updated %d checkpoint rows, want 1", n)
			}
			return "", bronze.PropResume
		}},
	}
	var passed []string
	// A data file referenced by silver's current snapshot is deleted:
	// reading silver (verify) must fail loudly, naming the file.
	injections++
	// Not an orphan: a merge stopped between writing its files and
	// committing leaves unreferenced files (by design, for orphan
	// cleanup), and reading silver rightly does not miss them.
	orphans := silverOrphans(e)
	var victim string
	filepath.WalkDir(e.wh, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") && strings.Contains(p, "/silver.") && victim == "" && !orphans[filepath.Base(p)] {
			victim = p
		}
		return nil
	})
	if victim == "" {
		t.Fatal("no silver data file to delete")
	}
	saved, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	vs := e.start() // verify compares at a position the pipeline must reach
	out, code := e.tidemark(nil, "verify", "--source", e.srcURL, "--warehouse", e.wh, "--name", e.source, "--wait", "1m")
	if rc := vs.term(time.Minute); rc != 0 && rc != 3 {
		t.Errorf("deleted silver data file: tidemark run exited %d, want 0 (stopped) or 3 (corrupt_state)", rc)
	}
	// verify reports per table: a table it cannot read is exit 6
	// ("not every table could be verified") with the table's error.
	if (code != 3 && code != 6) || !strings.Contains(out, "the lake's state is damaged") || !strings.Contains(out, filepath.Base(victim)) {
		t.Errorf("deleted silver data file: tidemark verify exited %d, want 3 or 6 with the corrupt-state error naming %s:\n%s", code, filepath.Base(victim), tail(out, 10))
	} else {
		passed = append(passed, "silver data file deleted (verify)")
	}
	// Put the file back: the lake is whole again, and the slot is where
	// it says. Every case below starts from a copy of it.
	if err := os.WriteFile(victim, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	copyDir(t, e.wh, good)

	for _, c := range cases {
		restore()
		insertRows(t, e, nextPK, 50) // something for the slot to move past
		nextPK += 50
		slotBefore, _, _ := e.slotState()
		file, names := c.corrupt()
		var before []byte
		if file != "" {
			before, _ = os.ReadFile(file)
		}
		injections++
		code, out := e.runToExit(2 * time.Minute)
		ok := true
		fail := func(format string, args ...any) {
			t.Helper()
			ok = false
			t.Errorf("%s: "+format, append([]any{c.name}, args...)...)
		}
		if code != 3 || !strings.Contains(out, "[corrupt_state]") {
			fail("tidemark run exited %d, want 3 with [corrupt_state]; output:\n%s", code, tail(out, 15))
		}
		if !strings.Contains(out, names) {
			fail("the error does not name %q:\n%s", names, tail(out, 5))
		}
		if file != "" {
			after, _ := os.ReadFile(file)
			if !bytes.Equal(before, after) {
				fail("%s was rewritten", file)
			}
		}
		if slotAfter, _, _ := e.slotState(); slotAfter != slotBefore {
			fail("the slot moved from %s to %s", postgres.FormatLSN(slotBefore), postgres.FormatLSN(slotAfter))
		}
		if ok {
			passed = append(passed, c.name)
		}
	}

	// The intact lake resumes: nothing lost, nothing twice.
	restore()
	lost = e.oracle()
	note = fmt.Sprintf("%d of %d corruptions stopped loudly naming the file (run: exit 3 [corrupt_state]), file untouched, slot unmoved", len(passed), injections)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// Row 25: disk full (the warehouse, its SQLite catalog and the spool on a
// small tmpfs that a filler file fills during streaming)

func TestQuickDiskFull(t *testing.T) { diskFull(t, 8*time.Second) }
func TestFullDiskFull(t *testing.T)  { diskFull(t, 45*time.Second) }

func diskFull(t *testing.T, fullFor time.Duration) {
	injections, lost, note := 0, -1, ""
	record(t, "25 disk full (warehouse on tmpfs)", &injections, &lost, &note)
	e := newEnv(t, "diskfull", envOptions{preload: 2000})
	if err := os.MkdirAll(e.wh, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", e.wh).CombinedOutput(); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs for the warehouse (needs root or CAP_SYS_ADMIN): %v: %s", err, out)
	}
	t.Cleanup(func() {
		for _, s := range e.runs {
			if !s.exited() {
				s.kill()
			}
		}
		if out, err := exec.Command("umount", "-l", e.wh).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", e.wh, err, out)
		}
	})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	wl := e.startWorkload(seed(t), 2000)
	e.waitProgress(s, time.Minute)

	filler := filepath.Join(e.wh, "filler")
	fill := func() int64 {
		f, err := os.OpenFile(filler, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return 0
			}
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 64<<10)
		var n int64
		for {
			k, err := f.Write(buf)
			n += int64(k)
			if err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("fill the warehouse: %v", err)
				}
				return n
			}
		}
	}
	filled := fill()
	injections++
	cpFull, _ := e.checkpoint()
	t.Logf("warehouse full (filler %d MiB); checkpoint at %s", filled>>20, postgres.FormatLSN(postgres.AckedLSN(cpFull)))
	deadline := time.Now().Add(fullFor)
	checks := 0
	for time.Now().Before(deadline) {
		fill() // space freed by a failed write's cleanup is taken again
		e.checkAck(fmt.Sprintf("disk full, check %d", checks+1), false)
		checks++
		time.Sleep(500 * time.Millisecond)
	}
	fullOut := s.output()
	if s.exited() {
		code := s.cmd.ProcessState.ExitCode()
		if code != 4 {
			t.Errorf("tidemark exited %d on a full disk; want it to keep retrying or exit 4 (transient): %s", code, tail(fullOut, 10))
		}
	}
	if !strings.Contains(fullOut, "no space left on device") && !strings.Contains(fullOut, "disk is full") {
		t.Errorf("no full-disk error in the log while the warehouse was full:\n%s", tail(fullOut, 20))
	}
	cpAfter, _ := e.checkpoint()
	t.Logf("after %s full: checkpoint %s -> %s; %d ack checks", fullFor, postgres.FormatLSN(postgres.AckedLSN(cpFull)), postgres.FormatLSN(postgres.AckedLSN(cpAfter)), checks)

	// Space returns: it resumes by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if s.exited() {
		s = e.start()
	}
	d := e.waitProgress(s, 2*time.Minute)
	wl.stop(t)
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	lost = e.oracle()
	note = fmt.Sprintf("%s full, %d ack checks; resumed %s after space returned", fullFor, checks, d.Round(100*time.Millisecond))
}

// ---------------------------------------------------------------------------
// Row 29, panics: a panic in one of tidemark's goroutines (capture stream,
// silver merge) becomes a redacted error with exit code 1 ([panic]), not a
// runtime crash print; the canary password appears nowhere.

func TestQuickPanicCanary(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "29 secret leakage: panics in goroutines", &injections, &lost, &note)
	e := newEnv(t, "panic", envOptions{preload: 500})
	_, canary := e.canaryRole(t, "tm_panic_")

	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	if code := s.term(time.Minute); code != 0 {
		t.Fatalf("first session: exit %d", code)
	}
	var fired []string
	for i, fp := range []struct{ point, where string }{
		{"stream-before-status", "capture stream"},
		{"lake-append-before-commit", "capture stream"},
		{"lake-merge-before-commit", "silver merge"},
	} {
		insertRows(t, e, 10_000+100*i, 100)
		e.envVars = []string{"TIDEMARK_FAILPOINTS=" + fp.point + "=1*panic"}
		injections++
		code, out := e.runToExit(2 * time.Minute)
		e.checkAck("after a panic at "+fp.point, true)
		switch {
		case code != 1 || !strings.Contains(out, "[panic]") || !strings.Contains(out, "panic in "+fp.where):
			t.Errorf("panic at %s: exit %d, want 1 with [panic] panic in %s:\n%s", fp.point, code, fp.where, tail(out, 10))
		case strings.Contains(out, "goroutine ") && strings.Contains(out, "[running]"):
			t.Errorf("panic at %s: the runtime printed a crash:\n%s", fp.point, tail(out, 20))
		default:
			fired = append(fired, fp.point)
		}
		if strings.Contains(out, canary) {
			t.Errorf("panic at %s: the canary password is in the output", fp.point)
		}
	}
	e.envVars = nil
	log, _ := os.ReadFile(e.logPath)
	if !strings.Contains(string(log), "level=DEBUG") {
		t.Errorf("the run log has no DEBUG lines")
	}
	if strings.Contains(string(log), canary) {
		t.Errorf("the canary password is in the run log")
	}
	filepath.WalkDir(e.wh, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(canary)) {
			t.Errorf("the canary password is in %s", p)
		}
		return nil
	})
	e.runURL = e.srcURL
	lost = e.oracle()
	note = fmt.Sprintf("panics at %v: exit 1 [panic], canary absent", fired)
}

// ---------------------------------------------------------------------------
// Row 2: a crash between the data-file write and the commit leaves orphan
// files; nothing is visible twice, and `tidemark maintain` removes the
// orphans only once they are older than the safety age.

func TestQuickOrphans(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "2 crash between data-file write and commit: orphans", &injections, &lost, &note)
	e := newEnv(t, "orphans", envOptions{preload: 2000})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	s.term(time.Minute)
	wl := e.startWorkload(seed(t), 2000)
	for i := 0; i < 2; i++ {
		e.envVars = []string{"TIDEMARK_FAILPOINTS=lake-append-before-commit=" + fmt.Sprint(3+i) + "*exit"}
		code, out := e.runToExit(2 * time.Minute)
		if code != 137 {
			t.Fatalf("failpoint lake-append-before-commit: exit %d, want 137:\n%s", code, tail(out, 10))
		}
		injections++
		e.checkAck("after a crash before commit", true)
	}
	e.envVars = nil
	wl.stop(t)
	s = e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if d := e.bronzeDuplicates(); d > 0 {
		t.Errorf("%d duplicate positions in bronze after crashes before commit", d)
	}
	maintain := func() int {
		t.Helper()
		out, code := e.tidemark(nil, "maintain", "--warehouse", e.wh, "--name", e.source, "--no-compact", "--no-expire", "--format", "json")
		if code != 0 {
			t.Fatalf("tidemark maintain exited %d:\n%s", code, out)
		}
		var res []struct {
			Table   string `json:"table"`
			Orphans int    `json:"orphan_files"`
		}
		if err := json.Unmarshal([]byte(out[strings.Index(out, "["):]), &res); err != nil {
			t.Fatalf("maintain output: %v:\n%s", err, out)
		}
		n := 0
		for _, r := range res {
			n += r.Orphans
		}
		return n
	}
	dataFiles := func() map[string]bool {
		m := map[string]bool{}
		filepath.WalkDir(e.wh, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".parquet") {
				m[p] = true
			}
			return nil
		})
		return m
	}
	before := dataFiles()
	if n := maintain(); n != 0 {
		t.Errorf("maintain removed %d orphan files younger than the safety age (1 day)", n)
	}
	if after := dataFiles(); len(after) != len(before) {
		t.Errorf("maintain removed young files: %d data files before, %d after", len(before), len(after))
	}
	// Age every file past the safety age: only the unreferenced go.
	old := time.Now().Add(-48 * time.Hour)
	filepath.WalkDir(e.wh, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	removed := maintain()
	if removed == 0 {
		t.Errorf("maintain removed no orphan files after two crashes between data-file write and commit")
	}
	lost = e.oracle() // every referenced file is still there
	note = fmt.Sprintf("%d orphan files kept while young, removed once older than the safety age", removed)
}

// ---------------------------------------------------------------------------
// Row 14: kill -9 inside a streamed transaction (logical_decoding_work_mem
// 64kB): nothing of it visible before its commit, applied once after.

var smallDecodingMem = map[string]string{"logical_decoding_work_mem": "64kB"}

func TestQuickStreamedTxCrash(t *testing.T) {
	injections, lost, note := 0, -1, ""
	record(t, "14 crash inside a streamed transaction", &injections, &lost, &note)
	e := newEnv(t, "streamtx", envOptions{preload: 100, settings: smallDecodingMem})
	s := e.start()
	e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
	spool := filepath.Join(e.wh, "_tidemark", "spool")
	var notes []string
	for round := 0; round < 2; round++ {
		ctx := context.Background()
		c := e.conn()
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		base := 100_000 * (round + 1)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO `+workTable+` SELECT g, 1, repeat(md5(g::text), 8) FROM generate_series(%d, %d) g`, base, base+2999)); err != nil {
			t.Fatal(err)
		}
		// Wait until tidemark spools the in-progress transaction: the
		// stream has started and has not committed.
		deadline := time.Now().Add(time.Minute)
		for {
			ents, _ := os.ReadDir(spool)
			if len(ents) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: tidemark did not spool the streamed transaction within a minute", round)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if round == 0 {
			s.kill() // between stream start and stream commit
			injections++
			e.checkAck("killed inside a streamed transaction", true)
			if n := e.bronzeRowsFrom(base); n != 0 {
				t.Errorf("round %d: %d rows of the uncommitted transaction are in bronze", round, n)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			notes = append(notes, "killed mid-stream")
		} else {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
			s.kill() // around the stream commit
			injections++
			e.checkAck("killed around a stream commit", true)
			notes = append(notes, "killed around the commit")
		}
		c.Close(ctx)
		s = e.start()
		e.waitCaughtUp(s, e.walLSN(), 2*time.Minute)
		if n := e.bronzeRowsFrom(base); n != 3000 {
			t.Errorf("round %d: bronze holds %d rows of the 3000-row transaction, want 3000 exactly once", round, n)
		}
	}
	if code := s.term(time.Minute); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	lost = e.oracle()
	note = strings.Join(notes, "; ") + "; 3000 rows each applied once"
}

// bronzeRowsFrom counts bronze change rows of the work table with pk in
// [from, from+100000).
func (e *env) bronzeRowsFrom(from int) int {
	e.t.Helper()
	if _, err := os.Stat(filepath.Join(e.wh, "catalog.db")); err != nil {
		return 0
	}
	n := 0
	for _, r := range bronzeRows(e) {
		if pk, ok := r["pk"].(int64); ok && pk >= int64(from) && pk < int64(from+100_000) {
			n++
		}
	}
	return n
}

// silverOrphans returns the names of the files under the work table's
// silver location that no snapshot of it references.
func silverOrphans(e *env) map[string]bool {
	e.t.Helper()
	ctx := context.Background()
	cat, err := lake.Open(ctx, lake.Config{Warehouse: e.wh})
	if err != nil {
		e.t.Fatalf("open the lake: %v", err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(ctx, []string{"silver", e.source, "public", workTable})
	if err != nil {
		e.t.Fatalf("load the silver table: %v", err)
	}
	res, err := tbl.RemoveOrphanFiles(ctx, time.Nanosecond, true) // dry run: lists only
	if err != nil {
		e.t.Fatalf("list silver's orphan files: %v", err)
	}
	out := map[string]bool{}
	for _, f := range res.Files {
		out[filepath.Base(f)] = true
	}
	return out
}

// bronzeRows reads the work table's bronze rows (none if it does not exist).
func bronzeRows(e *env) []bronzetest.Row {
	e.t.Helper()
	cat, err := lake.Open(context.Background(), lake.Config{Warehouse: e.wh})
	if err != nil {
		e.t.Fatalf("open the lake: %v", err)
	}
	defer cat.Close()
	tbl, err := cat.LoadTable(context.Background(), e.bronzeIdent())
	if err != nil {
		return nil
	}
	rows, err := bronzetest.ReadTable(context.Background(), tbl)
	if err != nil {
		e.t.Fatalf("read bronze: %v", err)
	}
	return rows
}
