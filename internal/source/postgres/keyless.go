package postgres

// How a table is keyed, and the tables refused one by one (docs/silver.md,
// "Tables without a primary key"): a table is keyed by its declared merge
// key (config merge_keys), else by its primary key or replica identity
// index, else, with REPLICA IDENTITY FULL, by the whole row. A table none
// of these fits is captured into bronze only (keyless): its snapshot is
// read in ctid ranges, its changes are appended as they come, and it has
// no silver table; `tidemark status` names it with the fix. A table whose
// name the lake cannot hold, or whose declared merge key cannot key it, is
// refused on its own: the other tables run.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	"github.com/tidemark/tidemark/internal/pipeline"
)

// orderableSQL is true for a column (a of pg_attribute, ty its pg_type)
// whose type has a default btree ordering, directly, through its domain's
// base type, as an enum, or through a binary-coercible cast (varchar to
// text): what the snapshot's ORDER BY and keyset pagination need of a key.
const orderableSQL = `EXISTS (SELECT 1 FROM pg_opclass oc JOIN pg_am am ON am.oid = oc.opcmethod
			WHERE am.amname = 'btree' AND oc.opcdefault AND (oc.opcintype IN (a.atttypid, ty.typbasetype)
				OR (ty.typtype = 'e' AND oc.opcintype = 'anyenum'::regtype)
				OR oc.opcintype IN (SELECT ca.casttarget FROM pg_cast ca WHERE ca.castsource IN (a.atttypid, ty.typbasetype) AND ca.castmethod = 'b')))`

// refusedTable marks the error of a table that is refused on its own: the
// capture leaves it out, records why (Capture.refused) and goes on with
// the others.
type refusedTable struct{ err error }

func (r *refusedTable) Error() string { return r.err.Error() }
func (r *refusedTable) Unwrap() error { return r.err }

// refuse marks err as refusing its table only.
func refuse(err error) error { return &refusedTable{err: err} }

// isRefusal reports whether err refuses one table only.
func isRefusal(err error) bool {
	var r *refusedTable
	return errors.As(err, &r)
}

// keylessTable marks the reason a table has no key to merge by: it is
// captured into bronze only (TableInfo.Keyless), never refused.
type keylessTable struct{ err error }

func (k *keylessTable) Error() string { return k.err.Error() }
func (k *keylessTable) Unwrap() error { return k.err }

// bronzeOnly marks err (a fault.ErrNoPrimaryKey) as the reason a table is
// captured into bronze only.
func bronzeOnly(err error) error { return &keylessTable{err: err} }

// keyProblem says why column c cannot be part of a key, or "".
func keyProblem(c Column) string {
	switch c.Map.IcebergType().(type) {
	case *iceberg.ListType, *iceberg.StructType, *iceberg.MapType:
		return fmt.Sprintf("%s is %s, which an Iceberg key cannot hold", quoteIdent(c.Name), c.TypeName)
	case iceberg.Float32Type, iceberg.Float64Type:
		return fmt.Sprintf("%s is %s, which has no exact equality (Iceberg refuses floating point keys)", quoteIdent(c.Name), c.TypeName)
	}
	switch {
	case !c.NotNull:
		return fmt.Sprintf("%s may be NULL", quoteIdent(c.Name))
	case !c.Orderable:
		return fmt.Sprintf("%s is %s, which has no ordering to read the table in chunks by", quoteIdent(c.Name), c.TypeName)
	}
	return ""
}

// mergeKeyConfig is the config line that declares a merge key for table
// t: merge_keys: {schema.table: [column, ...]}, the table named as
// tables: takes it (quoted for YAML when it must be).
func mergeKeyConfig(t change.TableID) string {
	name := config.TableName{Schema: t.Schema, Table: t.Name}.String()
	if strings.ContainsAny(name, "\"':{}[],#&*!|>%@`") {
		name = "'" + strings.ReplaceAll(name, "'", "''") + "'"
	}
	return "merge_keys: {" + name + ": [column, ...]}"
}

