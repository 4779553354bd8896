package mysql

// This file is where a captured table's primary-key change in the binlog
// is handled (issue 13). Today it is only named, not followed: silver
// keeps merging by the key the table was captured with. Following it, as
// the PostgreSQL source does (internal/source/postgres/rekey.go), means:
// at the DDL's binlog position, commit what came before, write the
// re-read marker carrying the new key (pipeline.PropKey beside
// PropSnapshot pending, PropResnapshot and its reason), then admit the
// table to the chunked snapshot again on the new key; silver then
// rebuilds the table on the new key (internal/silver/rekey.go) with no
// MySQL-specific code. DDL.NewKey and DDL.KeyDropped carry what that
// needs from the statement.

// keyChanged names a primary-key change of captured table t by statement
// d. A key dropped with nothing replacing it would make the table keyless;
// it keeps its old key (warning mysql_key_dropped). A key replaced by
// another is not followed yet (warning mysql_key_changed): rebuilding the
// table with tidemark resnapshot --replace captures it on its new key.
// Stream goroutine.
func (s *stream) keyChanged(t *table, d DDL) {
	if d.KeyDropped && len(d.NewKey) == 0 {
		s.c.log.Warn("the primary key of a captured table was dropped with no key replacing it: the table stays keyed by its old key",
			"warning", "mysql_key_dropped", "table", t.id.String(), "key", t.schema.Key)
		return
	}
	s.c.log.Warn("the primary key of a captured table changed; silver keeps merging by the old key: rebuild the table with tidemark resnapshot --replace",
		"warning", "mysql_key_changed", "table", t.id.String(), "key", t.schema.Key, "new_key", d.NewKey)
}
