package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/change"
	"github.com/tidemark/tidemark/internal/fault"
)

// This file holds what is particular to partitioned tables.
//
// A partitioned table is captured as one table named after its root: the
// publication tidemark creates has publish_via_partition_root = true, so
// pg_publication_tables lists the root (not its leaf partitions), the
// stream's Relation messages carry the root's id and name, and a row moved
// across partitions by an UPDATE arrives as a delete and an insert on the
// root. The snapshot reads the root (every partition) once.
//
// A publication the user created without publish_via_partition_root would
// publish each leaf partition as a table of its own: run refuses it with
// bad_config and the ALTER PUBLICATION that fixes it, rather than writing
// one lake table per leaf that nobody queries.

// checkPartitionRoot refuses publication pub when it publishes partitions
// as tables of their own (publish_via_partition_root = false while a
// published table is a partition).
func checkPartitionRoot(ctx context.Context, conn *pgx.Conn, pub string) error {
	var (
		viaRoot bool
		leaves  []string
	)
	err := conn.QueryRow(ctx, `SELECT p.pubviaroot,
			ARRAY(SELECT format('%I.%I', t.schemaname, t.tablename) FROM pg_publication_tables t
			      JOIN pg_namespace n ON n.nspname = t.schemaname
			      JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
			      WHERE t.pubname = p.pubname AND c.relispartition ORDER BY 1 LIMIT 5)
		FROM pg_publication p WHERE p.pubname = $1`, pub).Scan(&viaRoot, &leaves)
	if err != nil {
		return classify(fmt.Errorf("look up publication %q: %w", pub, err))
	}
	if viaRoot || len(leaves) == 0 {
		return nil
	}
	return fault.With(fault.ErrBadConfig, fmt.Sprintf(
		"publication %q publishes the partitions of a partitioned table as tables of their own (%s): tidemark captures a partitioned table as one table named after its root. "+
			"Run ALTER PUBLICATION %s SET (publish_via_partition_root = true), then restart (see docs/operations.md, Partitioned tables)",
		pub, strings.Join(leaves, ", "), quoteIdent(pub)), nil)
}

// Attaching a partition brings its rows into the root, and detaching (or
// dropping) one takes them out, without a change event for any of them.
// So the leaf partitions of every captured partitioned table are recorded
// in its bronze table (tidemark.partitions); the publication poll lists
// them, and when they differ from the last list it sent it emits a
// transactional logical message (<prefix>parts) with the new list. The
// stream handles that message in commit order: when a leaf is gone, or a
// new leaf holds data, it re-reads the table online as a re-snapshot
// request (the marker commit of bronze/resnapshot.go, then the ordinary
// chunked snapshot; silver keeps its rows until the re-read is complete
// and then replaces them, internal/silver/resnapshot.go). Because the
// marker sits at the message's place in the stream, every change before
// it is superseded by the re-read, and every change after it applies on
// top. A new, empty leaf (CREATE TABLE … PARTITION OF) needs no re-read.

// PropPartitions records, in a partitioned table's bronze summary, its
// leaf partitions when tidemark last looked (comma-separated, sorted,
// quoted as identifiers).
const PropPartitions = "tidemark.partitions"

// leaf is a leaf partition: its name (schema.name, quoted as needed) and
// whether its heap holds any page (pg_relation_size > 0: it may hold rows).
type leaf struct {
	Name string `json:"n"`
	Data bool   `json:"d,omitempty"`
}

// partsMessage is the content of a <prefix>parts message.
type partsMessage struct {
	Schema string `json:"s"`
	Table  string `json:"t"`
	Leaves []leaf `json:"l"`
}

func leafNames(ls []leaf) string {
	names := make([]string, len(ls))
	for i, l := range ls {
		names[i] = l.Name
	}
	return strings.Join(names, ",")
}