// chooseKey returns the columns table t is keyed by: declared (its config
// merge key), else ident (its primary key or replica identity index),
// else, under REPLICA IDENTITY FULL, every column. replid is
// pg_class.relreplident. For a table none fits it returns no key and the
// reason, marked bronzeOnly, with the one-line fixes: the table is
// captured into bronze only.
func chooseKey(t change.TableID, rel *Relation, replid string, ident, declared []string) ([]string, error) {
	if len(declared) > 0 {
		return declaredKey(t, rel, replid, ident, declared)
	}
	if len(ident) > 0 {
		if replid == "n" {
			return nil, bronzeOnly(fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
				"table %s has REPLICA IDENTITY NOTHING: its updates and deletes carry no key, so it is captured into bronze only, with no silver table. "+
					"Run ALTER TABLE %s REPLICA IDENTITY DEFAULT", showTable(t), quoteTable(t)), nil))
		}
		return ident, nil
	}
	if replid == "f" {
		var why []string
		for _, c := range rel.Columns {
			if p := keyProblem(c); p != "" {
				why = append(why, p)
			}
		}
		if len(why) == 0 {
			all := make([]string, len(rel.Columns))
			for i, c := range rel.Columns {
				all[i] = c.Name
			}
			return all, nil
		}
		return nil, bronzeOnly(fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
			"table %s has no primary key, and REPLICA IDENTITY FULL cannot key it on the whole row (%s), so it is captured into bronze only, with no silver table. "+
				"Add a key (ALTER TABLE %s ADD PRIMARY KEY (...)) or declare the columns to merge it by in the config (%s)",
			showTable(t), strings.Join(why, "; "), quoteTable(t), mergeKeyConfig(t)), nil))
	}
	return nil, bronzeOnly(fault.With(fault.ErrNoPrimaryKey, fmt.Sprintf(
		"table %s has no primary key and no replica identity index, so it is captured into bronze only, with no silver table: tidemark cannot merge its changes by key. "+
			"Add one (ALTER TABLE %s ADD PRIMARY KEY (...)), or key it on the whole row (ALTER TABLE %s REPLICA IDENTITY FULL), "+
			"or declare the columns to merge it by in the config (%s)", showTable(t), quoteTable(t), quoteTable(t), mergeKeyConfig(t)), nil))
}

// declaredKey checks a declared merge key against table t. Its columns
// must exist and be fit for a key (keyProblem); and an update must carry
// the key's old values: under REPLICA IDENTITY FULL it does, as it does
// when the key is the replica identity's; a table with no replica identity
// at all takes no update or delete while it is published (PostgreSQL
// refuses them), so its key never changes.
func declaredKey(t change.TableID, rel *Relation, replid string, ident, declared []string) ([]string, error) {
	var why []string
	for _, k := range declared {
		i := rel.Index(k)
		if i < 0 {
			why = append(why, fmt.Sprintf("%s is not a column of the table", quoteIdent(k)))
			continue
		}
		if p := keyProblem(rel.Columns[i]); p != "" {
			why = append(why, p)
		}
	}
	if len(why) > 0 {
		return nil, refuse(fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"table %s: the merge key merge_keys declares (%s) cannot key it: %s; so it is not captured. Fix merge_keys, or remove the table's entry to use its primary key",
			showTable(t), strings.Join(declared, ", "), strings.Join(why, "; ")), nil))
	}
	sameAsIdent := len(ident) == len(declared)
	for _, k := range ident {
		sameAsIdent = sameAsIdent && slices.Contains(declared, k)
	}
	if replid == "f" || sameAsIdent || (len(ident) == 0 || replid == "n") {
		return slices.Clone(declared), nil
	}
	return nil, refuse(fault.With(fault.ErrBadConfig, fmt.Sprintf(
		"table %s: the merge key merge_keys declares (%s) is not its replica identity (%s), so an update that changes the merge key would not carry its old value and silver would keep the old row; so it is not captured. "+
			"Run ALTER TABLE %s REPLICA IDENTITY FULL (updates and deletes then carry the whole old row)",
		showTable(t), strings.Join(declared, ", "), strings.Join(ident, ", "), quoteTable(t)), nil))
}

// recordRefused logs and records the tables refused on their own and the
// tables captured into bronze only (each whole set, so a table fixed
// since is no longer named).
func (c *Capture) recordRefused(ctx context.Context) error {
	if err := pipeline.RecordRefused(ctx, c.w, c.log, c.refused, showTable); err != nil {
		return err
	}
	return pipeline.RecordBronzeOnly(ctx, c.w, c.log, c.keyless, showTable)
}
