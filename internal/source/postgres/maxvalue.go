package postgres

import (
	"fmt"

	"github.com/tidemark/tidemark/internal/coltype"
)

// ReasonValueTooLarge names, in a dead letter's error, a row with a value
// longer than max_value_bytes.
const ReasonValueTooLarge = "value_too_large"

// tooLarge returns the error that makes a row with value v of column i a
// dead letter when v is longer than max (0: no maximum), else nil. The
// length is that of the text PostgreSQL sends (for bytea, its hex form).
func tooLarge(rel *Relation, i int, v []byte, max int64) error {
	if max <= 0 || int64(len(v)) <= max {
		return nil
	}
	return &coltype.ValueError{Column: rel.Columns[i].Name, Type: rel.Columns[i].Map.SourceType(),
		Reason: fmt.Sprintf("%s: the value is %d bytes, over max_value_bytes (%d); the dead letter's raw row leaves it out", ReasonValueTooLarge, len(v), max)}
}
