package lake

import (
	"context"
	"slices"
)

// Lister is the part of a Catalog TablesUnder needs.
type Lister interface {
	ListNamespaces(ctx context.Context) ([][]string, error)
	ListTables(ctx context.Context, ns []string) ([][]string, error)
}

// TablesUnder is Catalog.TablesUnder for any format: the full identifiers
// of the tables in every namespace one level below prefix (for prefix
// {"bronze", source}: the tables of every bronze.<source>.<schema>),
// sorted; none if there is no such namespace.
func TablesUnder(ctx context.Context, c Lister, prefix []string) ([][]string, error) {
	nss, err := c.ListNamespaces(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]string
	for _, ns := range nss {
		if len(ns) != len(prefix)+1 || !slices.Equal(ns[:len(prefix)], prefix) {
			continue
		}
		ids, err := c.ListTables(ctx, ns)
		if err != nil {
			return nil, err
		}
		out = append(out, ids...)
	}
	slices.SortFunc(out, slices.Compare)
	return out, nil
}