// partitionLeaves returns the leaf partitions of table id, sorted by
// name, and whether id is a partitioned table at all.
func partitionLeaves(ctx context.Context, conn *pgx.Conn, id change.TableID) ([]leaf, bool, error) {
	var (
		kind  string
		names []string
		data  []bool
	)
	// pg_relation_size needs no privilege on the leaf: the role may SELECT
	// only the root.
	err := conn.QueryRow(ctx, `SELECT c.relkind::text,
			ARRAY(SELECT format('%I.%I', ln.nspname, l.relname) FROM pg_partition_tree(c.oid) pt
			      JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
			      WHERE pt.isleaf ORDER BY 1),
			ARRAY(SELECT pg_relation_size(l.oid) > 0 FROM pg_partition_tree(c.oid) pt
			      JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
			      WHERE pt.isleaf ORDER BY format('%I.%I', ln.nspname, l.relname))
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, id.Schema, id.Name).Scan(&kind, &names, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, classify(fmt.Errorf("list the partitions of %s: %w", id, err))
	}
	if kind != "p" || len(names) != len(data) {
		return nil, false, nil
	}
	out := make([]leaf, len(names))
	for i := range names {
		out[i] = leaf{Name: names[i], Data: data[i]}
	}
	return out, true, nil
}

// notePartitions emits a <prefix>parts message for each captured
// partitioned table whose leaves differ from the list in sent (the
// poller's last message; updated).
func (c *Capture) notePartitions(ctx context.Context, conn *pgx.Conn, ids []change.TableID, sent map[change.TableID]string) error {
	for _, id := range ids {
		ls, parted, err := partitionLeaves(ctx, conn, id)
		if err != nil {
			return err
		}
		if !parted {
			continue
		}
		names := leafNames(ls)
		if prev, ok := sent[id]; ok && prev == names {
			continue
		}
		body, _ := json.Marshal(partsMessage{Schema: id.Schema, Table: id.Name, Leaves: ls})
		if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::text)`, c.prefix+"parts", string(body)); err != nil {
			return classify(fmt.Errorf("record the partitions of %s: %w", id, err))
		}
		sent[id] = names
	}
	return nil
}

// partitions handles a <prefix>parts message (stream goroutine): it
// records the table's new leaves and, when a leaf is gone or a new one
// holds data, requests an online re-read of the table.
func (s *stream) partitions(ctx context.Context, content []byte) error {
	var m partsMessage
	if err := json.Unmarshal(content, &m); err != nil {
		return nil // not ours to read (a newer version's message)
	}
	id := change.TableID{Schema: m.Schema, Name: m.Table}
	t := s.tables[id]
	if t == nil {
		return nil
	}
	names := leafNames(m.Leaves)
	if t.leaves == names {
		return nil
	}
	was := map[string]bool{}
	for _, n := range strings.Split(t.leaves, ",") {
		if n != "" {
			was[n] = true
		}
	}
	var gone, added []string
	reread := false
	for _, l := range m.Leaves {
		if was[l.Name] {
			delete(was, l.Name)
			continue
		}
		added = append(added, l.Name)
		reread = reread || l.Data
	}
	for n := range was {
		gone = append(gone, n)
	}
	reread = reread || len(gone) > 0
	t.leaves = names
	props := map[string]string{PropPartitions: names}
	if !reread {
		s.c.log.Info("partitions changed", "table", id.String(), "added", strings.Join(added, ","), "detached", strings.Join(gone, ","))
		return s.c.w.WriteBatch(ctx, id, nil, props)
	}
	// A snapshot of the table still running starts again from its first
	// key (reread).
	why := fmt.Sprintf("partitions changed (attached %s; detached or dropped %s)", strings.Join(added, ","), strings.Join(gone, ","))
	req := partitionRequestID(time.Now())
	s.c.log.Info("re-reading table online", "table", t.id.String(), "request", req, "reason", why)
	return s.reread(ctx, t, req, why, props)
}

// openLeaves sets t.leaves from the recorded list, or, for a partitioned
// table that has none recorded yet (new, or captured by an older
// tidemark), records its current leaves.
func (c *Capture) openLeaves(ctx context.Context, meta *pgx.Conn, t *table, recorded string) error {
	if recorded != "" {
		t.leaves = recorded
		return nil
	}
	ls, parted, err := partitionLeaves(ctx, meta, t.id)
	if err != nil || !parted {
		return err
	}
	t.leaves = leafNames(ls)
	return c.w.WriteBatch(ctx, t.id, nil, map[string]string{PropPartitions: t.leaves})
}
