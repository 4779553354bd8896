package delta

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/uuid"
)

// errVersionTaken: another writer committed the version first.
var errVersionTaken = errors.New("version already committed")

// unsyncedError: the commit is in the log (readers see it) but syncing the
// log directory failed, so it may not survive a crash of the machine.
type unsyncedError struct {
	version int64
	err     error
}

func (e *unsyncedError) Error() string {
	return fmt.Sprintf("commit %d is in the log, but syncing the log directory failed (it may not survive a power loss): %v", e.version, e.err)
}

func (e *unsyncedError) Unwrap() error { return e.err }

// putIfAbsent writes data as the commit of version v, atomically and only
// if no commit of v exists (PROTOCOL.md, "Creation of New Log Entries":
// mutual exclusion on the version). The data goes to a temporary file,
// synced, then hard-linked to its name: link(2) fails with EEXIST when the
// name exists and never replaces it, and a reader sees the whole file or
// none. The directory is synced so that the commit survives a crash; when
// only that fails, the error is an *unsyncedError: the commit happened.
func putIfAbsent(dir string, v int64, data []byte) error {
	ldir := filepath.Join(dir, logDir)
	tmp := filepath.Join(ldir, fmt.Sprintf("_commit_%s.json.tmp", uuid.NewString()))
	if err := writeSynced(tmp, data); err != nil {
		os.Remove(tmp)
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, filepath.Join(ldir, commitName(v))); err != nil {
		if errors.Is(err, os.ErrExist) {
			return errVersionTaken
		}
		return fmt.Errorf("commit %d: %w", v, err)
	}
	if err := syncDir(ldir); err != nil {
		return &unsyncedError{version: v, err: err}
	}
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// noClose is a file whose Close does nothing (Parquet writers close their
// sink; the file is synced and closed after them).
type noClose struct{ f *os.File }

func (n noClose) Write(p []byte) (int, error) { return n.f.Write(p) }
func (n noClose) Close() error                { return nil }

// writeFileAtomic writes a file through fn to a temporary name, syncs it,
// and renames it to path (replacing what is there), returning its size.
func writeFileAtomic(path string, fn func(io.WriteCloser) error) (int64, error) {
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf("_%s.tmp", uuid.NewString()))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	fail := func(err error) (int64, error) {
		f.Close()
		os.Remove(tmp)
		return 0, err
	}
	if err := fn(noClose{f}); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return 0, err
	}
	return st.Size(), syncDir(filepath.Dir(path))
}
