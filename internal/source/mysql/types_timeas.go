package mysql

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// TimeAs values a MySQL source accepts (Options.TimeAs, config time_as).
// A MySQL TIME is a signed duration (-838:59:59 to 838:59:59), which an
// Iceberg time (00:00:00 to 23:59:59.999999) cannot hold, so there is no
// "time" form: the default is micros.
const (
	// TimeAsMicros lands TIME as a long: signed microseconds.
	TimeAsMicros = "micros"
	// TimeAsText lands TIME as a string: MySQL's own text of the value,
	// [-]HH:MM:SS (hours up to 838) with the column's fractional digits.
	TimeAsText = "text"
)

// timeValue is a decoded TIME in the mapping's form: us itself for a long,
// its text for time_as text.
func (m *Mapping) timeValue(us int64, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	if m.k == kTimeText {
		return formatTime(us, m.frac), nil
	}
	return us, nil
}

// formatTime is MySQL's text of a TIME with frac fractional digits:
// -838:59:59, 25:00:00.500, 00:00:00.000001.
func formatTime(us int64, frac int) string {
	var b strings.Builder
	if us < 0 {
		b.WriteByte('-')
		us = -us
	}
	sec := us / usPerSecond
	two := func(n int64) {
		if n < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	two(sec / 3600)
	b.WriteByte(':')
	two(sec / 60 % 60)
	b.WriteByte(':')
	two(sec % 60)
	if frac > 0 {
		f := strconv.FormatInt(us%usPerSecond+usPerSecond, 10)[1:] // 6 digits
		b.WriteByte('.')
		b.WriteString(f[:min(frac, 6)])
	}
	return b.String()
}

// PropTimeAs is the bronze commit property that records the time_as a
// table's TIME columns land under (carried forward in every commit): a
// start under another value is refused with a message that names time_as
// (checkTimeAs) instead of the general type change bronze would report.
const PropTimeAs = "tidemark.time-as"

// timeAs is the time_as in effect ("" is micros).
func (c *Capture) timeAs() string {
	if c.opts.TimeAs == "" {
		return TimeAsMicros
	}
	return c.opts.TimeAs
}

// timeColumn is the name of t's first TIME column ("" if none).
func (t *table) timeColumn() string {
	for _, col := range t.cols {
		if col.DataType == "time" {
			return col.Name
		}
	}
	return ""
}

// propsReader is the Sink side of checkTimeAs: bronze.Writer tells a
// table's recorded state before the table is opened. Optional.
type propsReader interface {
	TableProps(ctx context.Context, id change.TableID) (map[string]string, bool, error)
}

// checkTimeAs refuses to open t when its bronze table records that its
// TIME columns landed under another time_as: micros (long) and text
// (string) are not mixed in one table.
func (c *Capture) checkTimeAs(ctx context.Context, t *table) error {
	col := t.timeColumn()
	pr, ok := c.sink.(propsReader)
	if col == "" || !ok {
		return nil
	}
	props, ok, err := pr.TableProps(ctx, t.id)
	if err != nil || !ok {
		return err
	}
	was := props[PropTimeAs]
	if was == "" || was == c.timeAs() {
		return nil
	}
	return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
		"table %s column %q (TIME at the source) landed in bronze under time_as %s (%s) but lands under time_as %s (%s) now: "+
			"the setting time_as differs from the one the table was built under, and the two forms are not mixed in one table. "+
			"Set time_as back to %s, or rebuild the table under the current setting with `tidemark resnapshot --replace %s` (docs/type-mapping.md, time columns and Spark)",
		t.id, col, was, timeAsForm(was), c.timeAs(), timeAsForm(c.timeAs()), was, t.id), nil)
}

// timeAsForm names the lake type time_as lands a TIME as.
func timeAsForm(as string) string {
	if as == TimeAsText {
		return "string"
	}
	return "long microseconds"
}

// recordTimeAs records in t's bronze table the time_as its TIME columns
// land under, when its state st does not say it yet.
func (c *Capture) recordTimeAs(ctx context.Context, t *table, st pipeline.TableState) error {
	if t.timeColumn() == "" || st.Props[PropTimeAs] == c.timeAs() {
		return nil
	}
	return c.sink.WriteBatch(ctx, t.id, nil, map[string]string{PropTimeAs: c.timeAs()})
}
