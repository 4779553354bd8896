package postgres

// Start-up checks: what the server and the role must allow, checked before
// anything is created, so that a newcomer's mistake is a named error with
// the fix in one line instead of a raw server error halfway through; and
// the clean-up of what a start that failed created.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

const serverSettings = "see docs/operations.md, PostgreSQL prerequisites"

// checkServer checks the server settings and the role's attributes a
// capture session needs: wal_level = logical, a free replication slot (when
// the slot must be created), a free walsender, and REPLICATION (or
// superuser). A setting is a configuration error (server_config, exit 2);
// a missing attribute is permission_denied, like every other privilege.
func (c *Capture) checkServer(ctx context.Context, meta *pgx.Conn) error {
	var (
		walLevel                     string
		maxSlots, maxSenders         int
		slots                        []string
		senders                      int
		slotExists, slotActive       bool
		super, replication, canLogin bool
	)
	// Walsenders of other roles are visible in pg_stat_activity with their
	// backend_type; if a hardened server hid them, the count is low and the
	// check errs on the side of trying.
	err := meta.QueryRow(ctx, `SELECT current_setting('wal_level'),
			current_setting('max_replication_slots')::int,
			ARRAY(SELECT slot_name::text || CASE WHEN active THEN ' (active)' ELSE '' END FROM pg_replication_slots ORDER BY 1),
			current_setting('max_wal_senders')::int,
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')::int,
			EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
			EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active),
			r.rolsuper, r.rolreplication, r.rolcanlogin
		FROM pg_roles r WHERE r.rolname = current_user`, c.opts.Slot).Scan(
		&walLevel, &maxSlots, &slots, &maxSenders, &senders, &slotExists, &slotActive, &super, &replication, &canLogin)
	if err != nil {
		return classify(fmt.Errorf("read the server's replication settings: %w", err))
	}
	if walLevel != "logical" {
		return fault.With(fault.ErrServerConfig, fmt.Sprintf(
			"the source server has wal_level = %s, and logical replication needs wal_level = logical: "+
				"run ALTER SYSTEM SET wal_level = logical as a superuser, restart PostgreSQL, then rerun (%s)", walLevel, serverSettings), nil)
	}
	if !super && !replication {
		return fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
			"role %q has neither the REPLICATION attribute nor superuser, and a logical replication connection needs one: "+
				"run ALTER ROLE %s REPLICATION as a superuser, then rerun (see docs/operations.md, Minimal grants)",
			c.d.User(), quoteIdent(c.d.User())), nil)
	}
	if !slotExists && len(slots) >= maxSlots {
		return fault.With(fault.ErrServerConfig, fmt.Sprintf(
			"the source server has no free replication slot for %q: max_replication_slots = %d, all in use (%s): "+
				"drop one that is no longer needed (SELECT pg_drop_replication_slot('…')) or raise it (ALTER SYSTEM SET max_replication_slots = %d, then restart PostgreSQL) (%s)",
			c.opts.Slot, maxSlots, strings.Join(slots, ", "), maxSlots+1, serverSettings), nil)
	}
	// A walsender of our own slot is a predecessor not yet gone: the slot
	// check retries that (transient).
	if !slotActive && senders >= maxSenders {
		return fault.With(fault.ErrServerConfig, fmt.Sprintf(
			"the source server has no free walsender: max_wal_senders = %d, %d in use: "+
				"raise it (ALTER SYSTEM SET max_wal_senders = %d, then restart PostgreSQL) or stop a replication client you no longer need (%s)",
			maxSenders, senders, max(maxSenders+1, senders+1), serverSettings), nil)
	}
	return nil
}

