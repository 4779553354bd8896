package mysql

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/internal/change"
)

// Column ids. MySQL has no identity of a column that survives a rename
// (PostgreSQL has attnum), and the lake renames a column only by one
// (change.Field.ID, bronze's tidemark.column-ids): without it, RENAME
// COLUMN a TO b would land as a new column b, NULL in every row written
// before the rename, in bronze and in silver. So the source numbers the
// columns itself: an id per column name, the ones the lake records
// (pipeline.PropColumnIDs) first, the next unused number for a name it
// has not seen; a RENAME COLUMN or CHANGE COLUMN read in the binlog moves
// the old name's id to the new name, in stream order. A dropped column's
// name keeps its id, so a column added again under it fills the same lake
// column (as MySQL columns always have, by name).

// colIDs is the column numbering of one table (tableCtl.ids): lowercased
// column name (MySQL's column names are case-insensitive) to id. Used by
// the stream goroutine, and by open before the table is streamed.
type colIDs struct {
	byName map[string]int
	last   int
}

// learn takes the ids the lake records (a PropColumnIDs value; "" for
// none). What is known already wins: the stream may have renamed a column
// since the lake recorded its old name, whose id is then the new name's.
func (c *colIDs) learn(raw string) error {
	if raw == "" {
		return nil
	}
	var rec map[string]int
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return fmt.Errorf("the column ids the lake records (%s) cannot be read: %w", raw, err)
	}
	used := map[int]bool{}
	for _, id := range c.byName {
		used[id] = true
	}
	for n, id := range rec {
		c.last = max(c.last, id)
		if _, ok := c.byName[strings.ToLower(n)]; ok || id <= 0 || used[id] {
			continue
		}
		if c.byName == nil {
			c.byName = map[string]int{}
		}
		c.byName[strings.ToLower(n)] = id
	}
	return nil
}

// of is name's id, numbering a name not seen before.
func (c *colIDs) of(name string) int {
	k := strings.ToLower(name)
	if id, ok := c.byName[k]; ok {
		return id
	}
	if c.byName == nil {
		c.byName = map[string]int{}
	}
	c.last++
	c.byName[k] = c.last
	return c.last
}

// rename gives to the id of from (RENAME COLUMN from TO to, CHANGE
// COLUMN from to ...); from is free for a column added later, which gets
// a new id.
func (c *colIDs) rename(from, to string) {
	f, t := strings.ToLower(from), strings.ToLower(to)
	if f == t {
		return
	}
	id := c.of(from)
	delete(c.byName, f)
	c.byName[t] = id
}

// stamp gives s's fields their ids, and reports whether any was numbered
// now (not recorded by the lake yet).
func (c *colIDs) stamp(s *change.Schema) (numbered bool) {
	for i := range s.Fields {
		_, known := c.byName[strings.ToLower(s.Fields[i].Name)]
		numbered = numbered || !known
		s.Fields[i].ID = c.of(s.Fields[i].Name)
	}
	return numbered
}
