package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark/tidemark/internal/fault"
)

// File names in the export directory.
const (
	settingsFile  = "_export.json"
	watermarkFile = "_watermark"
	lockFile      = ".lock"
	emptyExt      = ".empty"
	tmpPrefix     = ".tmp-"
	// timeLayout names a window's bounds: UTC, sortable, no colons.
	timeLayout = "20060102T150405Z"
)

// Settings are an export's fixed settings (_export.json).
type Settings struct {
	Source string `json:"source"`
	Window string `json:"window"`
	Format string `json:"format"`
}

// TableState is a table's _watermark: how far its windows are final.
type TableState struct {
	Table  string `json:"table"`  // schema.table
	Bronze string `json:"bronze"` // the bronze table's full name
	Dir    string `json:"dir"`    // the directory of its windows, in the export's
	// FirstWindow is the start of the table's first window (the window of
	// its first change); windows before it are before the table had any.
	FirstWindow time.Time `json:"first_window"`
	// CompleteThrough: every window ending at or before it has its file
	// or empty marker, final.
	CompleteThrough time.Time `json:"complete_through"`
	// CommitLSN is the bronze commit position (cdc_source_lsn) up to which
	// the windows and late files hold every row; late files named by a
	// number at or below it are final.
	CommitLSN int64     `json:"commit_lsn"`
	LateRows  int64     `json:"late_rows"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Root is the export's _watermark.
type Root struct {
	// CompleteThrough is the least of the tables' (zero: no table has
	// one yet).
	CompleteThrough time.Time            `json:"complete_through"`
	Tables          map[string]time.Time `json:"tables"`
	UpdatedAt       time.Time            `json:"updated_at"`
}

// dirName is the directory of a table's windows: schema.table, each part
// path-escaped (a '.' in a name too, so the name reads back).
func dirName(schema, table string) string {
	esc := func(s string) string {
		var b strings.Builder
		for _, r := range s {
			switch {
			case r == '/' || r == '.' || r == '%' || r == 0 || (r < 0x20):
				fmt.Fprintf(&b, "%%%02X", r)
			default:
				b.WriteRune(r)
			}
		}
		out := b.String()
		if out == "" || strings.HasPrefix(out, "_") || strings.HasPrefix(out, ".") {
			out = "%" + fmt.Sprintf("%02X", out[0]) + out[1:]
		}
		return out
	}
	if table == "" {
		return esc(schema)
	}
	return esc(schema) + "." + esc(table)
}

// windowName is the base name of the window starting at start.
func windowName(start time.Time, window time.Duration) string {
	return start.UTC().Format(timeLayout) + "_" + start.Add(window).UTC().Format(timeLayout)
}

// parseWindowName reads the start of a window file's name, and the number
// of a late file (-1: not a late file).
func parseWindowName(name string) (start time.Time, late int64, ok bool) {
	if len(name) < 2*len(timeLayout)+1 || name[len(timeLayout)] != '_' {
		return time.Time{}, 0, false
	}
	start, err := time.Parse(timeLayout, name[:len(timeLayout)])
	if err != nil {
		return time.Time{}, 0, false
	}
	rest := name[2*len(timeLayout)+1:]
	late = -1
	if strings.HasPrefix(rest, ".late-") {
		num := strings.TrimPrefix(rest, ".late-")
		if i := strings.IndexByte(num, '.'); i >= 0 {
			num = num[:i]
		}
		if late, err = strconv.ParseInt(num, 10, 64); err != nil {
			return time.Time{}, 0, false
		}
	}
	return start, late, true
}

// cleanUnclaimed removes what a crashed pass left in a table's directory:
// temporary files, windows at or past the watermark, late files above its
// commit position. None of them was claimed final.
func cleanUnclaimed(dir string, st TableState) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		name := ent.Name()
		stale := strings.HasPrefix(name, tmpPrefix)
		if start, late, ok := parseWindowName(name); ok {
			stale = (late < 0 && !start.Before(st.CompleteThrough)) || late > st.CommitLSN
		}
		if stale {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// writeFile writes dir/name atomically: fill writes a temporary file, which
// is synced and renamed into place, and the directory synced.
func writeFile(dir, name string, fill func(*os.File) error) error {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	tmp := f.Name()
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("export: write %s: %w", filepath.Join(dir, name), err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func writeJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(dir, name, func(f *os.File) error {
		_, err := f.Write(append(b, '\n'))
		return err
	})
}

// readJSON reads path into v; ok is false when it does not exist. An
// unreadable file is corrupt state: never overwritten, never a restart
// from zero.
func readJSON(path string, v any) (ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fault.With(fault.ErrCorruptState, fmt.Sprintf("export state %s is unreadable (restore it, or export to a new directory)", path), err)
	}
	return true, nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// lockDir takes dir's lock: one export writes a directory at a time.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fault.With(fault.ErrBadConfig, fmt.Sprintf("export directory %s is in use by another tidemark export (stop it first)", dir), err)
	}
	return f, nil
}

// tableStates reads the _watermark of every table directory under dir.
func tableStates(dir string) ([]TableState, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []TableState
	for _, ent := range ents {
		if !ent.IsDir() || strings.HasPrefix(ent.Name(), ".") || strings.HasPrefix(ent.Name(), "_") {
			continue
		}
		var st TableState
		ok, err := readJSON(filepath.Join(dir, ent.Name(), watermarkFile), &st)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Table < out[j].Table })
	return out, nil
}

// writeRoot writes the export's _watermark from its tables'.
func (e *Exporter) writeRoot() error {
	sts, err := tableStates(e.opts.Dir)
	if err != nil {
		return err
	}
	root := Root{Tables: map[string]time.Time{}, UpdatedAt: time.Now().UTC()}
	for i, st := range sts {
		root.Tables[st.Table] = st.CompleteThrough
		if i == 0 || st.CompleteThrough.Before(root.CompleteThrough) {
			root.CompleteThrough = st.CompleteThrough
		}
	}
	return writeJSON(e.opts.Dir, watermarkFile, root)
}
