package delta_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/tidemark/tidemark/internal/lake/delta"
)

const killDirEnv = "TIDEMARK_DELTA_KILL_DIR"

// TestKillHelper is the writer TestSIGKILLReplay kills: it replays from a
// few positions before the table's txn (as a source resumed from an older
// acknowledged position does) and appends position v as rows
// [10v, 10v+10), printing each version it committed, forever.
func TestKillHelper(t *testing.T) {
	dir := os.Getenv(killDirEnv)
	if dir == "" {
		t.Skip("helper process of TestSIGKILLReplay")
	}
	ctx := context.Background()
	tbl, err := delta.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := tbl.TxnVersion("shop/orders")
	for v := max(0, last-2); ; v++ {
		rec := orders(t, int(v)*10, int(v)*10+10)
		res, err := tbl.Append(ctx, []arrow.RecordBatch{rec}, delta.Commit{AppID: "shop/orders", Version: v,
			Props: map[string]string{"tidemark.position": fmt.Sprint(v)}})
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		if res.Committed {
			fmt.Printf("committed %d\n", v)
		}
	}
}

// A writer killed with SIGKILL at random moments and restarted, each time
// replaying positions it had committed, leaves every row exactly once: the
// txn is committed atomically with the data, and a commit torn by the kill
// is invisible.
func TestSIGKILLReplay(t *testing.T) {
	dir := t.TempDir()
	createOrders(t, dir, 5)
	for round := 0; round < 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), killDirEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		want := 2 + rand.IntN(8)
		for n := 0; n < want && sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "committed ") {
				n++
			}
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
	}
	tbl, err := delta.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	last, ok := tbl.TxnVersion("shop/orders")
	if !ok || last < 6 {
		t.Fatalf("txn %d %v after 6 rounds", last, ok)
	}
	if got := scanIDs(t, tbl); !slices.Equal(got, seq(0, int(last+1)*10)) {
		t.Fatalf("after kills and replays the table holds ids %v, want 0..%d once each", got, (last+1)*10-1)
	}
	// What a kill leaves behind is temporary files only, never a commit:
	// the log is gapless.
	ents, err := os.ReadDir(filepath.Join(dir, "_delta_log"))
	if err != nil {
		t.Fatal(err)
	}
	var commits int
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && len(e.Name()) == 25 {
			commits++
		}
	}
	if int64(commits) != tbl.Version()+1 {
		t.Fatalf("%d commit files, version %d", commits, tbl.Version())
	}
}
