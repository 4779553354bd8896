package delta

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RemoveOrphans deletes the files a crashed or failed writer left behind:
// data files no commit references (neither an active file nor a
// tombstone) and temporary files of the log, modified more than olderThan
// ago, and returns their paths relative to the table's directory. It
// reloads the log first. olderThan must exceed the longest time a writer
// takes from writing a data file to committing it (Delta's default
// retention, delta.deletedFileRetentionDuration, is 7 days): a file being
// committed is not referenced yet. Directories whose names start with '_'
// or '.' other than the log are left alone (the protocol reserves them).
func (t *Table) RemoveOrphans(ctx context.Context, olderThan time.Duration) ([]string, error) {
	removed, _, err := t.removeOrphans(ctx, olderThan, false)
	return removed, err
}

// removeOrphans is RemoveOrphans, also returning the bytes; a dry run
// lists the files without deleting them.
func (t *Table) removeOrphans(ctx context.Context, olderThan time.Duration, dryRun bool) ([]string, int64, error) {
	if err := t.Refresh(ctx); err != nil {
		return nil, 0, err
	}
	t.mu.Lock()
	known := make(map[string]bool, len(t.st.files)+len(t.st.tombstones))
	for _, a := range t.st.files {
		known[decodedPath(a.Path)] = true
	}
	for _, r := range t.st.tombstones {
		known[decodedPath(r.Path)] = true
	}
	t.mu.Unlock()
	cutoff := time.Now().Add(-olderThan)
	var removed []string
	var bytes int64
	err := filepath.WalkDir(t.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(t.dir, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && rel != logDir && (strings.HasPrefix(d.Name(), "_") || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		inLog := strings.HasPrefix(rel, logDir+"/")
		switch {
		case inLog && !strings.HasSuffix(d.Name(), ".tmp"):
			return nil
		case !inLog && (known[rel] || !strings.HasSuffix(d.Name(), ".parquet")):
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.ModTime().After(cutoff) {
			return nil
		}
		if !dryRun {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return err
			}
		}
		removed = append(removed, rel)
		bytes += fi.Size()
		return nil
	})
	if err != nil {
		return removed, bytes, fmt.Errorf("Delta table %s: removing orphan files: %w", t.dir, err)
	}
	return removed, bytes, nil
}

// decodedPath is an add or remove action's path as a slash-separated path
// relative to the table (absolute paths stay absolute).
func decodedPath(p string) string {
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}
