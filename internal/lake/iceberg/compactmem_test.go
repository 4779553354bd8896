package iceberg_test

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/tidemark/tidemark/internal/lake/iceberg"
)

// compactHeapBound is the most live heap a compaction may hold beyond what
// the process held before it, whatever the size of the partition it
// rewrites (docs/maintenance.md states it): it reads with one worker in
// batches of about 1 MiB of file bytes, two queued, and writes row groups
// of about 16 MiB. Measured with those bounds: 42 MiB rewriting a 16 MiB
// partition, 60 MiB for 32 MiB, 63 MiB for 65 MiB (the writer's buffered
// row group, its page and compression buffers, the read batches); with
// iceberg-go's defaults, compacting a 34 MB table of 3 KB rows took
// 148 MiB.
const compactHeapBound = 80 << 20

// compactHeapBoundCompressible is the bound for rows that compress well:
// a batch of ~2 MiB decoded is ~700 rows of 3 KB, which the writer holds
// decoded until its ~16 MiB row group of file bytes fills (many more rows
// at a high ratio). Measured 72 MiB on a quiet machine and 93 MiB in a
// loaded fresh-clone run (the live heap is sampled as the collector last
// marked it); batches sized by file bytes took 210 MiB.
const compactHeapBoundCompressible = 128 << 20

// A compaction's memory follows its read and write batches, not the size
// of what it rewrites: compacting 128 files of 3 KB rows (~65 MB of data
// files, one partition, larger than the bound) holds at most
// compactHeapBound of live heap at once. The live heap is sampled while
// Compact runs, the collector at GOGC=25 so that it marks often.
func TestCompactHeapIsBounded(t *testing.T) {
	compactHeap(t, false)
}

// The same, for values that compress well (a 32-character hex string
// repeated: text, JSON and HTML in real tables compress 5-50 times), in 4
// files of 10,240 rows (a compaction rewrites an earlier one's large file
// with the small ones since): the files hold ~3 MB, their rows 131 MB once
// decoded. Read batches sized by file bytes held ~12,000 such rows at once
// (the crash storm of issue 22, whose bronze held 120,000 rows of mostly
// 3 KB text in a 4 MB file, took sessions to 300-800 MiB resident while
// compacting bronze); they are sized by the decoded bytes the files'
// footers state.
func TestCompactHeapIsBoundedCompressible(t *testing.T) {
	compactHeap(t, true)
}

func compactHeap(t *testing.T, compressible bool) {
	if testing.Short() {
		t.Skip("writes ~65 MB of data files")
	}
	ctx := context.Background()
	cat := openCatalog(t, t.TempDir())
	tbl, err := cat.CreateTable(ctx, []string{"ns", "wide"}, iceberg.TableSpec{Schema: simpleSchema()})
	if err != nil {
		t.Fatal(err)
	}
	const valueBytes = 3200
	files, rowsPerFile := 128, 320
	if compressible {
		files, rowsPerFile = 4, 10240
	}
	rng := rand.New(rand.NewPCG(19, 19))
	raw := make([]byte, valueBytes/2)
	if compressible {
		raw = make([]byte, 16)
	}
	var written int64
	for f := 0; f < files; f++ {
		rec := wideRows(tbl.ArrowSchema(), int64(f*rowsPerFile), rowsPerFile, func() string {
			for i := range raw {
				raw[i] = byte(rng.Uint32())
			}
			if compressible {
				return strings.Repeat(hex.EncodeToString(raw), valueBytes/32)
			}
			return hex.EncodeToString(raw) // as incompressible as md5 text
		})
		if err := tbl.Append(ctx, []arrow.RecordBatch{rec}, nil); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	fp, err := tbl.Footprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	written = fp.DataBytes
	if fp.DataFiles != files || !compressible && written < 56<<20 || compressible && written > 16<<20 {
		t.Fatalf("the table holds %d data files, %d bytes: want %d files of ~0.5 MB each (compressible: %v, then much less)", fp.DataFiles, written, files, compressible)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	runtime.GC()
	baseLive, baseObjects, peak := heapSampler(t)
	res, err := tbl.Compact(ctx, iceberg.CompactOptions{TargetFileSize: 128 << 20})
	live, objects := peak()
	used := live - min(live, baseLive)
	if err != nil {
		t.Fatal(err)
	}
	after, err := tbl.Footprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted %d files (%d MiB) into %d: live heap at most %d MiB above the %d MiB before (heap objects, garbage included: %d MiB above %d MiB); result %+v",
		fp.DataFiles, written>>20, after.DataFiles, used>>20, baseLive>>20, (objects-min(objects, baseObjects))>>20, baseObjects>>20, res)
	if after.DataFiles >= max(2, files/4) {
		t.Fatalf("the compaction left %d data files of %d: it did not rewrite the partition", after.DataFiles, files)
	}
	bound := int64(compactHeapBound)
	if compressible {
		bound = compactHeapBoundCompressible
	}
	if used > uint64(bound) {
		t.Errorf("compacting %d MiB of data files took %d MiB of heap, above the %d MiB bound docs/maintenance.md states",
			written>>20, used>>20, bound>>20)
	}
}

// heapSampler samples, every millisecond in the background from now, the
// live heap (as the last collection marked it) and the heap's objects (live
// and garbage not yet collected): it returns both now and a function that
// stops the sampling and returns the most of each seen.
func heapSampler(t *testing.T) (baseLive, baseObjects uint64, stop func() (live, objects uint64)) {
	t.Helper()
	names := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(names)
	for _, s := range names {
		if s.Value.Kind() != rtmetrics.KindUint64 {
			t.Skip("the runtime does not report " + s.Name)
		}
	}
	baseLive, baseObjects = names[0].Value.Uint64(), names[1].Value.Uint64()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var live, objects uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := slices.Clone(names)
		for {
			rtmetrics.Read(s)
			live = max(live, s[0].Value.Uint64())
			objects = max(objects, s[1].Value.Uint64())
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return baseLive, baseObjects, func() (uint64, uint64) {
		close(done)
		wg.Wait()
		return live, objects
	}
}

// wideRows builds n rows of simpleSchema's table from id first on, each
// name value from next.
func wideRows(sc *arrow.Schema, first int64, n int, next func() string) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := 0; i < n; i++ {
		b.Field(0).(*array.Int64Builder).Append(first + int64(i))
		b.Field(1).AppendNull()
		b.Field(2).AppendNull()
		b.Field(3).AppendNull()
		b.Field(4).(*array.StringBuilder).Append(next())
	}
	return b.NewRecordBatch()
}
