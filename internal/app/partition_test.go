package app_test

// Partitioned tables (issue 12): captured as one table named after the
// root, through the snapshot, streamed changes (a row moved across
// partitions too), a partition attached and one detached while tidemark
// runs, and a kill -9 right after the detach.

import (
	"context"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/pipeline"
	"github.com/tidemark/tidemark/internal/testenv"
)

func TestE2EPartitionedTableIsOneTable(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "e2e_partitioned")
	source := sourceName(t, srcURL)
	// Three monthly partitions with 300 rows each, and a table of 2023's
	// rows that is attached later (its rows come with no change event).
	pg.Exec(t, srcURL, `
		CREATE TABLE payments (id bigint NOT NULL, day date NOT NULL, amount numeric(10,2), note text,
			PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE payments_2024_01 PARTITION OF payments FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
		CREATE TABLE payments_2024_02 PARTITION OF payments FOR VALUES FROM ('2024-02-01') TO ('2024-03-01');
		CREATE TABLE payments_2024_03 PARTITION OF payments FOR VALUES FROM ('2024-03-01') TO ('2024-04-01');
		INSERT INTO payments SELECT g, date '2024-01-01' + (g % 90), g * 1.25, md5(g::text) FROM generate_series(1, 900) g;
		CREATE TABLE payments_2023 (LIKE payments INCLUDING ALL);
		INSERT INTO payments_2023 SELECT g, date '2023-01-01' + (g % 365), g, 'old ' || g FROM generate_series(5001, 5200) g;`)
	r, wh := newRunner(t, bin, srcURL, "--tables", "public.payments", "--publication-poll", "200ms")
	lk := openLake(t, wh, source)
	bronzeID := bronze.Ident(source, change.TableID{Schema: "public", Name: "payments"})
	state := func() pipeline.SnapshotState {
		tbl, err := lk.cat.LoadTable(context.Background(), bronzeID)
		if err != nil {
			return pipeline.SnapshotState{}
		}
		st, _ := pipeline.ParseSnapshotState(tbl.Summary()[pipeline.PropSnapshot])
		return st
	}

	s := r.Start()
	lk.waitCaughtUp(s, walLSN(t, srcURL), 2*time.Minute, "payments")
	// The snapshot read the root once: every row, no leaf twice.
	if st := state(); st.Rows != 900 {
		t.Fatalf("the snapshot of payments read %d rows, the table has 900 (state %+v)", st.Rows, st)
	}
	// Its progress estimate is the leaves' (the root holds no rows itself).
	if st := state(); st.Estimate != 900 {
		t.Errorf("the snapshot of payments estimated %d rows, its partitions hold 900 (state %+v)", st.Estimate, st)
	}

	// Streamed changes in several partitions, and an update that moves a
	// row from January to March (a delete and an insert on the root).
	pg.Exec(t, srcURL, `
		INSERT INTO payments VALUES (1001, '2024-01-10', 1, 'new jan'), (1002, '2024-02-10', 2, 'new feb'), (1003, '2024-03-10', 3, 'new mar');
		UPDATE payments SET amount = amount + 1000 WHERE id % 7 = 0;
		DELETE FROM payments WHERE id % 11 = 0;
		UPDATE payments SET day = '2024-03-15', note = 'moved' WHERE id = 90 AND day = '2024-01-01';`)
	lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "payments")

	// A partition attached while running: its 200 rows enter the root
	// without a change event; tidemark re-reads the table online.
	rereads := map[string]bool{}
	waitReread := func(s *session, what string) {
		t.Helper()
		waitFor(t, s, 2*time.Minute, what, func() bool {
			st := state()
			if strings.HasPrefix(st.Request, "reread-") && !rereads[st.Request] && st.Status == "done" {
				rereads[st.Request] = true
				return true
			}
			return false
		})
	}
	pg.Exec(t, srcURL, `ALTER TABLE payments ATTACH PARTITION payments_2023 FOR VALUES FROM ('2023-01-01') TO ('2024-01-01');
		UPDATE payments SET note = 'touched' WHERE id = 5001;`)
	waitReread(s, "the re-read after ATTACH PARTITION")

	// A new, empty partition needs no re-read; one detached takes its rows
	// out of the root (no delete events), and tidemark is killed right
	// after it: the restarted run still re-reads the table.
	pg.Exec(t, srcURL, `CREATE TABLE payments_2024_04 PARTITION OF payments FOR VALUES FROM ('2024-04-01') TO ('2024-05-01');
		INSERT INTO payments VALUES (1004, '2024-04-02', 4, 'april');
		ALTER TABLE payments DETACH PARTITION payments_2024_02;
		INSERT INTO payments VALUES (1005, '2024-03-20', 5, 'after detach');`)
	s.Kill(t)
	s = r.Start()
	waitReread(s, "the re-read after DETACH PARTITION")

	// A TRUNCATE of one partition is not published under
	// publish_via_partition_root: its rows leave the root with no change
	// event. tidemark sees the leaf's new relfilenode and re-reads the table.
	pg.Exec(t, srcURL, `TRUNCATE payments_2024_03; INSERT INTO payments VALUES (1006, '2024-03-21', 6, 'after truncate');`)
	waitReread(s, "the re-read after TRUNCATE of a partition")
	pg.Exec(t, srcURL, `UPDATE payments SET amount = 0 WHERE id = 1005; DELETE FROM payments WHERE id = 3;`)
	lk.waitCaughtUp(s, walLSN(t, srcURL), time.Minute, "payments")
	if code := s.Stop(t, time.Minute); code != 0 {
		t.Fatalf("tidemark exited with code %d after SIGTERM, want 0", code)
	}

	// One table in the lake for the root, in bronze and in silver.
	for _, layer := range []string{"bronze", "silver"} {
		got, err := lk.cat.ListTables(context.Background(), []string{layer, source, "public"})
		if err != nil {
			t.Fatalf("list %s tables: %v", layer, err)
		}
		var names []string
		for _, id := range got {
			names = append(names, id[len(id)-1])
		}
		if !slices.Equal(names, []string{"payments"}) {
			t.Errorf("%s.%s.public holds tables %v, want only payments", layer, source, names)
		}
	}
	lk.close()

	checkSilver(t, r, srcURL, wh, source, []string{"payments"})
}

// A publication the user created without publish_via_partition_root
// publishes each leaf as a table of its own: run refuses it, naming the fix.
func TestPublicationWithoutPartitionRootIsRefused(t *testing.T) {
	bin := testenv.Tidemark(t)
	pg := testenv.Shared(t)
	srcURL := pg.CreateDB(t, "partition_noroot")
	pg.Exec(t, srcURL, `
		CREATE TABLE payments (id bigint NOT NULL, day date NOT NULL, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE payments_2024_01 PARTITION OF payments FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
		CREATE PUBLICATION mine FOR TABLE payments;`)
	out, err := exec.Command(bin, "run", "--source", srcURL, "--warehouse", t.TempDir()+"/lake", "--publication", "mine").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("run with a publication without publish_via_partition_root: %v, want exit code 2\n%s", err, out)
	}
	for _, want := range []string{"bad_config", `ALTER PUBLICATION "mine" SET (publish_via_partition_root = true)`, "public.payments_2024_01"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
