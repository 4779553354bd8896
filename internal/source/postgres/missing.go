package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

// This file reads the values rows read for columns added after they were
// written. PostgreSQL 11 and later keep the constant DEFAULT of an
// `ALTER TABLE … ADD COLUMN` as the column's missing value
// (pg_attribute.atthasmissing / attmissingval) instead of rewriting the
// table, so the WAL (and the change stream) says nothing about the value
// the existing rows now hold. The lake learns it here, from the catalog,
// when it adds the column (docs/bronze.md, "Columns added with a default").

// missingValues returns, per column name, the text (under
// typemap.SessionSettings) of the missing value of every column of table t
// that has one. The catalog is read as it is now, not as of the stream's
// position: a table rewritten since the column was added (ALTER COLUMN
// TYPE, a volatile DEFAULT) no longer has a missing value.
func missingValues(ctx context.Context, conn *pgx.Conn, t change.TableID) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, a.attmissingval::text FROM pg_attribute a
		JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.atthasmissing`, t.Schema, t.Name)
	if err != nil {
		return nil, classify(fmt.Errorf("table %s: read the columns' missing values: %w", t, err))
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name string
		var arr *string
		if err := rows.Scan(&name, &arr); err != nil {
			return nil, classify(fmt.Errorf("table %s: read the columns' missing values: %w", t, err))
		}
		if arr == nil {
			continue
		}
		v, null, err := arrayElement(*arr)
		if err != nil {
			return nil, fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf("table %s column %q: cannot read its missing value (pg_attribute.attmissingval)", t, name), err)
		}
		if !null {
			out[name] = v
		}
	}
	if err := rows.Err(); err != nil {
		return nil, classify(fmt.Errorf("table %s: read the columns' missing values: %w", t, err))
	}
	return out, nil
}

// arrayElement returns the element of the text of a one-element,
// one-dimensional array ({x}, {"a b"}), unquoted; null for {NULL}. The
// element is left whole whatever the type's delimiter (box uses ';').
func arrayElement(s string) (v string, null bool, err error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return "", false, errors.New("not a one-dimensional array literal")
	}
	in := s[1 : len(s)-1]
	if in == "NULL" {
		return "", true, nil
	}
	if !strings.HasPrefix(in, `"`) {
		return in, false, nil
	}
	if len(in) < 2 || in[len(in)-1] != '"' {
		return "", false, errors.New("unterminated quoted element")
	}
	var b strings.Builder
	q := in[1 : len(in)-1]
	for i := 0; i < len(q); i++ {
		if q[i] == '\\' && i+1 < len(q) {
			i++
		}
		b.WriteByte(q[i])
	}
	return b.String(), false, nil
}

// withMissing sets the Missing value of the fields of s that texts name,
// decoding each with its column's mapping. s must not be shared yet.
func withMissing(t change.TableID, s *change.Schema, rel *Relation, texts map[string]string) error {
	for i := range s.Fields {
		text, ok := texts[s.Fields[i].Name]
		if !ok {
			continue
		}
		j := rel.Index(s.Fields[i].Name)
		if j < 0 {
			continue
		}
		v, err := rel.Columns[j].Map.Decode([]byte(text))
		if err != nil {
			return fault.With(fault.ErrIncompatibleSchema, fmt.Sprintf(
				"table %s column %q: its missing value (the constant DEFAULT of the ADD COLUMN, which the existing rows read) has no exact representation in the lake", t, s.Fields[i].Name), err)
		}
		s.Fields[i].Missing, s.Fields[i].MissingText = v, text
	}
	return nil
}

// newFields reports whether s has a field that was is not in old.
func newFields(s, old *change.Schema) bool {
	have := map[string]bool{}
	if old != nil {
		for _, f := range old.Fields {
			have[f.Name] = true
		}
	}
	for _, f := range s.Fields {
		if !have[f.Name] {
			return true
		}
	}
	return false
}

// noteMissing fills the Missing values of schema s of table t, when s has
// a column old lacks (only then can the lake be about to add one), from
// the catalog through a connection of its own.
func (c *Capture) noteMissing(ctx context.Context, t change.TableID, s, old *change.Schema, rel *Relation) error {
	if !newFields(s, old) {
		return nil
	}
	conn, err := c.d.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	texts, err := missingValues(ctx, conn, t)
	if err != nil {
		return err
	}
	return withMissing(t, s, rel, texts)
}
