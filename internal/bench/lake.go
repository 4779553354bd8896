package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	iceberggo "github.com/apache/iceberg-go"
	sqlcat "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/uptrace/bun/driver/sqliteshim"
)

// The lake is read back with iceberg-go directly, after tidemark stopped:
// the harness needs every snapshot with its timing and the rows it added,
// which is more than internal/lake exposes (and should expose).

// lakeReader reads a stopped pipeline's lake.
type lakeReader struct {
	wh  string
	db  *sql.DB
	cat *sqlcat.Catalog
}

func openLake(wh string) (*lakeReader, error) {
	db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(wh, "catalog.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, fmt.Errorf("open the catalog of %s: %w", wh, err)
	}
	cat, err := sqlcat.NewCatalog("tidemark", db, sqlcat.SQLite, iceberggo.Properties{
		sqlcat.DriverKey: sqliteshim.ShimName, sqlcat.DialectKey: string(sqlcat.SQLite), "warehouse": "file://" + wh,
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open the catalog of %s: %w", wh, err)
	}
	return &lakeReader{wh: wh, db: db, cat: cat}, nil
}

func (l *lakeReader) close() {
	l.cat.Close()
	l.db.Close()
}

// snapInfo is one committed snapshot of a lake table.
type snapInfo struct {
	id      int64
	parent  *int64
	created time.Time // the snapshot's timestamp-ms
	// visible is when the snapshot became readable: the modification time
	// of the first metadata file that made it current (the catalog
	// pointer is swapped right after that file is written), or created if
	// that file is gone.
	visible time.Time
	files   int64 // added-data-files
	bytes   int64 // added-files-size
	records int64 // added-records
}

// snapshots lists a table's snapshots in commit order.
func (l *lakeReader) snapshots(ctx context.Context, ident []string) (*table.Table, []snapInfo, error) {
	tbl, err := l.cat.LoadTable(ctx, table.Identifier(ident))
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", strings.Join(ident, "."), err)
	}
	visible, err := firstCurrent(strings.TrimPrefix(tbl.Location(), "file://"))
	if err != nil {
		return nil, nil, err
	}
	var out []snapInfo
	for _, s := range tbl.Metadata().Snapshots() {
		si := snapInfo{id: s.SnapshotID, parent: s.ParentSnapshotID, created: time.UnixMilli(s.TimestampMs)}
		si.visible = si.created
		if v, ok := visible[s.SnapshotID]; ok && v.After(si.created) {
			si.visible = v
		}
		if s.Summary != nil {
			si.files = summaryInt(s.Summary.Properties, "added-data-files")
			si.bytes = summaryInt(s.Summary.Properties, "added-files-size")
			si.records = summaryInt(s.Summary.Properties, "added-records")
		}
		out = append(out, si)
	}
	slices.SortFunc(out, func(a, b snapInfo) int { return a.created.Compare(b.created) })
	return tbl, out, nil
}

func summaryInt(p iceberggo.Properties, k string) int64 {
	n, _ := strconv.ParseInt(p[k], 10, 64)
	return n
}

// firstCurrent maps each snapshot id to the modification time of the
// earliest metadata file of the table at location whose current snapshot
// it is.
func firstCurrent(location string) (map[int64]time.Time, error) {
	files, err := filepath.Glob(filepath.Join(location, "metadata", "*.metadata.json"))
	if err != nil {
		return nil, err
	}
	out := map[int64]time.Time{}
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var m struct {
			Current *int64 `json:"current-snapshot-id"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		if m.Current == nil || *m.Current < 0 {
			continue
		}
		if t, ok := out[*m.Current]; !ok || fi.ModTime().Before(t) {
			out[*m.Current] = fi.ModTime()
		}
	}
	return out, nil
}

// addedColumn calls fn with the values of the timestamp column col of every
// row snapshot s added (µs since the epoch).
func addedTimestamps(ctx context.Context, tbl *table.Table, s snapInfo, col string, fn func(us int64)) error {
	scan := tbl.NewIncrementalAppendScan()
	if s.parent == nil {
		scan = scan.FromSnapshotInclusive(s.id)
	} else {
		scan = scan.FromSnapshotExclusive(*s.parent)
	}
	tasks, err := scan.ToSnapshot(s.id).PlanFiles(ctx)
	if err != nil {
		return fmt.Errorf("plan the files of snapshot %d: %w", s.id, err)
	}
	if len(tasks) == 0 {
		return nil
	}
	rd := tbl.Scan(table.WithSelectedFields(col))
	defer rd.Close()
	_, itr, err := rd.ReadTasks(ctx, tasks)
	if err != nil {
		return fmt.Errorf("read the rows of snapshot %d: %w", s.id, err)
	}
	for rec, err := range itr {
		if err != nil {
			return fmt.Errorf("read the rows of snapshot %d: %w", s.id, err)
		}
		idx := rec.Schema().FieldIndices(col)
		if len(idx) == 0 {
			rec.Release()
			return fmt.Errorf("snapshot %d: no column %s", s.id, col)
		}
		ts, ok := rec.Column(idx[0]).(*array.Timestamp)
		if !ok {
			rec.Release()
			return fmt.Errorf("snapshot %d: column %s is %s, not a timestamp", s.id, col, rec.Column(idx[0]).DataType())
		}
		for i := 0; i < ts.Len(); i++ {
			if ts.IsValid(i) {
				fn(int64(ts.Value(i)))
			}
		}
		rec.Release()
	}
	return nil
}

// filesCreated counts the files under dir modified within [from, to), by
// kind: data (.parquet) and metadata (everything else: metadata JSON,
// manifest lists, manifests).
func filesCreated(dir string, from, to time.Time) (data, meta int64, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "_tidemark" {
				return filepath.SkipDir // spool
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if t := fi.ModTime(); t.Before(from) || !t.Before(to) || d.Name() == "catalog.db" || strings.HasPrefix(d.Name(), "catalog.db-") {
			return nil
		}
		if strings.HasSuffix(d.Name(), ".parquet") {
			data++
		} else {
			meta++
		}
		return nil
	})
	return data, meta, err
}
