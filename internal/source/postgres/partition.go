package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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
//
// A leaf can also lose or change its rows with no change event while it
// stays attached: PostgreSQL does not publish a TRUNCATE of a leaf under
// publish_via_partition_root (only one of the root), and a rewrite of a
// leaf (VACUUM FULL, CLUSTER, the leaves of an ALTER TABLE … TYPE … USING
// or a volatile default on the root) emits none either, while the root
// has no relfilenode of its own for rewrite.go to watch. So each leaf's
// relfilenode is recorded too (tidemark.partition-filenodes), and the
// poll's list carries it with the xmin of the leaf's pg_class row: a leaf
// whose relfilenode changed in a transaction other than a TRUNCATE of the
// root the stream decoded (whose xid rewrite.go keeps) was truncated or
// rewritten unseen, and the table is re-read.

// PropPartitions records, in a partitioned table's bronze summary, its
// leaf partitions when tidemark last looked (comma-separated, sorted,
// quoted as identifiers).
const PropPartitions = "tidemark.partitions"

// PropLeafFilenodes records, beside PropPartitions, each leaf's
// pg_class.relfilenode when tidemark last looked (a JSON object, leaf name
// to relfilenode).
const PropLeafFilenodes = "tidemark.partition-filenodes"

// leaf is a leaf partition: its name (schema.name, quoted as needed) and
// whether its heap holds any page (pg_relation_size > 0: it may hold rows).
type leaf struct {
	Name string `json:"n"`
	Data bool   `json:"d,omitempty"`
	Node uint32 `json:"f,omitempty"` // its relfilenode
	Xmin uint32 `json:"x,omitempty"` // the xmin of its pg_class row: the transaction that last changed it
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

// leafFilenodes maps each leaf's name to its relfilenode.
func leafFilenodes(ls []leaf) map[string]uint32 {
	m := make(map[string]uint32, len(ls))
	for _, l := range ls {
		m[l.Name] = l.Node
	}
	return m
}

// leafState is what a change of the leaves is told by: their names and
// relfilenodes.
func leafState(ls []leaf) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.Name + "=" + strconv.FormatUint(uint64(l.Node), 10)
	}
	return strings.Join(parts, ",")
}

// parseLeafFilenodes reads PropLeafFilenodes (nil when absent or
// unreadable: a lake written before it was recorded).
func parseLeafFilenodes(v string) map[string]uint32 {
	var m map[string]uint32
	if v == "" || json.Unmarshal([]byte(v), &m) != nil {
		return nil
	}
	return m
}

func formatLeafFilenodes(m map[string]uint32) string {
	b, _ := json.Marshal(m) // sorted by key
	return string(b)
}

