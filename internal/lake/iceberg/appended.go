package iceberg

import (
	"cmp"
	"context"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// planAppended returns the data files that the append snapshots after
// `after` (exclusive; NoSnapshot: from the first) up to `to` added, as
// iceberg-go's incremental append scan plans them, read from to's manifest
// list alone. iceberg-go reads the manifest list of every snapshot of the
// range, and each lists every manifest of the table: a range of n commits
// of a table of m manifests cost n×m entries decoded, so a silver backlog
// of 500 small bronze commits took ten times as long to plan as to merge
// (issue 22). Here the list of `to` is read once, and only the manifests
// written in the range (sequence number above after's) are opened; of
// their entries, the live ones added by a snapshot of the range are kept
// (ADDED, or EXISTING after a manifest merge).
//
// When the range holds a snapshot that is not an append (a compaction may
// have rewritten a file of the range: the scan returns the file as it was
// added, which to's list no longer holds), on a format v1 table (no
// sequence numbers), or when `after` is not an ancestor of to, it falls back
// to iceberg-go's scan (ok false: the caller plans it so).
func planAppended(ctx context.Context, tbl *table.Table, after, to int64) (tasks []table.FileScanTask, ok bool, err error) {
	meta := tbl.Metadata()
	if meta.Version() < 2 {
		return nil, false, nil
	}
	lookup := snapshotLookup(meta)
	toSnap := lookup(to)
	if toSnap == nil {
		return nil, false, nil
	}
	inRange := map[int64]bool{}
	afterSeq := int64(-1)
	for s := toSnap; ; {
		if s.SnapshotID == after {
			afterSeq = s.SequenceNumber
			break
		}
		if s.Summary == nil || s.Summary.Operation != table.OpAppend {
			return nil, false, nil
		}
		inRange[s.SnapshotID] = true
		if s.ParentSnapshotID == nil {
			if after != NoSnapshot {
				return nil, false, nil // after is not an ancestor: the scan says so
			}
			break
		}
		if s = lookup(*s.ParentSnapshotID); s == nil {
			return nil, false, nil
		}
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, false, err
	}
	manifests, err := toSnap.Manifests(fs)
	if err != nil {
		return nil, false, err
	}
	var want []iceberggo.ManifestFile
	for _, mf := range manifests {
		if mf.ManifestContent() != iceberggo.ManifestContentData || mf.SequenceNum() <= afterSeq {
			continue // deletes, or written before the range: none of its files
		}
		want = append(want, mf)
	}
	// A backlog of n bronze commits has n small manifests (a commit writes
	// one): each is its own Avro file with its own schema to parse, so
	// they are read in parallel, a worker per core.
	fetched := make([][]iceberggo.ManifestEntry, len(want))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, mf := range want {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			entries, err := mf.FetchEntries(fs, true)
			fetched[i] = entries
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, false, err
	}
	seen := map[string]bool{}
	for _, entries := range fetched {
		for _, e := range entries {
			if e.Status() == iceberggo.EntryStatusDELETED || !inRange[e.SnapshotID()] {
				continue
			}
			f := e.DataFile()
			if seen[f.FilePath()] {
				continue
			}
			seen[f.FilePath()] = true
			task := table.FileScanTask{File: f, Start: 0, Length: f.FileSizeBytes(), FirstRowID: f.FirstRowID()}
			if sn := e.SequenceNum(); sn >= 0 {
				task.DataSequenceNumber = &sn
			}
			tasks = append(tasks, task)
		}
	}
	slices.SortFunc(tasks, func(a, b table.FileScanTask) int { return cmp.Compare(a.File.FilePath(), b.File.FilePath()) })
	return tasks, true, nil
}

// appendedTasks plans the data files appended after `after` up to to:
// planAppended, or iceberg-go's incremental append scan where it does not
// apply.
func appendedTasks(ctx context.Context, tbl *table.Table, after, to int64) ([]table.FileScanTask, error) {
	key := planKey{tbl.Metadata().TableUUID().String(), after, to}
	if tasks, ok := plans.get(key); ok {
		return tasks, nil
	}
	tasks, ok, err := planAppended(ctx, tbl, after, to)
	if err != nil || ok {
		if err == nil {
			plans.put(key, tasks)
		}
		return tasks, err
	}
	scan := tbl.NewIncrementalAppendScan().ToSnapshot(to)
	if after != NoSnapshot {
		scan = scan.FromSnapshotExclusive(after)
	}
	return scan.PlanFiles(ctx)
}

// plans remembers the last few plans of planAppended: a merge step plans
// its range up to three times (its transaction boundary, its row size, its
// read), and a range of snapshots never changes. Callers do not modify the
// tasks.
var plans planCache

type planKey struct {
	table     string // the table's UUID
	after, to int64
}

type planCache struct {
	mu   sync.Mutex
	keys []planKey
	vals [][]table.FileScanTask
}

const planCacheSize = 8

func (c *planCache) get(k planKey) ([]table.FileScanTask, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, kk := range c.keys {
		if kk == k {
			return c.vals[i], true
		}
	}
	return nil, false
}

func (c *planCache) put(k planKey, v []table.FileScanTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.keys) == planCacheSize {
		c.keys, c.vals = c.keys[1:], c.vals[1:]
	}
	c.keys = append(c.keys, k)
	c.vals = append(c.vals, v)
}

// snapshotLookup returns meta.SnapshotByID for a walk along a table's
// history. iceberg-go's SnapshotByID clones the snapshot and may rebuild
// the table's snapshot index on every call, so a walk of n snapshots of a
// table of m cost n×m (a silver backlog of 500 bronze commits allocated
// hundreds of MiB walking it: issue 22). A short walk uses SnapshotByID;
// past a few steps, the lookup switches to an index of one copy of every
// snapshot (meta.Snapshots, made once). Callers must not modify the
// snapshots it returns.
func snapshotLookup(meta table.Metadata) func(int64) *table.Snapshot {
	const direct = 8
	calls := 0
	var byID map[int64]*table.Snapshot
	return func(id int64) *table.Snapshot {
		if byID == nil {
			if calls++; calls <= direct {
				return meta.SnapshotByID(id)
			}
			all := meta.Snapshots()
			byID = make(map[int64]*table.Snapshot, len(all))
			for i := range all {
				byID[all[i].SnapshotID] = &all[i]
			}
		}
		return byID[id]
	}
}