// checkListedTables refuses tables: (--tables) entries that do not exist.
func (c *Capture) checkListedTables(ctx context.Context, meta *pgx.Conn) error {
	var missing []string
	for _, t := range c.opts.Tables {
		var ok bool
		err := meta.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p'))`, t.Schema, t.Name).Scan(&ok)
		if err != nil {
			return classify(fmt.Errorf("look up table %s: %w", t, err))
		}
		if !ok {
			missing = append(missing, quoteTable(t))
		}
	}
	if len(missing) > 0 {
		return fault.With(fault.ErrBadConfig, fmt.Sprintf(
			"tables: (--tables) names %s, which is not a table of database %q: check the name (schema.table; a mixed-case name is quoted, \"Sales\".\"Orders\")",
			strings.Join(missing, ", "), c.d.Database()), nil)
	}
	return nil
}

// publicationKind reads whether pub is FOR ALL TABLES.
func publicationKind(ctx context.Context, conn *pgx.Conn, pub string) (allTables bool, err error) {
	if err := conn.QueryRow(ctx, `SELECT puballtables FROM pg_publication WHERE pubname = $1`, pub).Scan(&allTables); err != nil {
		return false, classify(fmt.Errorf("look up publication %q: %w", pub, err))
	}
	return allTables, nil
}

// refuseTablesForAll refuses a tables: list with a FOR ALL TABLES
// publication: the publication sends every table, so the list could not
// narrow what is captured, and capturing more than was asked for silently
// is what a data engineer would not expect.
func (c *Capture) refuseTablesForAll() error {
	list := make([]string, len(c.opts.Tables))
	for i, t := range c.opts.Tables {
		list[i] = quoteTable(t)
	}
	return fault.With(fault.ErrBadConfig, fmt.Sprintf(
		"publication %q is FOR ALL TABLES: it publishes every table of the database, so tables: (--tables) cannot narrow what is captured. "+
			"Omit --tables to capture every table, or create a publication with a table list (CREATE PUBLICATION %s FOR TABLE %s) and pass it with --publication",
		c.opts.Publication, quoteIdent(c.opts.Publication+"_tables"), strings.Join(list, ", ")), nil)
}