// partitionLeaves returns the leaf partitions of table id, sorted by
// name, and whether id is a partitioned table at all.
func partitionLeaves(ctx context.Context, conn *pgx.Conn, id change.TableID) ([]leaf, bool, error) {
	var (
		kind  string
		names []string
		data  []bool
		nodes []int64
		xmins []int64
	)
	// pg_relation_size needs no privilege on the leaf: the role may SELECT
	// only the root.
	err := conn.QueryRow(ctx, `SELECT c.relkind::text,
			ARRAY(SELECT format('%I.%I', ln.nspname, l.relname) FROM pg_partition_tree(c.oid) pt
			      JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
			      WHERE pt.isleaf ORDER BY 1),
			ARRAY(SELECT pg_relation_size(l.oid) > 0 FROM pg_partition_tree(c.oid) pt
			      JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
			      WHERE pt.isleaf ORDER BY format('%I.%I', ln.nspname, l.relname)),
			ARRAY(SELECT l.relfilenode::bigint FROM pg_partition_tree(c.oid) pt
			      JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
			      WHERE pt.isleaf ORDER BY format('%I.%I', ln.nspname, l.relname)),
			ARRAY(SELECT l.xmin::text::bigint FROM pg_partition_tree(c.oid) pt
			      JOIN pg_class l ON l.oid = pt.relid JOIN pg_namespace ln ON ln.oid = l.relnamespace
			      WHERE pt.isleaf ORDER BY format('%I.%I', ln.nspname, l.relname))
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, id.Schema, id.Name).Scan(&kind, &names, &data, &nodes, &xmins)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, classify(fmt.Errorf("list the partitions of %s: %w", id, err))
	}
	if kind != "p" || len(names) != len(data) || len(names) != len(nodes) || len(names) != len(xmins) {
		return nil, false, nil
	}
	out := make([]leaf, len(names))
	for i := range names {
		out[i] = leaf{Name: names[i], Data: data[i], Node: uint32(nodes[i]), Xmin: uint32(xmins[i])}
	}
	return out, true, nil
}

// notePartitions emits a <prefix>parts message for each captured
// partitioned table whose leaves (or their relfilenodes) differ from the
// list in sent (the poller's last message; updated).
func (c *Capture) notePartitions(ctx context.Context, conn *pgx.Conn, ids []change.TableID, sent map[change.TableID]string) error {
	for _, id := range ids {
		ls, parted, err := partitionLeaves(ctx, conn, id)
		if err != nil {
			return err
		}
		if !parted {
			continue
		}
		names := leafState(ls)
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
// records the table's new leaves and their relfilenodes and, when a leaf
// is gone, a new one holds data, or one was truncated or rewritten with no
// change event, requests an online re-read of the table.
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
	nodes := leafFilenodes(m.Leaves)
	if t.leaves == names && maps.Equal(t.leafNodes, nodes) {
		return nil
	}
	was := map[string]bool{}
	for _, n := range strings.Split(t.leaves, ",") {
		if n != "" {
			was[n] = true
		}
	}
	var gone, added, rewritten []string
	reread := false
	for _, l := range m.Leaves {
		if was[l.Name] {
			delete(was, l.Name)
			// A new relfilenode not made by a TRUNCATE of the root that
			// bronze holds: truncated or rewritten unseen.
			if old, ok := t.leafNodes[l.Name]; ok && l.Node != 0 && old != l.Node && !slices.Contains(t.truncXids, l.Xmin) {
				rewritten = append(rewritten, l.Name)
			}
			continue
		}
		added = append(added, l.Name)
		reread = reread || l.Data
	}
	for n := range was {
		gone = append(gone, n)
	}
	reread = reread || len(gone) > 0 || len(rewritten) > 0
	t.leaves, t.leafNodes = names, nodes
	props := map[string]string{PropPartitions: names, PropLeafFilenodes: formatLeafFilenodes(nodes)}
	if !reread {
		if len(added) > 0 || len(gone) > 0 {
			s.c.log.Info("partitions changed", "table", id.String(), "added", strings.Join(added, ","), "detached", strings.Join(gone, ","))
		}
		return s.c.w.WriteBatch(ctx, id, nil, props)
	}
	// A snapshot of the table still running starts again from its first
	// key (reread).
	var whys []string
	if len(added) > 0 || len(gone) > 0 {
		whys = append(whys, fmt.Sprintf("partitions changed (attached %s; detached or dropped %s)", strings.Join(added, ","), strings.Join(gone, ",")))
	}
	if len(rewritten) > 0 {
		whys = append(whys, fmt.Sprintf("partition %s truncated or rewritten at the source without change events (a TRUNCATE of a partition is not published under publish_via_partition_root)",
			strings.Join(rewritten, ",")))
	}
	why := strings.Join(whys, "; ")
	req := partitionRequestID(time.Now())
	s.c.log.Info("re-reading table online", "table", t.id.String(), "request", req, "reason", why)
	return s.reread(ctx, t, req, why, props)
}

// openLeaves sets t.leaves (and t.leafNodes) from the recorded list in
// props, or, for a partitioned table that has none recorded yet (new, or
// captured by an older tidemark), records its current leaves. Leaves
// recorded without relfilenodes get them from the poll's first list, with
// no re-read.
func (c *Capture) openLeaves(ctx context.Context, meta *pgx.Conn, t *table, props map[string]string) error {
	if recorded := props[PropPartitions]; recorded != "" {
		t.leaves, t.leafNodes = recorded, parseLeafFilenodes(props[PropLeafFilenodes])
		return nil
	}
	ls, parted, err := partitionLeaves(ctx, meta, t.id)
	if err != nil || !parted {
		return err
	}
	t.leaves, t.leafNodes = leafNames(ls), leafFilenodes(ls)
	return c.w.WriteBatch(ctx, t.id, nil, map[string]string{PropPartitions: t.leaves, PropLeafFilenodes: formatLeafFilenodes(t.leafNodes)})
}
