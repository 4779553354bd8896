package export

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Status is what an export directory says: its settings, its watermark and
// its tables'.
type Status struct {
	Dir      string       `json:"dir"`
	Settings Settings     `json:"settings"`
	Root     Root         `json:"watermark"`
	Tables   []TableState `json:"tables"`
}

// ReadStatus reads an export directory's state (it writes nothing: it may
// run beside the export).
func ReadStatus(dir string) (Status, error) {
	st := Status{Dir: dir}
	ok, err := readJSON(filepath.Join(dir, settingsFile), &st.Settings)
	if err != nil {
		return st, err
	}
	if !ok {
		return st, fmt.Errorf("%s is not an export directory (no %s): run tidemark export --to %s first", dir, settingsFile, dir)
	}
	if _, err := readJSON(filepath.Join(dir, watermarkFile), &st.Root); err != nil {
		return st, err
	}
	if st.Tables, err = tableStates(dir); err != nil {
		return st, err
	}
	return st, nil
}

// WindowStatus answers "is window W of a table complete, and where is its
// file?".
type WindowStatus struct {
	Table string    `json:"table"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Complete: the window is final (its file, or its empty marker, never
	// changes).
	Complete bool `json:"complete"`
	// File is the window's file ("" when it had no changes, or is not
	// complete); Empty says it had none.
	File  string `json:"file,omitempty"`
	Empty bool   `json:"empty"`
	// Late are the late files of the window that are final.
	Late []string `json:"late,omitempty"`
	// Reason says why the window is not complete, or why it has no file.
	Reason string `json:"reason,omitempty"`
}

// Window answers for the window of table (schema.table) that holds at.
func (s Status) Window(table string, at time.Time) (WindowStatus, error) {
	window, err := time.ParseDuration(s.Settings.Window)
	if err != nil || window <= 0 {
		return WindowStatus{}, fmt.Errorf("%s: window %q is unreadable", filepath.Join(s.Dir, settingsFile), s.Settings.Window)
	}
	start := floorTime(at, window)
	ws := WindowStatus{Table: table, Start: start, End: start.Add(window)}
	var st *TableState
	for i := range s.Tables {
		if s.Tables[i].Table == table {
			st = &s.Tables[i]
		}
	}
	if st == nil {
		ws.Reason = "the export has no windows of this table yet (its snapshot may not be done)"
		return ws, nil
	}
	if ws.End.After(st.CompleteThrough) {
		ws.Reason = "not yet complete: the table's windows are final through " + st.CompleteThrough.Format(time.RFC3339)
		return ws, nil
	}
	ws.Complete = true
	if start.Before(st.FirstWindow) {
		ws.Empty = true
		ws.Reason = "before the table's first change (" + st.FirstWindow.Format(time.RFC3339) + ")"
		return ws, nil
	}
	dir := filepath.Join(s.Dir, st.Dir)
	base := windowName(start, window)
	f, err := newFormat(s.Settings.Format)
	if err != nil {
		return ws, err
	}
	switch {
	case exists(filepath.Join(dir, base+f.ext())):
		ws.File = filepath.Join(dir, base+f.ext())
	case exists(filepath.Join(dir, base+emptyExt)):
		ws.Empty = true
	default:
		return ws, fmt.Errorf("window %s of %s is claimed complete but has neither %s nor %s in %s: the export directory was changed by hand",
			base, table, base+f.ext(), base+emptyExt, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ws, err
	}
	for _, ent := range ents {
		if wstart, late, ok := parseWindowName(ent.Name()); ok && late >= 0 && late <= st.CommitLSN && wstart.Equal(start) {
			ws.Late = append(ws.Late, filepath.Join(dir, ent.Name()))
		}
	}
	return ws, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
