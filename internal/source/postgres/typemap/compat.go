package typemap

import (
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/tidemark/tidemark/internal/coltype"
)

// AppendValue is coltype.AppendValue, kept only for internal/verify's
// tests until they call coltype themselves; new code calls coltype.
func AppendValue(b array.Builder, v any) error { return coltype.AppendValue(b, v) }
