package coltype

import "fmt"

// ValueError reports a value that cannot be represented exactly in the lake
// type of its column. It never contains the value itself (values may be
// sensitive); the caller keeps the raw value for the dead-letter table.
// Every source's decoder returns it, and the capture routes the row to the
// dead-letter table on it (errors.As).
type ValueError struct {
	Column string // column name
	Type   string // the column's source type, as the source names it
	Reason string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("column %q (%s): %s", e.Column, e.Type, e.Reason)
}
