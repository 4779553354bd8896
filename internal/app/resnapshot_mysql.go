package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/bronze"
	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/fault"
	lake "github.com/tidemark/tidemark/internal/lake/iceberg"
)

// resnapshotMySQL is Resnapshot for a MySQL/MariaDB source: the same
// requests (named tables, --all, --replace), with no slot. The binlog
// position a --replace marks is the server's binlog end now (SHOW MASTER
// STATUS): the stream's changes of a replaced table below it are not
// written (their effect is in the table's re-snapshot, read after it).
// MySQL holds no lock for a running pipeline: stop it first.
func resnapshotMySQL(ctx context.Context, cfg *config.Config, opts ResnapshotOptions, cat *lake.Catalog, captured []change.TableID, out io.Writer) error {
	mo, err := mysqlOptions(cfg)
	if err != nil {
		return err
	}
	if opts.ResetSlot {
		return fault.With(fault.ErrBadConfig, "--reset-slot: a MySQL/MariaDB source has no replication slot; use --all alone", nil)
	}
	var tables []change.TableID
	if opts.All {
		tables = captured
	} else {
		for _, s := range opts.Tables {
			// "shop.orders" or "orders": the schema of a MySQL table is its database.
			n, err := config.ParseTableName(s)
			if err != nil {
				n = config.TableName{Schema: mo.Database, Table: s}
			}
			t := change.TableID{Schema: n.Schema, Name: n.Table}
			switch {
			case t.Schema != mo.Database:
				return fault.With(fault.ErrBadConfig, fmt.Sprintf("table %s is not in database %s, the one the source URL names", s, mo.Database), nil)
			case !slices.Contains(captured, t) && !opts.Replace:
				return fault.With(fault.ErrBadConfig, fmt.Sprintf("pipeline %q has no bronze table for %s: is it captured (see `tidemark status`)?", cfg.Name, t), nil)
			}
			if !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
	}
	id := requestID(time.Now())
	fmt.Fprintf(out, "re-snapshot %s of pipeline %q:\n", id, cfg.Name)
	if opts.Replace {
		before, err := mysqlLogEnd(ctx, cfg.Source.Reveal())
		if err != nil {
			return err
		}
		return replaceTables(ctx, cat, cfg.Name, tables, id, before, mysqlFormatPos, out)
	}
	for _, t := range tables {
		snap, err := bronze.RequestSnapshot(ctx, cat, cfg.Name, t, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s: snapshot state reset to pending (%s, snapshot %d)\n", t, strings.Join(bronze.Ident(cfg.Name, t), "."), snap)
	}
	fmt.Fprintf(out, "next: `tidemark run` with the same flags reads %d table(s) again in chunks while it streams\n", len(tables))
	fmt.Fprintf(out, "  (progress: `snapshot progress` log lines and `tidemark status`). Until a table's re-snapshot is\n")
	fmt.Fprintf(out, "  complete its silver table keeps its state from before this request; then one merge replaces it.\n")
	return nil
}