// checkCanCreatePublication checks, before CREATE PUBLICATION, that the
// role may create it: FOR ALL TABLES needs a superuser, FOR TABLE needs
// CREATE on the database and ownership of every listed table.
func (c *Capture) checkCanCreatePublication(ctx context.Context, meta *pgx.Conn) error {
	var super, create bool
	if err := meta.QueryRow(ctx, `SELECT rolsuper, has_database_privilege(current_database(), 'CREATE') FROM pg_roles WHERE rolname = current_user`).Scan(&super, &create); err != nil {
		return classify(fmt.Errorf("check the right to create publication %q: %w", c.opts.Publication, err))
	}
	if super {
		return nil
	}
	pub := quoteIdent(c.opts.Publication)
	if len(c.opts.Tables) == 0 {
		return fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
			"the source role may not create publication %q (FOR ALL TABLES needs a superuser): create it beforehand as a superuser "+
				"(CREATE PUBLICATION %s FOR ALL TABLES) or as the tables' owner (CREATE PUBLICATION %s FOR TABLE ...), or list the tables with --tables; "+
				"see docs/operations.md, Minimal grants", c.opts.Publication, pub, pub), nil)
	}
	var notOwned []string
	for _, t := range c.opts.Tables {
		var own bool
		err := meta.QueryRow(ctx, `SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&own)
		if err != nil {
			return classify(fmt.Errorf("check the owner of table %s: %w", t, err))
		}
		if !own {
			notOwned = append(notOwned, quoteTable(t))
		}
	}
	if !create || len(notOwned) > 0 {
		why := "CREATE on the database"
		if create {
			why = "ownership of " + strings.Join(notOwned, ", ")
		} else if len(notOwned) > 0 {
			why += " and ownership of " + strings.Join(notOwned, ", ")
		}
		return fault.With(fault.ErrPermissionDenied, fmt.Sprintf(
			"the source role may not create publication %q (FOR TABLE needs CREATE on the database and ownership of the tables; it lacks %s): "+
				"create it beforehand as the tables' owner (CREATE PUBLICATION %s FOR TABLE ...), see docs/operations.md, Minimal grants",
			c.opts.Publication, why, pub), nil)
	}
	return nil
}

// keylessAdvice completes a no_primary_key error with how to leave the
// table out, which depends on the publication: a table-list publication
// drops it; a FOR ALL TABLES publication cannot (PostgreSQL refuses ALTER
// PUBLICATION … DROP TABLE for it).
func (c *Capture) keylessAdvice(err error, t change.TableID) error {
	var fe *fault.Error
	if !errors.As(err, &fe) || fe.Code != fault.ErrNoPrimaryKey.Code {
		return err
	}
	listed := slices.Contains(c.opts.Tables, t)
	var how string
	switch {
	case !c.pubAll && c.pubCreated && !c.started:
		how = fmt.Sprintf("or leave it out of --tables (tidemark drops the publication %q this start created)", c.opts.Publication)
	case !c.pubAll && listed:
		how = fmt.Sprintf("or leave it out: remove it from --tables and run ALTER PUBLICATION %s DROP TABLE %s", quoteIdent(c.opts.Publication), showTable(t))
	case !c.pubAll:
		how = fmt.Sprintf("or leave it out: ALTER PUBLICATION %s DROP TABLE %s", quoteIdent(c.opts.Publication), showTable(t))
	case c.pubCreated && !c.started:
		how = fmt.Sprintf("or leave it out: rerun with --tables listing the tables to capture (tidemark drops the FOR ALL TABLES publication %q this start created, and creates one with that list)", c.opts.Publication)
	default:
		how = fmt.Sprintf("or leave it out: publication %q is FOR ALL TABLES, which cannot leave a table out, so create a publication with a table list "+
			"(CREATE PUBLICATION name FOR TABLE ...) and pass it with --publication (to a new pipeline, --name, if this one has already started)", c.opts.Publication)
	}
	return fault.With(fault.ErrNoPrimaryKey, fe.Msg+"; "+how, fe.Err)
}

// cleanupFailedStart undoes what a start that failed with err created
// before the pipeline had a checkpoint: the publication it created. A
// publication that existed before is never dropped, and neither is one of a
// pipeline that has started (its slot decodes with it). Transient errors are
// retried by the next session, which reuses what this one created. If the
// drop fails, err names the publication and the command to remove it.
func (c *Capture) cleanupFailedStart(meta *pgx.Conn, err error) error {
	if err == nil || !c.pubCreated || c.started || classOf(err) == fault.Transient || errors.Is(err, context.Canceled) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, derr := meta.Exec(ctx, "DROP PUBLICATION IF EXISTS "+quoteIdent(c.opts.Publication)); derr != nil {
		return fmt.Errorf("%w (publication %q, created by this start, was left behind: remove it with DROP PUBLICATION %s)",
			err, c.opts.Publication, quoteIdent(c.opts.Publication))
	}
	c.pubCreated = false
	c.log.Info("dropped the publication this failed start created", "publication", c.opts.Publication)
	return err
}

// dropCreatedSlot drops the slot ensureSlot just created when recording
// its first checkpoint failed for good and no checkpoint exists: a slot
// nothing refers to would only retain WAL. When the checkpoint's outcome
// is unknown (a transient failure), the slot is kept: the next session
// reuses it.
func (c *Capture) dropCreatedSlot(meta *pgx.Conn, err error) error {
	if classOf(err) == fault.Transient {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ok, lerr := c.w.LoadCheckpoint(ctx); lerr != nil || ok {
		return err
	}
	if _, derr := meta.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, c.opts.Slot); derr != nil {
		return fmt.Errorf("%w (replication slot %q, created by this start, was left behind: remove it with SELECT pg_drop_replication_slot('%s'))",
			err, c.opts.Slot, strings.ReplaceAll(c.opts.Slot, "'", "''"))
	}
	c.log.Info("dropped the replication slot this failed start created", "slot", c.opts.Slot)
	return err
}
