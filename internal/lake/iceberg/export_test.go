package iceberg

import (
	"context"

	iceberggo "github.com/apache/iceberg-go"
)

// CurrentDataFiles lists the data files of t's current snapshot (tests
// check the metrics the writer recorded).
func CurrentDataFiles(ctx context.Context, t *Table) ([]iceberggo.DataFile, error) {
	tasks, err := t.current().Scan().PlanFiles(ctx)
	if err != nil {
		return nil, err
	}
	var out []iceberggo.DataFile
	for _, task := range tasks {
		out = append(out, task.File)
	}
	return out, nil
}

// SetLiveKeysChunk makes ScanLiveKeys read row groups in chunks of n rows
// until restore is called.
func SetLiveKeysChunk(n int64) (restore func()) {
	old := liveKeysChunk
	liveKeysChunk = n
	return func() { liveKeysChunk = old }
}

// MatchKeys returns the indices of vals that hold one of keys, as
// ScanLiveKeys picks them.
func MatchKeys(keys, vals []int64) []int32 {
	p := &keyProbe{keys: keys}
	p.buildFilter()
	return p.match(vals, nil, nil)
}

// LiveKeysScanned returns how many data files ScanLiveKeys opened and how
// many row groups' key column it decoded so far (direct reads only).
func LiveKeysScanned() (files, groups int64) {
	return scanned.files.Load(), scanned.groups.Load()
}

// LiveFile is the path of data file i of live.
func LiveFile(live *LiveRows, i int) string { return live.files[i].FilePath() }
